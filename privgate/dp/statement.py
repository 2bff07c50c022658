"""The DP statement of a hardened model: what the guarantee protects, how it was accounted, what was public.

The reporting guidance of Ponomareva et al. 2023 ("How to DP-fy ML", arXiv 2303.00654, §5.5): unit of
privacy, accountant, δ, sampling, σ, C, epochs and steps, what was public, each hyper-parameter's source, and
two ε — the training run's and the released model's (:mod:`privgate.dpsgd.accounting`,
:mod:`privgate.dp.selection`). Independent of the model type: callers set ``model_kind`` and ``public``.
"""

from __future__ import annotations

from privgate.dpsgd.records import DPSettings, DPTraining
from privgate.report.remediation_section import Accounting, DPStatement, Hyperparameter, search_name

UNIT_NOTE = (
    "one row of the training data; the data has no user column, so a person with k rows is protected as a group "
    "of k (roughly k·ε)"
)

CAVEAT_TEST = (
    "The acceptance test reads the members through the policy's attacks, without noise (one pass or fail per "
    "candidate). The released ε covers training every candidate and choosing among them by their outputs; what "
    "that pass or fail itself reveals about the members is the audit's, as for any model privgate checks, and no "
    "ε covers it."
)
CAVEAT_COMPOSE = (
    "The composition counts the candidates the search trained, and where the search stopped depended on the "
    "audit: a reading of the spent budget rather than a budget fixed in advance. The random-stopping search "
    "(remediation: {search: random_stopping}) draws its number of trials independently of the data, and its "
    "bound does not depend on where it stopped (Papernot & Steinke 2022, arXiv 2110.03620)."
)
CAVEAT_RNG = (
    "The noise comes from PyTorch's seeded generator (reproducible), not Opacus' secure mode; a release that must "
    "resist attacks on the sampler itself should retrain once in secure mode."
)


def hyperparameters(
    settings: DPSettings,
    *,
    epochs_from: str,
    batch_from: str,
    clip_from: str,
    delta_from: str,
    recipe_name: str,
    search: str,
) -> list[Hyperparameter]:
    """Every DP-SGD hyper-parameter and where it came from."""
    return [
        Hyperparameter(
            name="target ε",
            value=None,
            source=f"the policy's schedule, chosen by the {search_name(search)} (accounted in the released ε)",
        ),
        Hyperparameter(
            name="noise multiplier σ",
            value=None,
            source="calibrated by the accountant from (target ε, δ, q, epochs); reads no data",
        ),
        Hyperparameter(name="clipping norm C", value=settings.max_grad_norm, source=clip_from),
        Hyperparameter(name="epochs", value=settings.epochs, source=epochs_from),
        Hyperparameter(name="batch size", value=settings.batch_size, source=batch_from),
        Hyperparameter(name="δ", value=settings.delta, source=delta_from),
        Hyperparameter(name="optimiser and learning rate", value=None, source=f"the recipe '{recipe_name}'"),
    ]


def statement(
    training: DPTraining,
    accounting: Accounting,
    *,
    hyper: list[Hyperparameter],
    public: list[str],
    model_kind: str = "tabular",
    unit: str = "record",
    unit_note: str = UNIT_NOTE,
) -> DPStatement:
    """The statement of the model trained by ``training``, released under ``accounting``."""
    hyper = [
        h.model_copy(update={"value": training.target_epsilon})
        if h.name == "target ε"
        else h.model_copy(update={"value": round(training.noise_multiplier, 6)})
        if h.name == "noise multiplier σ"
        else h
        for h in hyper
    ]
    caveats = [CAVEAT_TEST] + ([CAVEAT_COMPOSE] if accounting.method == "compose" else []) + [CAVEAT_RNG]
    return DPStatement(
        model_kind=model_kind,
        unit=unit,  # type: ignore[arg-type]
        unit_note=unit_note,
        accountant=accounting.accountant or training.accountant,
        delta=training.delta,
        sampling="Poisson (each row joins each step independently with probability q)",
        sample_rate=training.sample_rate,
        noise_multiplier=training.noise_multiplier,
        max_grad_norm=training.max_grad_norm,
        epochs=training.epochs,
        steps=training.steps,
        batch_size=training.batch_size,
        n_train=training.n_train,
        public=public,
        training_epsilon=training.epsilon,
        released_epsilon=accounting.epsilon,
        search=search_name(accounting.method),
        candidates=accounting.candidates,
        hyperparameters=hyper,
        caveats=caveats,
    )


__all__ = ["CAVEAT_COMPOSE", "CAVEAT_RNG", "CAVEAT_TEST", "UNIT_NOTE", "hyperparameters", "statement"]
