"""Privacy assertions for test suites: a policy built in code, run through ``privgate.check``.

Each assertion builds a :class:`privgate.Policy` with one check per bound, audits with :func:`privgate.check`
and raises :class:`PrivacyAssertionError` (an ``AssertionError`` naming attack, metric, value with interval,
threshold and sample sizes) when a check fails. An undecided check is never a pass: it fails, or skips with
``on_inconclusive="skip"`` (pytest ini ``privgate_on_inconclusive``; raised as ``unittest.SkipTest``). On
success the :class:`privgate.Report` is returned. Nothing here imports pytest or torch at import time.
"""

from __future__ import annotations

import unittest
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from privgate.inputs.targets import is_huggingface  # a Hugging Face folder: audited on text files

if TYPE_CHECKING:
    from privgate.policy import Check, Policy
    from privgate.recipe import Recipe
    from privgate.report.model import Report

OnInconclusive = Literal["fail", "skip"]
Observer = Callable[["Report", str], None]

#: Settings the pytest plugin may change for a session (restored when it ends): ``on_inconclusive``, and
#: ``run``, settings of :class:`privgate.options.RunOptions` for every audit (the session's threads).
settings: dict[str, Any] = {"on_inconclusive": "fail"}
_observers: list[Observer] = []


class PrivacyAssertionError(AssertionError):
    """A privacy assertion that did not hold; ``report`` has every number behind it."""

    def __init__(self, message: str, report: Report) -> None:
        super().__init__(message)
        self.report = report


# --------------------------------------------------------------------------- observers


def add_observer(fn: Observer) -> None:
    """Receive ``(report, label)`` for every audit run by this module (the innermost observer only)."""
    _observers.append(fn)


def remove_observer(fn: Observer) -> None:
    if fn in _observers:
        _observers.remove(fn)


def _notify(report: Report, label: str) -> None:
    if _observers:
        _observers[-1](report, label)


# --------------------------------------------------------------------------- running


def run_check(
    model: Any,
    policy: Policy | str,
    members: Any,
    nonmembers: Any,
    *,
    population: Any = None,
    recipe: Recipe | str | None = None,
    seed: int = 0,
    trust_checkpoint: bool = False,
    budget_s: float | None = None,
    label: str = "privgate",
    drop_duplicates: bool = False,
) -> Report:
    """Audit through :func:`privgate.check` and tell the observers (the pytest summary).

    ``budget_s`` None: the session's (the plugin's ``--privgate-budget``), else no time budget.
    """
    import privgate

    sources = {"population": population, "recipe": recipe, "seed": seed, "trust_checkpoint": trust_checkpoint}
    run = settings.get("run") or {}  # the pytest plugin's threads for its session (pytest_privgate.plugin)
    budget = budget_s if budget_s is not None else settings.get("budget_s")
    report = privgate.check(
        model, policy, members, nonmembers, **sources, budget_s=budget, **run, drop_duplicates=drop_duplicates
    )
    _notify(report, label)
    return report


def _decided(
    label: str,
    model: Any,
    policy: Policy,
    members: Any,
    nonmembers: Any,
    sources: dict[str, Any],
    on: OnInconclusive | None,
) -> Report:
    """Run the assertion's policy and enforce its verdict."""
    __tracebackhide__ = True
    return enforce(run_check(model, policy, members, nonmembers, label=label, **sources), on, label)


def enforce(report: Report, on_inconclusive: OnInconclusive | None = None, what: str = "privacy assertion") -> Report:
    """Raise on a failed check; on an inconclusive one, fail or skip. Returns the report otherwise."""
    __tracebackhide__ = True
    from privgate.report.labels import check_message, over_budget_line

    mode = on_inconclusive or settings.get("on_inconclusive") or "fail"
    if mode not in ("fail", "skip"):
        raise ValueError(f"on_inconclusive must be 'fail' or 'skip', got {mode!r}")
    failed = [c for c in report.checks if c.status == "fail"]
    undecided = [c for c in report.checks if c.status == "inconclusive"]
    where = f"policy '{report.policy.get('name')}' on {report.target.get('path')}"
    over = over_budget_line(report)
    if failed or (undecided and mode == "fail"):
        kind = "failed" if failed else "inconclusive"
        lines = [f"{what} {kind} ({where}):"] + [f"  {check_message(c, report)}" for c in failed + undecided]
        raise PrivacyAssertionError("\n".join(lines + ([f"  {over}"] if over else [])), report)
    if undecided:
        raise unittest.SkipTest(
            f"{what} inconclusive ({where}): "
            + "; ".join([check_message(c, report) for c in undecided] + ([over] if over else []))
        )
    return report


