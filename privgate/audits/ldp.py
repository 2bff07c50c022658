"""``privgate audit ldp``: does a local randomiser deliver the ε it claims? Matsumoto et al.'s (2022) test harness.

Matsumoto, Takahashi, Liew & Oguchi 2022 (arXiv 2206.09122): for every claimed ε, adversary
(:mod:`privgate.audits.ldp_adversaries`) and distinguisher (:mod:`privgate.audits.ldp_game`), K trials give FP
and FN counts; :mod:`privgate.audits.ldp_estimate` turns them into Eq. 3's point value (reported, never
deciding) and a lower bound valid jointly over all cells. Per claim: ``fail`` when some lower bound exceeds
it, ``inconclusive`` when K trials could never prove more, else ``pass``. Gradients come from a real model on
real data (default :data:`privgate.audits.bundled.LDP_RECIPE` on digits). See ``docs/audits.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np
import torch

from privgate import __version__
from privgate.audits.bundled import LDP_RECIPE, digits
from privgate.audits.ldp_adversaries import (
    ADVERSARIES,
    DISTINGUISHERS,
    RULE_TEXT,
    Crafted,
    CraftSettings,
    Source,
    craft,
)
from privgate.audits.ldp_estimate import (
    epsilon_empirical,
    epsilon_lb_from_errors,
    max_provable_from_trials,
    upper_rates,
)
from privgate.audits.ldp_game import Counts, play
from privgate.audits.ldp_gradients import FunctionalModel
from privgate.audits.ldp_limits import GAMES_PER_SECOND, MAX_GAMES, duration, epsilon_problem
from privgate.audits.ldp_mechanism import ldp_sgd_randomise
from privgate.errors import PrivgateError, RecipeError
from privgate.errors import clip as clip_text
from privgate.executors import Executor, LocalExecutor
from privgate.inputs.data import Dataset
from privgate.recipe import Recipe
from privgate.report.jobs.claims import LdpAuditReport, LdpClaim, LdpResult, claim_check
from privgate.report.model import CheckResult
from privgate.threads import limit_threads
from privgate.training.loop import train_model

#: Progress callback: (trials done, trials in all, what is running).
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class LdpSettings:
    """What to audit and how hard.

    Args:
        epsilons: the claimed ε, or several for a sweep (each is a claim of its own).
        clip: L, the clipping norm of Algorithm 1.
        trials: K per cell.
        adversaries: a subset of :data:`ADVERSARIES`.
        distinguishers: a subset of :data:`DISTINGUISHERS`.
        confidence: probability that every bound in the report holds at once.
        seed: drives θ_t's training, the example pools and every trial.
        craft: the crafters' step sizes.
    """

    epsilons: tuple[float, ...]
    clip: float = 1.0
    trials: int = 10_000
    adversaries: tuple[str, ...] = ADVERSARIES
    distinguishers: tuple[str, ...] = DISTINGUISHERS
    confidence: float = 0.95
    seed: int = 0
    craft: CraftSettings = field(default_factory=CraftSettings)

    def __post_init__(self) -> None:
        if not self.epsilons:
            raise PrivgateError("--epsilon: give at least one claimed ε.")
        for eps in self.epsilons:
            problem = epsilon_problem(eps)
            if problem:
                raise PrivgateError(f"--epsilon: {problem}.")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise PrivgateError(f"--clip: the clipping norm must be a positive finite number, got {self.clip}.")
        if self.trials < 2:
            raise PrivgateError(f"--trials: at least 2 trials per cell are needed, got {self.trials}.")
        games = self.trials * len(self.adversaries) * len(self.distinguishers) * len(self.epsilons)
        if games > MAX_GAMES:
            raise PrivgateError(
                f"--trials: {self.trials:,} trials in {games // self.trials:,} cells are {games:.3g} games, about "
                f"{duration(games / GAMES_PER_SECOND)} at the {GAMES_PER_SECOND:,} games per second measured on one "
                f"thread for the bundled model; privgate plays at most {MAX_GAMES:.0e} games in one audit."
            )
        if not 0.5 < self.confidence < 1:
            raise PrivgateError(f"--confidence: must lie strictly between 0.5 and 1, got {self.confidence}.")
        unknown = [a for a in self.adversaries if a not in ADVERSARIES] + [
            d for d in self.distinguishers if d not in DISTINGUISHERS
        ]
        if unknown or not self.adversaries or not self.distinguishers:
            raise PrivgateError(
                f"unknown or empty adversary/distinguisher selection {unknown or ''}; adversaries: "
                f"{', '.join(ADVERSARIES)}; distinguishers: {', '.join(DISTINGUISHERS)}."
            )

    @property
    def cells(self) -> int:
        return len(self.epsilons) * len(self.adversaries) * len(self.distinguishers)

    @property
    def cell_alpha(self) -> float:
        return (1.0 - self.confidence) / self.cells


def _train(recipe: Recipe, x: np.ndarray, y: np.ndarray, seed: int, what: str) -> torch.nn.Module:
    try:
        return train_model(recipe, x, y, seed)
    except PrivgateError:
        raise
    except Exception as exc:  # the user's recipe: one sentence
        raise RecipeError(
            f"recipe '{recipe.name}': training {what} failed ({exc.__class__.__name__}: {clip_text(str(exc))})."
        ) from None


def prepare_source(recipe: Recipe | None, data: Dataset | None, seed: int, collusion: bool) -> Source:
    """θ_t (the recipe trained on the data) and, for ``collusion``, the malicious one-label model θ̃_t."""
    recipe = recipe or LDP_RECIPE
    data = data or digits()
    with torch.random.fork_rng(devices=[]):
        model = _train(recipe, data.x, data.y, seed, "θ_t")
        probe = torch.as_tensor(np.ascontiguousarray(data.x[:64]), dtype=torch.float32)
        fm = FunctionalModel(model, probe)
        theta = fm.flat()
        source = Source(
            fm, theta, data, seed, description=f"recipe '{recipe.name}' trained on {data.source} ({len(data)} rows)"
        )
        labels, counts = np.unique(data.y, return_counts=True)
        if collusion and len(labels) >= 2:
            label = int(labels[int(np.argmax(counts))])
            rows = data.y == label
            bad = _train(recipe, data.x[rows], data.y[rows], seed + 1, f"the malicious one-label model (label {label})")
            source.malicious_theta = FunctionalModel(bad, probe).flat()
            source.malicious_label = label
    return source


def cell_seed(seed: int, adversary: str, epsilon: float) -> int:
    """The generator seed of one (adversary, ε): a cell's trials do not depend on which other cells run."""
    state = np.random.SeedSequence(
        [seed, 0x1D9, ADVERSARIES.index(adversary), int(round(epsilon * 1e6))]
    ).generate_state(2)
    return int(state[0]) << 32 | int(state[1])


