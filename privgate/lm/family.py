"""How a policy written for classifiers applies to a causal language model.

Every black-box or label-only membership attack of a policy stands for the language-model family
(:data:`LM_FAMILY`); the checks stay as written. The blind baseline becomes the shift guard; LiRA and RMIA become
``lm_lira``/``lm_rmia`` (:mod:`privgate.lm.attacks.lira`) with a language-model recipe, else are skipped with the
reason; shadow models, the learned reference attack and white-box attacks do not apply; ``canary_exposure`` and
``extraction`` run as named. A translated policy keeps its name, confidence and checks, so its error budget is
spent as on a classifier. Details: ``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

from typing import Any

from privgate.policy import Policy

#: The language-model membership attacks that stand for a policy's classifier attacks.
LM_FAMILY: dict[str, dict[str, Any]] = {
    "lm_loss": {},
    "zlib": {},
    "min_k": {},
    "min_k_pp": {},
    "reference_ratio": {},
    "lm_learned": {},
}
#: Attacks that measure a metric of a language model rather than score membership.
MEASUREMENTS = ("canary_exposure", "extraction")
#: A check naming one of these classifier attacks names this language-model attack.
RENAMED = {"loss": "lm_loss", "learned": "lm_learned", "true_class_confidence": "lm_loss"}
#: Reference-model attacks with a language-model version (given a recipe), and the options that carry over.
FINE_TUNED = {
    "lira": ("lm_lira", ("models", "fixed_variance", "min_population")),
    "rmia": ("lm_rmia", ("models", "a", "gamma", "min_population")),
}
_REFERENCE = ("lira", "rmia", "shadow", "learned_reference")


def why_not(name: str, recipe: bool = False) -> str | None:
    """Why a policy's attack ``name`` does not run on a causal language model (``None``: it runs, or is translated).

    ``recipe``: a language-model recipe was given, so LiRA and RMIA run as ``lm_lira`` and ``lm_rmia``.
    """
    from privgate.attacks import threat_model_of

    if name in LM_FAMILY or name in MEASUREMENTS or name == "blind" or name in ("lm_lira", "lm_rmia"):
        return None
    if name in FINE_TUNED and recipe:
        return None
    if name in FINE_TUNED:
        return (
            f"'{name}' needs reference language models fine-tuned by privgate on population text: give a "
            "language-model recipe (--recipe recipe.yaml) and --population FILE; 'reference_ratio' with "
            "--reference-model DIR is the reference-calibrated attack without one"
        )
    if name in _REFERENCE:
        return (
            f"'{name}' has no language-model version; 'lm_lira' and 'lm_rmia' (with --recipe) and "
            "'reference_ratio' (with --reference-model DIR) are the reference-calibrated attacks"
        )
    if threat_model_of(name) == "white-box" or name == "attribute":
        return f"'{name}' attacks classifiers and does not apply to a causal language model"
    return None


def lm_attacks(attacks: dict[str, dict[str, Any]], recipe: bool = False) -> dict[str, dict[str, Any]]:
    """A policy's attacks as they run on a causal language model (module docstring)."""
    out: dict[str, dict[str, Any]] = {}
    for name, options in attacks.items():
        if name in LM_FAMILY or name in MEASUREMENTS or name in ("lm_lira", "lm_rmia"):
            out[name] = options
        elif name == "blind" or why_not(name, recipe) is not None:
            continue
        elif name in FINE_TUNED:
            lm_name, kept = FINE_TUNED[name]
            out.setdefault(lm_name, {k: v for k, v in options.items() if k in kept})
        else:
            for member, opts in LM_FAMILY.items():
                out.setdefault(member, dict(opts))
    return out


def skipped_attacks(policy: Policy, recipe: bool = False) -> dict[str, str]:
    """The policy's attacks that do not run on a causal language model, with the reason."""
    return {n: why for n in policy.attacks_to_run() if (why := why_not(n, recipe)) is not None}


def lm_policy(policy: Policy, recipe: bool = False) -> Policy:
    """``policy`` (and every policy it extends) with its attacks and named checks translated (module docstring)."""
    parent = lm_policy(policy.parent, recipe) if policy.parent is not None else None
    renamed = {**RENAMED, **({k: v[0] for k, v in FINE_TUNED.items()} if recipe else {})}
    checks = [c.model_copy(update={"attack": renamed.get(c.attack, c.attack)}) for c in policy.checks]
    out = policy.model_copy(update={"attacks": lm_attacks(policy.own_attacks(), recipe), "checks": checks})
    out._parent = parent
    out._source = policy.source
    return out


__all__ = [
    "FINE_TUNED",
    "LM_FAMILY",
    "MEASUREMENTS",
    "RENAMED",
    "lm_attacks",
    "lm_policy",
    "skipped_attacks",
    "why_not",
]