# --------------------------------------------------------------------------- policies in code


def _plan(
    attack: str | Sequence[str],
    recipe: Any,
    options: Mapping[str, Mapping[str, Any]] | None,
    white_box: bool,
    population: bool,
    text: bool = False,
) -> tuple[str, dict[str, dict[str, Any]]]:
    """(check attack, attacks to run) for ``attack`` = 'best', 'all', one name, or several names (best of them)."""
    from privgate.attacks.selection import membership_attacks  # what the bounds need: black-box; 'all': every kind

    if isinstance(attack, str):
        scoped = attack in ("best", "all")
        kw = {"recipe": recipe is not None, "white_box": white_box, "population": population}
        attacks = membership_attacks(attack, **kw, family=None if text else "classifier") if scoped else {attack: {}}
        name = "best" if scoped else attack
    else:
        attacks = {a: {} for a in attack}
        name = "best"
        if not attacks:
            raise ValueError("attack: give 'best', 'all', an attack name or a non-empty list of names")
    for a, opts in (options or {}).items():
        attacks[a] = dict(opts)
    return name, attacks


def _target(model: Any, recipe: Any, trust_checkpoint: bool) -> Any:
    """The model as a :class:`privgate.Target` (loaded once, so the attack plan can see its capabilities)."""
    from privgate.inputs.coerce import as_recipe, as_target

    return as_target(model, as_recipe(recipe), trust_checkpoint)


def make_policy(
    name: str, checks: list[Check], attacks: dict[str, dict[str, Any]], confidence: float, decision: str = "upper_bound"
) -> Policy:
    """A policy for an assertion: confidential data, whole model released (so white-box attacks are allowed)."""
    from privgate.policy import Policy

    return Policy(
        name=name,
        description="built in code by a pytest_privgate assertion",
        sensitivity="confidential",
        release="model",
        confidence=confidence,
        decision=decision,
        attacks=attacks,
        checks=checks,
    )


# --------------------------------------------------------------------------- assertions


