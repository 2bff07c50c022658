"""Where a hardened language model goes: a new ``save_pretrained`` folder, never over anything (light imports).

The CLI plans its outputs before any work (:func:`privgate.io.guards.check_outputs`);
a language model's hardened output is one folder — the weights, tokenizer,
model card with the DP statement (``README.md``) and the JSON report — that
must not exist yet, written all or nothing (:mod:`privgate.io.staging`).
"""

from __future__ import annotations

from pathlib import Path

from privgate.errors import PrivgateError
from privgate.io.guards import Named


def default_output(model_dir: str | Path) -> Path:
    """``runs/model`` → ``runs/model.hardened`` (a new folder beside the input)."""
    p = Path(str(model_dir).rstrip("/\\"))
    return p.with_name(f"{p.name}.hardened")


def refuse_existing(out: Path) -> None:
    """A hardened model is never written over anything: the folder must not exist yet."""
    if out.exists() or out.is_symlink():
        raise PrivgateError(
            f"{out}: the hardened model's folder already exists; privgate never writes over a model, so choose "
            "another --output-model or remove it."
        )


def planned_output(out: Path, default: bool) -> Named:
    """The hardened folder as a planned output (refused at once when it exists)."""
    refuse_existing(out)
    how = "the default, beside the model" if default else "--output-model"
    return Named(out, f"the hardened model's folder ({how})", folder=True)


def recipe_inputs(spec: str | None) -> list[Named]:
    """The language-model recipe file as an input the outputs must not overwrite."""
    return [Named(Path(spec), "the recipe")] if spec else []


__all__ = ["default_output", "planned_output", "recipe_inputs", "refuse_existing"]
