"""The door of a model audit: the model, data and recipe of a check or a harden, loaded and validated once.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privgate.errors import DataError, TargetError
from privgate.inputs.coerce import as_dataset, as_lm_recipe, as_recipe, as_target, resolved
from privgate.inputs.data import AuditData, Dataset
from privgate.inputs.targets import check_model_path, is_huggingface

if TYPE_CHECKING:
    from privgate.inputs.target import Target
    from privgate.inputs.text import TextAudit, TextSet
    from privgate.policy import Policy


@dataclass
class Inputs:
    """Everything a model audit needs, loaded and validated at the door.

    Attributes:
        policy, recipe, target: as loaded (a language model's recipe: an
            :class:`~privgate.inputs.lm_recipe.LMRecipe`).
        data: :class:`~privgate.inputs.data.AuditData`, or a :class:`~privgate.inputs.text.TextAudit` of records.
        members: the whole member set (``AuditData`` may sub-sample it to balance the audit).
    """

    policy: Policy
    recipe: Any
    target: Target
    data: AuditData | TextAudit
    members: Dataset | TextSet


def base_of(settings: Any) -> Path:
    """The folder relative paths and ``module:attr`` specs of ``settings`` are looked up in first."""
    return (list(settings.search_dirs) or [Path.cwd()])[0]


def _loaded_policy(settings: Any) -> Policy:
    """``settings.policy``, which the caller has loaded (:func:`privgate.policy.as_policy`)."""
    if isinstance(settings.policy, (str, Path)):
        raise TypeError("the door takes a loaded policy: load settings.policy first (privgate.load_policy)")
    return settings.policy


def load_inputs(settings: Any, seed: int = 0, *, recipe_for_audit: bool = True) -> Inputs:
    """Recipe, model and audit data of ``settings`` (a CheckSettings whose policy is loaded); bad input is one
    PrivgateError.

    ``recipe_for_audit``: a language model's recipe is read for the reference models of its audit (a harden's
    recipe is the DP fine-tune's, read by its task).
    """
    pol = _loaded_policy(settings)
    if is_huggingface(settings.model):
        return load_text_inputs(settings, recipe_for_audit=recipe_for_audit)
    dirs = list(settings.search_dirs)
    # the model's path and the data first: a run refused on them never imports torch
    if isinstance(settings.model, (str, Path)):
        check_model_path(settings.model)
    base = base_of(settings)

    def dataset(value: Any, role: str) -> Dataset:
        return as_dataset(value, role, settings.label_column, base)

    train = dataset(settings.members, "members")
    population = dataset(settings.population, "population") if settings.population is not None else None
    nonmembers = dataset(settings.nonmembers, "non-members")
    data = AuditData(train, nonmembers, population, seed=seed, drop_duplicates=settings.drop_duplicates)
    rec = as_recipe(settings.recipe, dirs)
    target = as_target(settings.model, rec, settings.trust_checkpoint, settings.access, settings.trust_types)
    return Inputs(pol, rec, target, data, train)


def text_reading(text: Any, lm: Any) -> dict[str, Any]:
    """How :func:`privgate.inputs.text.load_texts` reads a model's text records: fields, labels and limits.

    Every record is cut to :func:`privgate.inputs.text.char_limit` of the model's context when read, so nothing
    downstream (scoring, extraction, the shift guard, a classifier) handles more of a record than a context holds.
    """
    from privgate.inputs.targets.hf import CAUSAL
    from privgate.inputs.text import char_limit

    return {
        "text_field": text.text_field,
        "text_column": text.text_column,
        "labelled": lm.kind != CAUSAL,
        "max_records": text.max_records,
        "max_bytes": text.max_text_mib << 20,
        "max_chars": char_limit(lm.context),
    }


def load_text_inputs(settings: Any, *, recipe_for_audit: bool = True) -> Inputs:
    """The inputs of a Hugging Face model folder's audit (module docstring), as :func:`load_inputs` returns them."""
    from privgate.inputs.targets.hf import CAUSAL, load_model_dir
    from privgate.inputs.targets.hf_target import hf_target
    from privgate.inputs.text import TextAudit, load_texts

    text, trust, where = settings.text, settings.trust_checkpoint, base_of(settings)
    pol = _loaded_policy(settings)
    if getattr(settings, "drop_duplicates", False):
        raise DataError(
            "--drop-duplicates applies to rows of arrays and tables; remove a record that is both a member and a "
            "non-member from both text files."
        )
    canaries = resolved(text.canaries, where)
    if canaries is not None and not Path(canaries).is_file():
        raise TargetError(f"{canaries}: canaries file not found.")
    canary_rows = []
    if canaries is not None:
        from privgate.inputs.canaries import read_canaries

        canary_rows = read_canaries(canaries, text.max_canaries)  # a bad canaries file: refused before the model
    given = getattr(settings.model, "lm", None)  # a folder loaded already (privgate.inputs.coerce.as_target)
    lm = given or load_model_dir(settings.model, base_model=resolved(text.base_model, where), trust_checkpoint=trust)
    causal = lm.kind == CAUSAL
    if canary_rows and causal:
        from privgate.inputs.canaries import check_fits

        check_fits([(f"{canaries}, line {n}", c) for n, c in canary_rows], lm.tokenizer, lm.context)
    read = text_reading(text, lm)
    recipe = as_lm_recipe(settings.recipe, (where,)) if causal and recipe_for_audit else None
    pop = None
    if settings.population is not None and causal and recipe_for_audit:
        pop = load_texts(resolved(str(settings.population), where), "population", **read)
    members = load_texts(resolved(str(settings.members), where), "members", **read)
    nonmembers = load_texts(resolved(str(settings.nonmembers), where), "non-members", **read)
    data = TextAudit(members, nonmembers, pop, canaries=canaries, max_canaries=text.max_canaries)
    reference = _reference(text, lm, where, trust) if causal else None
    return Inputs(pol, recipe, hf_target(lm, reference=reference, batch_size=text.batch_size), data, members)


def _reference(text: Any, lm: Any, where: Path, trust: bool) -> Any:
    """The reference model a causal language model's records are compared with (``--reference-model``), or None."""
    from privgate.inputs.targets.hf import CAUSAL, load_model_dir

    if text.reference_model is None:
        return None
    reference = load_model_dir(resolved(text.reference_model, where), trust_checkpoint=trust)
    if reference.kind != CAUSAL:
        raise TargetError(f"{text.reference_model}: the reference model is not a causal language model.")
    if len(reference.tokenizer) != len(lm.tokenizer) or reference.tokenizer.get_vocab() != lm.tokenizer.get_vocab():
        raise TargetError(
            f"{text.reference_model}: the reference model's tokenizer differs from the target's, so their "
            "log-probabilities of a record are not comparable."
        )
    return reference


__all__ = ["Inputs", "base_of", "load_inputs", "load_text_inputs", "text_reading"]