def assert_mia_below(
    model: Any,
    members: Any,
    nonmembers: Any,
    *,
    accuracy: float | None = None,
    auc: float | None = None,
    tpr_at_fpr: float | None = None,
    advantage: float | None = None,
    fpr: float = 0.001,
    attack: str | Sequence[str] = "best",
    confidence: float = 0.95,
    seed: int = 0,
    population: Any = None,
    recipe: Recipe | str | None = None,
    attack_options: Mapping[str, Mapping[str, Any]] | None = None,
    decision: str = "upper_bound",
    trust_checkpoint: bool = False,
    on_inconclusive: OnInconclusive | None = None,
    budget_s: float | None = None,
    drop_duplicates: bool = False,
) -> Report:
    """Assert that membership inference against ``model`` stays under every bound given.

    Args:
        model: an ``nn.Module``, a checkpoint, a scikit-learn classifier, a Target or a Hugging Face directory.
        members, nonmembers: ``(x, y)`` arrays or tensors, files, or ``module:function``.
        accuracy: bound on the balanced attack accuracy (0.5 = guessing).
        auc: bound on the attack's ROC AUC.
        tpr_at_fpr: bound on the true-positive rate at false-positive rate ``fpr``.
        advantage: bound on max(TPR − FPR).
        attack: ``"best"`` (the strongest of the available black-box attacks,
            Bonferroni-corrected: :mod:`privgate.attacks.selection`), ``"all"`` (label-only and
            white-box ones too), one attack name, or a list of names.
        confidence: confidence level of every interval.
        seed: drives every random choice.
        on_inconclusive: ``"fail"`` (default) or ``"skip"`` when the data cannot decide.
        budget_s: a time budget for the attacks in seconds (None: the pytest plugin's ``--privgate-budget``,
            else none): the attacks whose estimated cost does not fit are not run and named in the message, and
            a check they would have decided is inconclusive, never passed on the others (docs/compute.md).
        drop_duplicates: rows both members and non-members leave both sides (else they are refused).

    Returns:
        The :class:`privgate.Report` when every check passes.
    """
    __tracebackhide__ = True
    from privgate.policy import Check

    bounds = {"accuracy": accuracy, "auc": auc, "tpr_at_fpr": tpr_at_fpr, "advantage": advantage}
    if all(v is None for v in bounds.values()):
        raise TypeError("assert_mia_below: give at least one bound: accuracy=, auc=, tpr_at_fpr= or advantage=")
    text = is_huggingface(model)
    target = model if text else _target(model, recipe, trust_checkpoint)
    name, attacks = _plan(attack, recipe, attack_options, not text and target.white_box, population is not None, text)
    attacks = {a: o for a, o in attacks.items() if not text or a not in ("canary_exposure", "extraction")}
    checks = [
        Check(
            id=f"mia-{metric.replace('_', '-')}",
            attack=name,
            metric=metric,
            max=bound,
            fpr=fpr if metric == "tpr_at_fpr" else None,
        )
        for metric, bound in bounds.items()
        if bound is not None
    ]
    policy = make_policy("assert_mia_below", checks, attacks, confidence, decision)
    sources = {"population": population, "recipe": recipe, "seed": seed, "trust_checkpoint": trust_checkpoint}
    sources["budget_s"] = budget_s
    sources["drop_duplicates"] = drop_duplicates
    return _decided("assert_mia_below", target, policy, members, nonmembers, sources, on_inconclusive)


def assert_epsilon_below(
    model: Any,
    members: Any,
    nonmembers: Any,
    *,
    epsilon: float,
    delta: float = 1e-5,
    attack: str | Sequence[str] = "best",
    confidence: float = 0.95,
    seed: int = 0,
    population: Any = None,
    recipe: Recipe | str | None = None,
    attack_options: Mapping[str, Mapping[str, Any]] | None = None,
    trust_checkpoint: bool = False,
    on_inconclusive: OnInconclusive | None = None,
    budget_s: float | None = None,
) -> Report:
    """Assert that no attack proves, at ``confidence``, a privacy loss above ``epsilon`` (with ``delta``).

    The empirical ε lower bound comes from the attack's TPR/FPR with
    Clopper-Pearson intervals (Jagielski et al. 2020, arXiv 2006.07709). The
    check fails only when the attack *proves* ε > ``epsilon``; it is
    inconclusive when the audit set is too small to prove a value above
    ``epsilon`` at all (then passing would be a foregone conclusion).
    """
    __tracebackhide__ = True
    from privgate.policy import Check

    target = _target(model, recipe, trust_checkpoint)
    name, attacks = _plan(attack, recipe, attack_options, target.white_box, population is not None)
    checks = [Check(id="empirical-epsilon", attack=name, metric="epsilon_lb", max=epsilon, delta=delta)]
    policy = make_policy("assert_epsilon_below", checks, attacks, confidence)
    sources = {"population": population, "recipe": recipe, "seed": seed, "trust_checkpoint": trust_checkpoint}
    sources["budget_s"] = budget_s  # as assert_mia_below's
    return _decided("assert_epsilon_below", target, policy, members, nonmembers, sources, on_inconclusive)


