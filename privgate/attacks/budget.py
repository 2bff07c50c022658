"""A time budget for an audit's attacks: each one's cost estimated before it runs, cheapest first; those that do
not fit are left out, and said so.

An estimate is :meth:`~privgate.attacks.base.Attack.estimated_seconds` on the run's :class:`CostFacts` (one pass
of the target over the audit rows, timed on a probe, times the attack's passes, plus what it fits), scaled up by how
much slower the attacks that already ran were than their own estimates (a busy machine). The rule and the
measurements behind the constants: ``docs/compute.md`` ("Time budgets").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from privgate.attacks.base import AttackContext

#: Rows of the probe that times one pass of the target (after a warm-up call on a few of them).
PROBE_ROWS = 256
#: Seconds one fold of a learned attack's membership classifier (gradient boosting) takes on 1,500 rows.
FOLD_S = 0.1
#: Passes of the target that the gradient attack's per-example gradients cost (per audit row: vmap over rows).
GRADIENT_PASSES = 150.0
#: Only attacks estimated at this many seconds or more tell how much slower than estimated the run is: a
#: cheaper one's time is mostly fixed costs its estimate leaves out.
CALIBRATING_S = 0.5
#: A trained row costs this many scored rows: forward and backward (3), in small batches (× 4).
TRAINED_ROW_PASSES = 12.0


@dataclass(frozen=True)
class CostFacts:
    """What an attack's cost estimate may use.

    Attributes:
        rows: audit rows (members and non-members pooled).
        classes: the target's classes.
        pass_s: seconds of one pass of the target over the ``rows`` (its class probabilities).
        population: population rows (0: none).
        trained: reference models this run has already trained (shared with later attacks).
        planned: the most reference models any attack of the run asks for (the first to ask trains that many).
        epochs: the recipe's epochs (reference models), 0 without a recipe.
    """

    rows: int
    classes: int
    pass_s: float
    population: int = 0
    trained: int = 0
    planned: int = 0
    epochs: int = 0


def probe_pass_s(ctx: AttackContext, probe_rows: int = PROBE_ROWS) -> float | None:
    """Seconds of one pass of ``ctx.target`` over ``ctx.x``, timed on its first ``probe_rows`` rows (None: no probe)."""
    rows = len(ctx.x)
    n = min(rows, probe_rows)
    if n == 0:
        return None
    try:
        ctx.target.predict_proba(ctx.x[: min(n, 8)])  # warm-up: the first call pays for lazy set-up
        t0 = time.perf_counter()
        ctx.target.predict_proba(ctx.x[:n])
    except Exception:  # noqa: BLE001 - a target that cannot be probed is reported by its attacks, not here
        return None
    return (time.perf_counter() - t0) * rows / n


def cost_facts(ctx: AttackContext) -> CostFacts | None:
    """The :class:`CostFacts` of ``ctx`` now (None when its target cannot be probed on rows)."""
    try:
        rows = len(ctx.x)
    except TypeError:
        return None
    pass_s = probe_pass_s(ctx)
    if pass_s is None:
        return None
    try:
        classes = max(2, int(np.max(ctx.y)) + 1)
    except (TypeError, ValueError):
        classes = 2
    recipe = ctx.recipe
    return CostFacts(
        rows=rows,
        classes=classes,
        pass_s=pass_s,
        population=0 if ctx.population is None else len(ctx.population),
        trained=max(ctx.ensembles, default=0),
        planned=ctx.planned_models,
        epochs=int(getattr(recipe, "epochs", 0) or 0),
    )


def fit_seconds(folds: int, rows: int, scale: float = 1.0) -> float:
    """A membership classifier cross-fitted over ``folds`` folds of ``rows`` rows (``scale``: a lighter classifier)."""
    return folds * FOLD_S * scale * max(1.0, rows / 1500)


def trained_seconds(facts: CostFacts, models: int, rows: int) -> float:
    """``models`` models of the recipe trained for its epochs on ``rows`` rows each, on :attr:`CostFacts.pass_s`."""
    return models * max(facts.epochs, 1) * rows / max(facts.rows, 1) * TRAINED_ROW_PASSES * facts.pass_s


def reference_seconds(facts: CostFacts, models: int) -> float:
    """A reference-model attack: the run's shared models trained by the first to ask (each on half the rows), then
    each of its ``models`` scoring the audit rows."""
    train = 0.0 if facts.trained >= models else trained_seconds(facts, max(models, facts.planned), facts.rows // 2)
    return train + models * facts.pass_s


def _seconds(s: float) -> str:
    return f"{s:.2g} s" if s < 10 else f"{s:,.0f} s"


@dataclass
class Budget:
    """The time left for a run's attacks, and what did not fit.

    Attributes:
        seconds: the budget (``budget_s``).
        start: when it started (``time.perf_counter()``).
        over: attacks left out, ``{name: estimated seconds}``.
        slowdown: how much slower than estimated the attacks that ran were (at least 1).
    """

    seconds: float
    start: float = field(default_factory=time.perf_counter)
    over: dict[str, float] = field(default_factory=dict)
    slowdown: float = 1.0
    _estimated: float = 0.0
    _actual: float = 0.0

    @property
    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)

    def order(self, estimates: dict[str, float | None]) -> list[str]:
        """The attacks cheapest first (an attack without an estimate last, in the policy's order)."""
        known = sorted((s, i, n) for i, (n, s) in enumerate(estimates.items()) if s is not None)
        return [n for _, _, n in known] + [n for n, s in estimates.items() if s is None]

    def refusal(self, name: str, estimate: float | None) -> str | None:
        """Why ``name`` is left out (one sentence), or None when it fits in what is left."""
        left = self.left
        scaled = None if estimate is None else estimate * self.slowdown
        if (scaled is None and left > 0) or (scaled is not None and scaled <= left):
            return None
        self.over[name] = float(scaled or 0.0)
        cost = "its cost is not known" if scaled is None else f"its estimated {_seconds(scaled)}"
        return (
            f"not run for want of time: {cost} did not fit the time budget of {_seconds(self.seconds)} "
            f"({_seconds(max(left, 0.0))} left); raise budget_s to run it"
        )

    def ran(self, estimate: float | None, seconds: float) -> None:
        """An attack ran: estimates from now on are scaled by how much slower than estimated the run is."""
        if estimate is None or estimate < CALIBRATING_S:
            return
        self._estimated += estimate
        self._actual += seconds
        self.slowdown = max(1.0, self._actual / self._estimated)

    def facts(self) -> dict[str, Any]:
        """What the report keeps of the budget (``extras['budget']`` of a left-out attack, the warning)."""
        return {"budget_s": self.seconds, "over": {n: round(s, 3) for n, s in self.over.items()}}

    def warning(self) -> str | None:
        """The report's warning when attacks were left out, naming them; None when every attack fit."""
        if not self.over:
            return None
        names = ", ".join(f"{n} (≈ {_seconds(s)})" if s else n for n, s in self.over.items())
        more = sum(self.over.values())
        return (
            f"{len(self.over)} attack{'s' if len(self.over) != 1 else ''} did not run within the time budget of "
            f"{_seconds(self.seconds)}: {names}; a check they would have decided is not passed on the others "
            f"(inconclusive); raise budget_s by about {_seconds(more)} to run them"
        )


__all__ = [
    "CALIBRATING_S",
    "FOLD_S",
    "GRADIENT_PASSES",
    "PROBE_ROWS",
    "TRAINED_ROW_PASSES",
    "Budget",
    "CostFacts",
    "cost_facts",
    "fit_seconds",
    "probe_pass_s",
    "reference_seconds",
    "trained_seconds",
]