def _result(eps: float, adversary: str, distinguisher: str, rule: str, c: Counts, alpha: float) -> LdpResult:
    fp_rate, fn_rate = c.fp / c.trials_g1, c.fn / c.trials_g2
    fp_hi, fn_hi = upper_rates(c.fp, c.trials_g1, c.fn, c.trials_g2, alpha)
    lb = epsilon_lb_from_errors(c.fp, c.trials_g1, c.fn, c.trials_g2, alpha)
    return LdpResult(
        claimed_epsilon=eps,
        adversary=adversary,
        distinguisher=distinguisher,
        rule=rule,
        trials=c.trials,
        trials_g1=c.trials_g1,
        trials_g2=c.trials_g2,
        fp_count=c.fp,
        fn_count=c.fn,
        fp=fp_rate,
        fn=fn_rate,
        fp_upper=fp_hi,
        fn_upper=fn_hi,
        epsilon_empirical=epsilon_empirical(fp_rate, fn_rate),
        epsilon_lb=lb,
        status="fail" if lb > eps else "pass",
    )


def _claim(eps: float, cells: list[LdpResult], ceiling: float, trials: int, confidence: float) -> LdpClaim:
    best = max(cells, key=lambda r: r.epsilon_lb)
    where = f"{best.adversary}/{best.distinguisher}"
    if best.epsilon_lb > eps:
        return LdpClaim(
            claimed_epsilon=eps,
            max_epsilon_lb=best.epsilon_lb,
            strongest=where,
            max_provable_epsilon=ceiling,
            status="fail",
            reason=f"{where} proves ε ≥ {best.epsilon_lb:.3f} > the claimed {eps:g} at {confidence * 100:g}% "
            "confidence: "
            "the mechanism does not deliver its claim",
        )
    if ceiling <= eps:
        for r in cells:
            r.status = "inconclusive"
        return LdpClaim(
            claimed_epsilon=eps,
            max_epsilon_lb=best.epsilon_lb,
            strongest=where,
            max_provable_epsilon=ceiling,
            status="inconclusive",
            reason=f"with {trials} trials per cell no distinguisher could prove more than ε = {ceiling:.3f}, not "
            f"above the claimed {eps:g}; "
            "more trials (--trials) could test it",
        )
    return LdpClaim(
        claimed_epsilon=eps,
        max_epsilon_lb=best.epsilon_lb,
        strongest=where,
        max_provable_epsilon=ceiling,
        status="pass",
        reason=f"no violation found: the strongest cell, {where}, proves ε ≥ {best.epsilon_lb:.3f} "
        f"({best.epsilon_lb / eps:.0%} of the claimed {eps:g}); "
        f"{trials} trials could have proved up to {ceiling:.3f}",
    )