def assert_inversion_below(
    model: Any,
    members: Any,
    nonmembers: Any,
    *,
    similarity: float,
    attack: str = "inversion",
    options: Mapping[str, Any] | None = None,
    confidence: float = 0.95,
    seed: int = 0,
    population: Any = None,
    recipe: Recipe | str | None = None,
    trust_checkpoint: bool = False,
    on_inconclusive: OnInconclusive | None = None,
) -> Report:
    """Assert that white-box model inversion cannot reconstruct training examples closer than ``similarity``.

    Runs the white-box attack ``attack`` (``inversion``) with ``options`` and
    bounds its ``similarity`` metric. When the attack is not available (not
    implemented in this privgate, or the model has no weights to attack) the
    assertion is inconclusive — it fails (or skips) with
    "inconclusive: attack not available", and never passes.
    """
    __tracebackhide__ = True
    from privgate.policy import Check

    checks = [Check(id="inversion-similarity", attack=attack, metric="similarity", max=similarity)]
    policy = make_policy("assert_inversion_below", checks, {attack: dict(options or {})}, confidence)
    sources = {"population": population, "recipe": recipe, "seed": seed, "trust_checkpoint": trust_checkpoint}
    return _decided("assert_inversion_below", model, policy, members, nonmembers, sources, on_inconclusive)


def _split_data(data: Any) -> tuple[Any, Any, Any]:
    if isinstance(data, Mapping):
        try:
            return data["members"], data["nonmembers"], data.get("population")
        except KeyError as exc:
            raise TypeError(f"assert_policy: data mapping needs 'members' and 'nonmembers' (missing {exc})") from None
    if isinstance(data, (tuple, list)) and len(data) in (2, 3):
        return data[0], data[1], data[2] if len(data) == 3 else None
    raise TypeError(
        "assert_policy: data must be an AuditData, a mapping with 'members'/'nonmembers'[/'population'], or "
        "(members, nonmembers[, population])"
    )


def assert_policy(
    model: Any,
    data: Any,
    policy: Policy | str,
    *,
    recipe: Recipe | str | None = None,
    seed: int = 0,
    trust_checkpoint: bool = False,
    on_inconclusive: OnInconclusive | None = None,
    budget_s: float | None = None,
    drop_duplicates: bool = False,
) -> Report:
    """Assert that ``model`` passes ``policy`` (a :class:`privgate.Policy`, a built-in name or a file).

    ``data`` is a :class:`privgate.AuditData`, a mapping with ``members``,
    ``nonmembers`` and optionally ``population``, or a ``(members, nonmembers[,
    population])`` tuple; each part as :func:`privgate.check` accepts it. ``budget_s``: as
    :func:`assert_mia_below`'s; ``drop_duplicates``: as :func:`privgate.check`'s.
    """
    __tracebackhide__ = True
    from privgate.inputs.data import AuditData

    if isinstance(data, AuditData):
        import privgate
        from privgate.inputs.coerce import as_recipe, as_target
        from privgate.policy import as_policy

        rec = as_recipe(recipe)
        target = as_target(model, rec, trust_checkpoint)
        budget = budget_s if budget_s is not None else settings.get("budget_s")
        report = privgate.check_model(target, data, as_policy(policy), recipe=rec, seed=seed, budget_s=budget)
        _notify(report, "assert_policy")
        return enforce(report, on_inconclusive, "assert_policy")
    members, nonmembers, population = _split_data(data)
    sources = {"population": population, "recipe": recipe, "seed": seed, "trust_checkpoint": trust_checkpoint}
    sources["budget_s"] = budget_s
    sources["drop_duplicates"] = drop_duplicates
    return _decided("assert_policy", model, policy, members, nonmembers, sources, on_inconclusive)


# --------------------------------------------------------------------------- language models


def _causal_lm(model: Any) -> tuple[Any, Any]:
    """(model, tokenizer) from a ``save_pretrained`` directory or a pair; a directory is read by privgate's guarded
    loader (:func:`privgate.inputs.targets.hf.load_model_dir`: no code, safetensors only, no network)."""
    if isinstance(model, (tuple, list)) and len(model) == 2:
        return model[0], model[1]
    from pathlib import Path

    from privgate.errors import TargetError
    from privgate.inputs.targets.hf import CAUSAL, load_model_dir

    path = Path(model)
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise TargetError(f"{path}: not a Hugging Face model directory (no config.json).")
    lm = load_model_dir(path)
    if lm.kind != CAUSAL:
        raise TargetError(f"{path}: is a sequence classifier; canary exposure needs a causal language model.")
    return lm.model, lm.tokenizer


