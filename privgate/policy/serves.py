"""The policy's ``serves:`` block: what an API-released model returns to whoever queries it.

``serves: {output: logits | probabilities | label, top_k: K, decimals: D}`` under ``release: api``: the
model is attacked through exactly what the API returns (:mod:`privgate.inputs.surface` applies it to every
black-box query, the reference models' included). Without it an API serves every class's probability at
full precision; with ``release: model`` it is an error (whoever holds the weights computes any output).
See docs/policies.md and docs/served.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from privgate.inputs.validation import FieldError

#: Most decimals a served value may be rounded to (float64 carries ~15 significant digits).
MAX_DECIMALS = 12

#: The attacks a policy that lists none runs when its API serves labels only: the label-only family
#: (Yeom et al. 2018's correctness; Choquette-Choo et al. 2021, arXiv 2007.14321; Li & Zhang 2021,
#: arXiv 2007.15528).
LABEL_ATTACKS: dict[str, dict] = {"correctness": {}, "label_only": {}, "boundary": {}}


class Serves(BaseModel):
    """What the API returns for one query (one input row)."""

    model_config = ConfigDict(extra="forbid")

    output: Literal["logits", "probabilities", "label"] = Field(
        default="probabilities",
        description="logits: the model's scores (read as log-probabilities, their normalised form); "
        "probabilities: a distribution over the classes; label: the predicted class only.",
    )
    top_k: int | None = Field(  # the bounds are checked in _ranges, for a message that says what they mean
        default=None,
        description="Only the k highest classes are returned (default: every class).",
        json_schema_extra={"minimum": 1},
    )
    decimals: int | None = Field(
        default=None,
        description=f"Returned values are rounded to this many decimals (0 to {MAX_DECIMALS}).",
        json_schema_extra={"minimum": 0, "maximum": MAX_DECIMALS},
    )

    @model_validator(mode="after")
    def _ranges(self) -> Serves:
        if self.top_k is not None and self.top_k < 1:
            raise FieldError("top_k", f"must be at least 1 (the number of classes returned), got {self.top_k}")
        if self.decimals is not None and not 0 <= self.decimals <= MAX_DECIMALS:
            raise FieldError("decimals", f"must be between 0 and {MAX_DECIMALS}, got {self.decimals}")
        if self.output == "label" and (self.top_k is not None or self.decimals is not None):
            which = "top_k" if self.top_k is not None else "decimals"
            raise FieldError(which, "applies to returned scores; an API that serves the label returns no scores")
        return self


def check_release(serves: Serves | None, release: str) -> None:
    """``serves`` only describes an API: with ``release: model`` it is an error (the weights give any output)."""
    if serves is not None and release != "api":
        raise FieldError(
            "serves",
            f"describes what an API returns, but release is '{release}': whoever holds the weights computes "
            "any output (use release: api, or drop serves)",
        )


__all__ = ["LABEL_ATTACKS", "MAX_DECIMALS", "Serves", "check_release"]