def _summary(verdict: str, claims: list[LdpClaim]) -> str:
    if len(claims) == 1:
        return f"{verdict.upper()}: claimed ε = {claims[0].claimed_epsilon:g} — {claims[0].reason}."
    each = ", ".join(f"ε = {c.claimed_epsilon:g} {c.status} (ε ≥ {c.max_epsilon_lb:.3f})" for c in claims)
    if verdict == "pass":
        return f"PASS: {each} — no adversary refutes any claimed ε."
    first = next(c for c in claims if c.status == verdict)
    return f"{verdict.upper()}: {each} — ε = {first.claimed_epsilon:g}: {first.reason}."


def play_cell(
    adv: Crafted,
    model: FunctionalModel,
    randomise: Callable[..., torch.Tensor],
    mechanism_name: str,
    epsilon: float,
    clip: float,
    trials: int,
    distinguishers: tuple[str, ...],
    seed: int,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, Counts], float]:
    """One (adversary, ε) cell, as one task (:mod:`privgate.executors`): its counts and the seconds its game took.

    The cell's generator is seeded from ``seed`` (:func:`cell_seed`) alone, so
    a cell gives the same counts wherever and alongside whatever it runs.
    """
    g0 = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    counts = play(adv, model, randomise, mechanism_name, epsilon, clip, trials, distinguishers, gen, progress)
    return counts, time.perf_counter() - g0


@dataclass
class _Played:
    """Every cell's outcome: one result per (claimed ε, adversary, distinguisher), the crafted pools' sizes and the
    seconds the games took."""

    results: list[LdpResult]
    pools: dict[str, int]
    game_seconds: float


def _play_cells(
    settings: LdpSettings,
    source: Source,
    randomise: Callable[..., torch.Tensor],
    name: str,
    runner: Executor,
    threads: int | None,
    progress: Progress | None,
) -> _Played:
    """Craft each adversary's inputs and play every (adversary, ε) cell on ``runner``; one result per distinguisher."""
    alpha = settings.cell_alpha
    total = settings.trials * len(settings.adversaries) * len(settings.epsilons)
    done = 0
    pools: dict[str, int] = {}
    here = runner.name == "local"  # progress per chunk only when the cells play in this process

    def tick_for(adversary: str, eps: float) -> Callable[[int], None] | None:
        def tick(n: int) -> None:
            nonlocal done
            done += n
            if progress is not None:
                progress(done, total, f"{adversary} at ε = {eps:g}")

        return tick if here else None

    def cells(adversary: str, crafted: Crafted) -> list[tuple]:
        return [
            (crafted, source.model, randomise, name, eps, settings.clip, settings.trials, settings.distinguishers,
             cell_seed(settings.seed, adversary, eps), tick_for(adversary, eps))
            for eps in settings.epsilons
        ]  # fmt: skip

    played: list[tuple[dict[str, Counts], float]] = []
    rules: dict[str, str] = {}
    if here:  # one adversary's pool in memory at a time
        for adversary in settings.adversaries:
            crafted = craft(adversary, source, settings.craft, settings.clip)
            pools[adversary], rules[adversary] = crafted.pool, crafted.rule
            played += runner.map(play_cell, cells(adversary, crafted), threads=threads)
            del crafted
    else:  # every (adversary, ε) cell is one task, all submitted at once
        crafts = {a: craft(a, source, settings.craft, settings.clip) for a in settings.adversaries}
        for adversary, crafted in crafts.items():
            pools[adversary], rules[adversary] = crafted.pool, crafted.rule
        played = runner.map(play_cell, [t for a, c in crafts.items() for t in cells(a, c)], threads=threads)
        if progress is not None:
            progress(total, total, f"{len(played)} cells on the {runner.name} executor")
        del crafts
    results: list[LdpResult] = []
    cell_order = [(a, eps) for a in settings.adversaries for eps in settings.epsilons]
    for (adversary, eps), (counts, _) in zip(cell_order, played):
        for dist in settings.distinguishers:
            rule = RULE_TEXT["eq5"] if dist == "white_box" else RULE_TEXT[rules[adversary]]
            results.append(_result(eps, adversary, dist, rule, counts[dist], alpha))
    return _Played(results, pools, sum(seconds for _, seconds in played))


