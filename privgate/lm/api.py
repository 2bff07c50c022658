"""Language-model audits from paths: a model directory, text files, optional reference model and canaries.

:func:`check_lm` is :func:`privgate.api.check` for a Hugging Face model
directory; :func:`audit_text_paths` is the CLI's path. Both load and validate
everything at the door (one :class:`~privgate.errors.PrivgateError` sentence
for bad input) and hand the loaded inputs to :func:`privgate.lm.gate.audit_lm`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privgate.errors import TargetError
from privgate.lm.options import TextOptions
from privgate.options import RunOptions
from privgate.report.model import Report


def _resolve(path: str | None, base: Path) -> str | None:
    """A path as given when it exists (relative to the working directory), else relative to ``base``."""
    if path is None:
        return None
    p = Path(path)
    return str(p if p.is_absolute() or p.exists() else base / p)


def check_lm(
    model: str | Path,
    policy: Any,
    members: str | Path,
    nonmembers: str | Path,
    *,
    text: TextOptions | None = None,
    trust_checkpoint: bool = False,
    options: RunOptions | None = None,
    base: Path | None = None,
    population: str | Path | None = None,
    recipe: Any = None,
) -> Report:
    """Audit the model directory ``model`` against ``policy`` on text files of members and non-members.

    ``recipe`` (a language-model recipe file or :class:`~privgate.lm.recipe.LMRecipe`) and ``population`` (a
    text file of records of the same distribution, neither members nor non-members) let privgate fine-tune the
    reference models of LiRA and RMIA (:mod:`privgate.lm.references`).
    """
    from privgate.api import as_policy
    from privgate.lm.gate import audit_lm
    from privgate.lm.loading import CAUSAL, load_model_dir
    from privgate.lm.text import TextAudit, load_texts

    text = text or TextOptions()
    run = (options or RunOptions()).resolved()  # a device that does not exist: exit 2 before loading
    where = base or Path.cwd()
    pol = as_policy(policy)
    canaries = _resolve(text.canaries, where)
    if canaries is not None and not Path(canaries).is_file():
        raise TargetError(f"{canaries}: canaries file not found.")
    canary_rows = []
    if canaries is not None:
        from privgate.lm.canaries import read_canaries

        canary_rows = read_canaries(canaries, text.max_canaries)  # a bad canaries file: refused before the model
    lm = load_model_dir(model, base_model=_resolve(text.base_model, where), trust_checkpoint=trust_checkpoint)
    if canary_rows and lm.kind == CAUSAL:
        from privgate.lm.canary_exposure import check_fits

        check_fits([(f"{canaries}, line {n}", c) for n, c in canary_rows], lm.tokenizer, lm.context)
    read = text_reading(text, lm)
    lm_recipe = _recipe(recipe, where) if lm.kind == CAUSAL else None
    pop = None
    if population is not None and lm.kind == CAUSAL:
        pop = load_texts(_resolve(str(population), where), "population", **read)
    data = TextAudit(
        load_texts(_resolve(str(members), where), "members", **read),
        load_texts(_resolve(str(nonmembers), where), "non-members", **read),
        pop,
    )
    if lm.kind != CAUSAL:
        from privgate.lm.classifier import audit_classifier

        return audit_classifier(lm, data, pol, options=run, batch_size=text.batch_size)
    reference = None
    if text.reference_model is not None:
        reference = load_model_dir(_resolve(text.reference_model, where), trust_checkpoint=trust_checkpoint)
        if reference.kind != CAUSAL:
            raise TargetError(f"{text.reference_model}: the reference model is not a causal language model.")
        if len(reference.tokenizer) != len(lm.tokenizer) or reference.tokenizer.get_vocab() != lm.tokenizer.get_vocab():
            raise TargetError(
                f"{text.reference_model}: the reference model's tokenizer differs from the target's, so their "
                "log-probabilities of a record are not comparable."
            )
    return audit_lm(
        lm,
        data,
        pol,
        reference=reference,
        canaries=canaries,
        options=run,
        batch_size=text.batch_size,
        recipe=lm_recipe,
        max_canaries=text.max_canaries,
    )


def text_reading(text: TextOptions, lm: Any) -> dict[str, Any]:
    """How :func:`privgate.lm.text.load_texts` reads a model's text records: fields, labels and limits.

    Every record is cut to :func:`privgate.lm.scoring.char_limit` of the model's context when read, so nothing
    downstream (scoring, extraction, the shift guard, a classifier) handles more of a record than a context holds.
    """
    from privgate.lm.loading import CAUSAL
    from privgate.lm.scoring import char_limit

    return {
        "text_field": text.text_field,
        "text_column": text.text_column,
        "labelled": lm.kind != CAUSAL,
        "max_records": text.max_records,
        "max_bytes": text.max_text_mib << 20,
        "max_chars": char_limit(lm.context),
    }


def _recipe(recipe: Any, where: Path) -> Any:
    """The language-model recipe given (a file or an :class:`LMRecipe`), or ``None``; anything else is bad input."""
    if recipe is None:
        return None
    from privgate.errors import RecipeError
    from privgate.lm.recipe import LMRecipe, is_lm_recipe, load_lm_recipe

    if isinstance(recipe, LMRecipe):
        return recipe
    if not is_lm_recipe(recipe):
        raise RecipeError(
            f"{recipe}: a language model's recipe is a YAML file (base model and fine-tuning settings, "
            "privgate.lm.recipe), not a Python recipe."
        )
    return load_lm_recipe(_resolve(str(recipe), where))


def audit_text_paths(sources: Any, run: RunOptions) -> Report:
    """:func:`privgate.api.check` for a model directory (``sources``: its CheckSettings)."""
    base = (list(sources.search_dirs) or [Path.cwd()])[0]
    return check_lm(
        sources.model,
        sources.policy,
        sources.members,
        sources.nonmembers,
        text=sources.text,
        trust_checkpoint=sources.trust_checkpoint,
        options=run,
        base=base,
        population=sources.population,
        recipe=sources.recipe,
    )


__all__ = ["TextOptions", "audit_text_paths", "check_lm", "text_reading"]
