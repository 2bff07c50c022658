"""The two accounted ε searches: compose every candidate (ladder or bisect), or random stopping.

Both train through one callable, ``train(ε, σ, trial)`` (σ calibrated here, so the budget is checked *before*
a run spends it), and keep the released ε up to date after every candidate. :func:`compose_search` composes
every candidate trained (:func:`privgate.dpsgd.accounting.compose`); :func:`random_stopping_search` is Papernot &
Steinke 2022 (arXiv 2110.03620): K trials drawn with the run's seed, each at an ε drawn from the schedule, the
best accepted one released, its ε known before training (:mod:`privgate.dp.selection`). A run that would take
the released ε over ``max_total_epsilon`` is not trained (:attr:`Searched.stopped`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from privgate.dp.candidates import Candidate, best_of, search_schedule
from privgate.dp.selection import RandomStopping, Trials, random_stopping_epsilon
from privgate.dpsgd.accounting import Composition, Run, calibrate, compose, rdp_curve, sampling
from privgate.dpsgd.records import DPSettings
from privgate.report.remediation_section import Accounting
from privgate.report.remediation_section import Trials as TrialsView

#: ``train(target ε, σ, trial)`` → the candidate (trained on the members, audited, utility measured).
Trainer = Callable[[float, float, "int | None"], Candidate]
#: Called after each candidate with it and the released ε so far.
OnCandidate = Callable[[Candidate, float], None]


class BudgetExceeded(Exception):
    """The next run would take the released ε over the policy's ``max_total_epsilon``."""

    def __init__(self, epsilon: float, released: float, limit: float, why: str) -> None:
        super().__init__(why)
        self.epsilon, self.released, self.limit, self.why = epsilon, released, limit, why


@dataclass
class Searched:
    """What a search found: the accepted candidate (or None), why not, and the released ε's accounting."""

    chosen: Candidate | None
    broke: str | None
    reason: str | None
    candidates: list[Candidate] = field(default_factory=list)
    composition: Composition | None = None
    random_stopping: RandomStopping | None = None
    drawn: int | None = None
    stopped: BudgetExceeded | None = None

    @property
    def best(self) -> Candidate | None:
        return best_of(self.candidates)


def released(comp: Composition, candidates: Sequence[Candidate]) -> float:
    """The released ε: the composition, and never below a candidate's own training ε (both are upper bounds)."""
    spent = [c.training.epsilon for c in candidates]
    return max([comp.epsilon, *spent]) if spent else comp.epsilon


def compose_search(
    train: Trainer,
    schedule: Sequence[float],
    strategy: str,
    settings: DPSettings,
    n_train: int,
    *,
    max_total_epsilon: float | None = None,
    on_candidate: OnCandidate | None = None,
) -> Searched:
    """The ladder or bisect search; the released ε composes every candidate it trains."""
    q, steps = sampling(n_train, settings.batch_size, settings.epochs)
    runs: list[Run] = []
    found = Searched(None, None, None)

    def evaluate(i: int) -> Candidate:
        eps = float(schedule[i])
        sigma, _ = calibrate(eps, settings.delta, q, settings.epochs, settings.accountant)
        if max_total_epsilon is not None:
            ahead = compose([*runs, Run(sigma, q, steps)], settings.delta, settings.accountant)
            would = released(ahead, found.candidates)
            if would > max_total_epsilon:
                raise BudgetExceeded(
                    eps,
                    would,
                    max_total_epsilon,
                    f"training the candidate at ε = {eps:g} would take the released ε to {would:.4g}, over the "
                    f"policy's max_total_epsilon {max_total_epsilon:g}",
                )
        cand = train(eps, sigma, None)
        runs.append(Run.of(cand.training))
        found.candidates.append(cand)
        found.composition = compose(runs, settings.delta, settings.accountant)
        now = released(found.composition, found.candidates)
        if on_candidate:
            on_candidate(cand, now)
        if max_total_epsilon is not None and now > max_total_epsilon:  # the run spent a hair more than calibrated
            raise BudgetExceeded(
                eps,
                now,
                max_total_epsilon,
                f"the released ε reached {now:.4g}, over max_total_epsilon {max_total_epsilon:g}",
            )
        return cand

    try:
        found.chosen, found.broke, found.reason = search_schedule(evaluate, len(schedule), strategy)
    except BudgetExceeded as stop:
        found.stopped = stop
    return found