def _canaries(canaries: Any) -> list[Any]:
    """Canaries from a JSON Lines file or a sequence of :class:`privgate.inputs.canaries.Canary` / mappings."""
    from pathlib import Path

    from privgate.inputs.canaries import Canary, load_canaries, validate_canary

    if isinstance(canaries, (str, Path)):
        return load_canaries(canaries)
    return [c if isinstance(c, Canary) else validate_canary(c, f"canaries[{i}]") for i, c in enumerate(canaries)]


def assert_exposure_below(
    model: Any,
    canaries: Any,
    *,
    bits: float,
    confidence: float = 0.95,
    device: str = "cpu",
    batch_size: int = 64,
    seed: int = 0,
    max_exact: int | None = None,
    samples: int = 10_000,
    bootstrap: int = 50,
    on_inconclusive: OnInconclusive | None = None,
) -> Any:
    """Assert that no canary is exposed by more than ``bits`` (Carlini et al. 2019, arXiv 1802.08232).

    Exposure = log2|R| − log2 rank of the secret among all |R| candidates
    (:mod:`privgate.lm.canary_exposure`: exact up to ``max_exact`` candidates, else the
    paper's extrapolation from ``samples`` sampled candidates with a
    distribution-free interval). The decision is privgate's ``upper_bound``
    rule on the largest exposure's joint interval at ``confidence``: it fails
    when the lower bound is above ``bits`` (the sample proves it), passes when
    the upper bound is within ``bits``, and is inconclusive in between (only
    an extrapolated canary can be) — then it fails, or skips with
    ``on_inconclusive="skip"``.

    Args:
        model: a Hugging Face causal-LM directory (``save_pretrained``; safetensors) or ``(model, tokenizer)``.
        canaries: a canary JSON Lines file, or a list of canaries (mappings with prefix, secret, alphabet).
        bits: the largest exposure allowed.
        max_exact, samples, bootstrap: as :func:`privgate.lm.canary_exposure.measure_exposure` takes them (``max_exact``
            ``None``: its default, :data:`privgate.lm.canary_exposure.MAX_EXACT`).

    Returns:
        The :class:`privgate.lm.canary_exposure.ExposureReport` when the assertion holds.
    """
    __tracebackhide__ = True
    from privgate.errors import shown
    from privgate.lm.canary_exposure import MAX_EXACT, measure_exposure

    lm, tokenizer = _causal_lm(model)
    rows = _canaries(canaries)
    report = measure_exposure(
        lm,
        tokenizer,
        rows,
        device=device,
        batch_size=batch_size,
        confidence=confidence,
        seed=seed,
        max_exact=MAX_EXACT if max_exact is None else max_exact,
        samples=samples,
        bootstrap=bootstrap,
    )
    worst = report.canaries[report.worst]
    interval = f"[{report.lo:.2f}, {report.hi:.2f}] at {confidence:.0%}" if report.hi > report.lo else worst.method
    text = (
        f"canary {worst.index} (prefix {shown(worst.prefix, 40)}) has exposure {report.max_exposure:.2f} bits "
        f"({interval}; rank {worst.rank:,.0f} of {worst.space:,} candidates, at most {worst.space_bits:.1f} bits), "
        f"bound {bits:g} bits; {len(rows)} canaries measured (Carlini et al. 2019, arXiv 1802.08232)"
    )
    mode = on_inconclusive or settings.get("on_inconclusive") or "fail"
    if mode not in ("fail", "skip"):
        raise ValueError(f"on_inconclusive must be 'fail' or 'skip', got {mode!r}")
    if report.lo > bits:
        raise PrivacyAssertionError(f"assert_exposure_below failed: {text}", report)
    if report.hi > bits:
        if mode == "skip":
            raise unittest.SkipTest(f"assert_exposure_below inconclusive: {text}")
        raise PrivacyAssertionError(f"assert_exposure_below inconclusive: {text}", report)
    return report


__all__ = [
    "PrivacyAssertionError",
    "add_observer",
    "assert_epsilon_below",
    "assert_exposure_below",
    "assert_inversion_below",
    "assert_mia_below",
    "assert_policy",
    "enforce",
    "make_policy",
    "remove_observer",
    "run_check",
]
