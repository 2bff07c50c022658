"""How a policy written for classifiers applies to a causal language model.

A policy names attacks on a classifier's outputs (loss, entropy, the learned
attack …). A causal language model has no class probabilities: its outputs are
next-token distributions over a record. So for a language model every
black-box or label-only membership attack of a policy stands for the
language-model family (:data:`LM_FAMILY`: loss, zlib, reference ratio, Min-K%,
Min-K%++ and their learned combination), the checks stay as written (their
``best`` chooses among the family), and the attacks that do not apply are
reported as skipped with the reason:

* the blind baseline becomes the distribution-shift guard, which the
  language-model gate always runs (:mod:`privgate.lm.gate`);
* reference-model attacks (LiRA, RMIA, shadow models) need reference language
  models fine-tuned by privgate on population text, which this version does
  not train: ``reference_ratio`` with ``--reference-model DIR`` is the
  reference-calibrated attack;
* white-box attacks on classifiers (gradients, inversion, attribute inference)
  do not apply.

Attacks of the family, and the measurements ``canary_exposure`` and
``extraction``, run as the policy names them. Every translated policy keeps its
name, confidence and checks, so its error budget is spent as on a classifier.
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
_REFERENCE = ("lira", "rmia", "shadow", "learned_reference")


def why_not(name: str) -> str | None:
    """Why a policy's attack ``name`` does not run on a causal language model (``None``: it runs, or is translated)."""
    from privgate.attacks import threat_model_of

    if name in LM_FAMILY or name in MEASUREMENTS or name == "blind":
        return None
    if name in _REFERENCE:
        return (
            f"'{name}' needs reference language models fine-tuned by privgate on population text, which this version "
            "does not train; 'reference_ratio' with --reference-model DIR is the reference-calibrated attack"
        )
    if threat_model_of(name) == "white-box" or name == "attribute":
        return f"'{name}' attacks classifiers and does not apply to a causal language model"
    return None


def lm_attacks(attacks: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A policy's attacks as they run on a causal language model (module docstring)."""
    out: dict[str, dict[str, Any]] = {}
    for name, options in attacks.items():
        if name in LM_FAMILY or name in MEASUREMENTS:
            out[name] = options
        elif name == "blind" or why_not(name) is not None:
            continue
        else:
            for member, opts in LM_FAMILY.items():
                out.setdefault(member, dict(opts))
    return out


def skipped_attacks(policy: Policy) -> dict[str, str]:
    """The policy's attacks that do not run on a causal language model, with the reason."""
    return {n: why for n in policy.attacks_to_run() if (why := why_not(n)) is not None}


def lm_policy(policy: Policy) -> Policy:
    """``policy`` (and every policy it extends) with its attacks and named checks translated (module docstring)."""
    parent = lm_policy(policy.parent) if policy.parent is not None else None
    checks = [c.model_copy(update={"attack": RENAMED.get(c.attack, c.attack)}) for c in policy.checks]
    out = policy.model_copy(update={"attacks": lm_attacks(policy.own_attacks()), "checks": checks})
    out._parent = parent
    out._source = policy.source
    return out


__all__ = ["LM_FAMILY", "MEASUREMENTS", "RENAMED", "lm_attacks", "lm_policy", "skipped_attacks", "why_not"]