def random_stopping_bound(
    schedule: Sequence[float], settings: DPSettings, n_train: int, trials: Trials
) -> tuple[RandomStopping, dict[float, float]]:
    """The released ε of a random-stopping search over ``schedule`` (before any training), and σ per ε."""
    q, steps = sampling(n_train, settings.batch_size, settings.epochs)
    sigmas = {
        float(e): calibrate(float(e), settings.delta, q, settings.epochs, settings.accountant)[0] for e in schedule
    }
    curves = [rdp_curve([Run(s, q, steps)]) for s in sigmas.values()]
    return random_stopping_epsilon(curves, settings.delta, trials), sigmas


def random_stopping_search(
    train: Trainer,
    schedule: Sequence[float],
    settings: DPSettings,
    n_train: int,
    trials: Trials,
    seed: int,
    *,
    max_total_epsilon: float | None = None,
    on_candidate: OnCandidate | None = None,
) -> Searched:
    """Papernot & Steinke's search: K ~ ``trials`` runs at ε drawn from ``schedule``; release the best accepted."""
    bound, sigmas = random_stopping_bound(schedule, settings, n_train, trials)
    found = Searched(None, None, None, random_stopping=bound)
    if max_total_epsilon is not None and bound.epsilon > max_total_epsilon:
        found.stopped = BudgetExceeded(
            max(schedule),
            bound.epsilon,
            max_total_epsilon,
            f"a random-stopping search over this schedule ({trials.describe()} trials) releases ε = "
            f"{bound.epsilon:.4g}, over the policy's max_total_epsilon {max_total_epsilon:g}; nothing was trained",
        )
        return found
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5709]))  # the data never enters these draws
    k = trials.draw(rng)
    picks = [float(schedule[int(rng.integers(len(schedule)))]) for _ in range(k)]
    found.drawn = k
    for t, eps in enumerate(picks, start=1):
        cand = train(eps, sigmas[eps], t)
        found.candidates.append(cand)
        if on_candidate:
            on_candidate(cand, bound.epsilon)
    accepted = [c for c in found.candidates if c.accepted]
    if accepted:
        found.chosen = max(accepted, key=lambda c: (c.score, c.epsilon))
        return found
    found.broke = "privacy" if not any(c.privacy == "pass" for c in found.candidates) else "utility"
    tried = ", ".join(f"{c.epsilon:g}" for c in found.candidates) or "none"
    found.reason = (
        f"none of the {k} random-stopping trial(s) (ε = {tried}) passed the checks within the utility floor"
        if k
        else "the random number of trials drawn was 0 (Poisson): nothing was trained"
    )
    return found


def accounting_of(found: Searched, settings: DPSettings, search: str, limit: float | None) -> Accounting:
    """The released ε of what ``found`` trained (or, stopped before any run, of what it would have)."""
    spent = [c.training.epsilon for c in found.candidates]
    naive = round(sum(spent), 6) if spent else None
    if search == "random_stopping" and found.random_stopping is not None:
        b = found.random_stopping
        t = b.trials
        return Accounting(
            method="random_stopping",
            epsilon=round(b.epsilon, 6),
            delta=b.delta,
            accountant="rdp",
            candidates=len(found.candidates),
            naive_sum=naive,
            per_run_epsilon=round(b.per_run_epsilon, 6),
            trials=TrialsView(
                distribution=t.distribution,
                mean=t.mean,
                shape=t.eta if math.isfinite(t.eta) else None,
                gamma=t.gamma,
                drawn=found.drawn,
                description=t.describe(),
            ),
            max_total_epsilon=limit,
            basis=f"random stopping with {t.describe()} trials, Papernot & Steinke 2022 (arXiv 2110.03620), "
            + ("Theorem 6" if t.distribution == "poisson" else "Theorem 2")
            + ", on the largest RDP curve of the schedule's runs",
        )
    comp = found.composition
    return Accounting(
        method="compose",
        epsilon=None if comp is None else round(released(comp, found.candidates), 6),
        delta=settings.delta,
        accountant=None if comp is None else comp.accountant,
        candidates=len(found.candidates),
        rdp_epsilon=None if comp is None else round(comp.rdp_epsilon, 6),
        prv_epsilon=None if comp is None or comp.prv_epsilon is None else round(comp.prv_epsilon, 6),
        naive_sum=naive,
        max_total_epsilon=limit,
        basis=f"composition of every candidate trained on the members ({len(found.candidates)}), their RDP curves "
        "(Mironov 2017, arXiv 1702.07476) or PRVs (Gopi et al. 2021, arXiv 2106.02848) composed and converted once",
        note=None if comp is None else comp.note,
    )


__all__ = [
    "accounting_of",
    "BudgetExceeded",
    "Searched",
    "compose_search",
    "random_stopping_bound",
    "random_stopping_search",
    "released",
]