def audit_ldp(
    settings: LdpSettings,
    *,
    recipe: Recipe | None = None,
    data: Dataset | None = None,
    mechanism: Callable[..., torch.Tensor] | None = None,
    mechanism_name: str | None = None,
    progress: Progress | None = None,
    threads: int | None = None,
    executor: Executor | None = None,
) -> LdpAuditReport:
    """Play every cell of ``settings`` against the randomiser and decide each claimed ε.

    Args:
        settings: claims, K, adversaries, distinguishers, confidence, seed.
        recipe: trains θ_t (default: the bundled digits MLP); needs ``data``.
        data: the examples the crafters use (default: digits).
        mechanism: the randomiser (default: LDP-SGD, Algorithm 1).
        mechanism_name: how the report names it (e.g. the ``module:function`` spec).
        progress: called as trials finish.
        threads: the most threads torch and BLAS may use (default 1, see :mod:`privgate.threads`).
        executor: where the cells play (:mod:`privgate.executors`; default here,
            one after another): one task per (adversary, ε), each with its own
            seeded generator, so the counts are the same on any executor.
    """
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    randomise = mechanism or ldp_sgd_randomise
    name = mechanism_name or "LDP-SGD (Matsumoto et al. 2022, Algorithm 1)"
    runner = executor or LocalExecutor()
    with limit_threads(threads):
        source = prepare_source(recipe, data, settings.seed, "collusion" in settings.adversaries)
        played = _play_cells(settings, source, randomise, name, runner, threads, progress)
    return _report(settings, source, played, name, mechanism is None, runner.name, threads, started, t0)


def _source_facts(source: Source, settings: LdpSettings, pools: dict[str, int]) -> dict[str, object]:
    """Where the gradients came from: the model and data behind θ_t, the crafted pools, the crafters' steps."""
    return {
        "description": source.description,
        "data": source.data.source,
        "rows": len(source.data),
        "parameters": source.model.d,
        "theta_norm": float(source.theta.norm()),
        "pool": pools,
        "malicious_label": source.malicious_label,
        "fgsm_step": settings.craft.fgsm_step,
        "retrogression_step": settings.craft.retrogression_step,
    }


def _check(c: LdpClaim, confidence: float, sizes: tuple[int, int]) -> CheckResult:
    """A claimed ε decided, as a check of the report family."""
    args = (c.strongest, c.max_epsilon_lb, c.claimed_epsilon, c.status, c.reason, confidence, sizes)
    return claim_check(f"ldp-epsilon-{c.claimed_epsilon:g}", *args)


def _report(
    settings: LdpSettings,
    source: Source,
    played: _Played,
    name: str,
    builtin: bool,
    executor: str,
    threads: int | None,
    started: str,
    t0: float,
) -> LdpAuditReport:
    """Decide each claimed ε on the cells' results and write the report."""
    from privgate.options import RunOptions
    from privgate.report.provenance import environment

    alpha, results = settings.cell_alpha, played.results
    n_g1, n_g2 = (settings.trials + 1) // 2, settings.trials // 2
    ceiling = max_provable_from_trials(n_g1, n_g2, alpha)
    claims = [
        _claim(eps, [r for r in results if r.claimed_epsilon == eps], ceiling, settings.trials, settings.confidence)
        for eps in settings.epsilons
    ]
    statuses = {c.status for c in claims}
    verdict = "fail" if "fail" in statuses else "inconclusive" if "inconclusive" in statuses else "pass"
    order = {a: i for i, a in enumerate(ADVERSARIES)}
    results.sort(key=lambda r: (r.claimed_epsilon, order[r.adversary], r.distinguisher))
    duration = time.perf_counter() - t0
    trials_played, game_seconds = settings.trials * settings.cells, played.game_seconds
    return LdpAuditReport(
        privgate_version=__version__,
        verdict=verdict,
        summary=_summary(verdict, claims),
        claimed_epsilon=settings.epsilons[0] if len(settings.epsilons) == 1 else list(settings.epsilons),
        confidence=settings.confidence,
        cells=settings.cells,
        cell_confidence=1.0 - alpha,
        max_epsilon_lb=max(r.epsilon_lb for r in results),
        max_provable_epsilon=ceiling,
        clip=settings.clip,
        trials=settings.trials,
        mechanism={"name": name, "builtin": builtin},
        source=_source_facts(source, settings, played.pools),
        adversaries=list(settings.adversaries),
        distinguishers=list(settings.distinguishers),
        claims=claims,
        results=results,
        policy={
            "name": "claimed ε = " + ", ".join(f"{e:g}" for e in settings.epsilons),
            "claim": "ε-LDP",
            "epsilon": list(settings.epsilons),
            "confidence": settings.confidence,
        },
        target={"path": name, "format": "LDP randomiser", "builtin": builtin},
        checks=[_check(c, settings.confidence, (n_g2, n_g1)) for c in claims],
        environment=environment(RunOptions(seed=settings.seed, threads=threads, executor=executor)),
        started=started,
        duration_s=round(duration, 3),
        game_seconds=round(game_seconds, 3),
        trials_per_second=round(trials_played / game_seconds, 1) if game_seconds > 0 else None,
    )


__all__ = ["LdpSettings", "Progress", "audit_ldp", "cell_seed", "play_cell", "prepare_source"]
