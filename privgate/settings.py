"""The typed settings of each job of :mod:`privgate.api`: what to audit, and against what.

One frozen dataclass per job. Inputs may be given as a user has them on disk —
paths and ``module:attr`` specs, as the CLI and the config file give them — or
as objects in memory (a model, ``(x, y)`` arrays, a :class:`~privgate.Policy`,
a :class:`~privgate.Recipe`, a function); :mod:`privgate.api` loads and
validates them at the door. How a run is carried out (seed, threads, cache,
device, executor, progress) is not here but in :class:`~privgate.options.RunOptions`.
This module imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TextOptions:
    """How a language model and its text data are read.

    Attributes:
        text_field: the JSONL field holding the text (default ``text``).
        text_column: the CSV column holding the text (default: ``text_field``).
        reference_model: a reference model directory (e.g. the base before fine-tuning) for ``reference_ratio``.
        base_model: the base model directory of a PEFT adapter (default: the adapter config's).
        canaries: a canaries JSONL file (``{prefix, secret, alphabet}`` rows) for ``canary_exposure``.
        batch_size: records per forward pass.
        user_field: the JSONL field / CSV column naming each record's user: DP fine-tuning (harden) is then
            user-level (:mod:`privgate.lm.userlevel`); the membership evaluation stays per record.
        max_records: the most records one text file may hold (more: refused before they are scored).
        max_text_mib: the largest text file read, in MiB (larger: refused before it is read).
        max_canaries: the most canaries the canaries file may hold (more: refused before any is scored).
    """

    text_field: str = "text"
    text_column: str | None = None
    reference_model: str | None = None
    base_model: str | None = None
    canaries: str | None = None
    batch_size: int = 32
    user_field: str | None = None
    max_records: int = 100_000  # privgate.inputs.text.MAX_RECORDS
    max_text_mib: int = 512  # privgate.inputs.text.MAX_MIB
    max_canaries: int = 1000  # privgate.inputs.canaries.MAX_CANARIES


#: ``(x, y)`` arrays, a :class:`~privgate.inputs.data.Dataset`, a file path or ``module:function``.
DataLike = Any


@dataclass(frozen=True)
class CheckSettings:
    """``privgate check``: audit a model against a policy on known members and non-members.

    Attributes:
        model: a path (checkpoint, scikit-learn pickle), an ``nn.Module``, a fitted classifier or a Target.
        policy: a built-in policy name, a policy file or a :class:`~privgate.policy.Policy`.
        members, nonmembers: the audit data (:data:`DataLike`).
        population: optional extra same-distribution data for reference models.
        recipe: how the model was trained (``module:attr`` or a :class:`~privgate.recipe.Recipe`).
        label_column: the label column of CSV data.
        drop_duplicates: rows both members and non-members leave both sides and repeats within a side are kept
            once (:mod:`privgate.inputs.duplicates`), rather than being refused.
        trust_checkpoint: allow pickled checkpoints (loading them runs code).
        trust_types: types a ``.skops`` model may name besides scikit-learn's, numpy's and scipy's
            (:mod:`privgate.inputs.targets.sklearn`).
        search_dirs: folders ``module:attr`` specs and relative data paths are looked up in (first: the base).
        access: how a model given as an endpoint URL is queried (headers, query budget, output name):
            a :class:`privgate.inputs.targets.endpoint.Access`; ``None``: the defaults.
        text: for a Hugging Face model directory, how its text records, reference model and canaries are read
            (:class:`TextOptions`).
        budget_s: a time budget for the attacks, in seconds (None: none): the attacks are run cheapest first and
            those whose estimated cost does not fit are left out and named (:mod:`privgate.attacks.budget`).
    """

    model: Any
    policy: Any
    members: DataLike
    nonmembers: DataLike
    population: DataLike | None = None
    recipe: Any = None
    label_column: str = "label"
    trust_checkpoint: bool = False
    search_dirs: tuple[Path, ...] = ()
    access: Any = None
    drop_duplicates: bool = False
    text: TextOptions = field(default_factory=TextOptions)
    trust_types: tuple[str, ...] = ()
    budget_s: float | None = None

    def __post_init__(self) -> None:
        b = self.budget_s
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0):
            raise ValueError(f"budget_s must be a positive number of seconds, got {b!r}")


@dataclass(frozen=True)
class HardenSettings(CheckSettings):
    """``privgate harden``: :class:`CheckSettings`, and where the hardened model would go.

    Attributes:
        output_model: the hardened model's path (default ``<model>.hardened.pt`` beside a model file;
            never the input itself). Nothing is written by :func:`privgate.api.harden`: its files come back.
        on_row: called with each ε's row of the search as it is decided (the CLI prints it).
    """

    output_model: str | None = None
    on_row: Callable[[dict[str, Any]], None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class LdpAuditSettings:
    """``privgate audit ldp``: does a local randomiser deliver the ε it claims?

    Attributes:
        epsilons: the claimed ε, or several for a sweep (each a claim of its own).
        clip: L, the clipping norm of LDP-SGD.
        trials: K per adversary × distinguisher cell.
        adversaries, distinguishers: the cells to play (default: all).
        confidence: probability that every lower bound in the report holds at once.
        mechanism: the randomiser (``module:function`` or a function); default LDP-SGD.
        recipe, data: θ_t is the recipe trained on the data (both, or neither: the bundled digits model).
        on_trials: called as trials finish, with (done, total, what) (the CLI's progress bar).
    """

    epsilons: tuple[float, ...]
    clip: float = 1.0
    trials: int = 10_000
    adversaries: tuple[str, ...] | None = None
    distinguishers: tuple[str, ...] | None = None
    confidence: float = 0.95
    mechanism: Any = None
    recipe: Any = None
    data: DataLike | None = None
    label_column: str = "label"
    search_dirs: tuple[Path, ...] = ()
    on_trials: Callable[[int, int, str], None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class DpsgdAuditSettings:
    """``privgate audit dpsgd``: does one DP-SGD training run deliver the (ε, δ) it claims?

    Attributes:
        epsilon, delta: the claim.
        canaries: m, each included with probability 1/2.
        confidence: probability that the reported lower bound holds.
        clip: white-box: the DP-SGD clipping norm C.
        data: the training data (default digits).
        recipe: privgate's DP-SGD on this recipe (white-box gradient canaries), or a language-model
            recipe ``.yaml`` (DP fine-tuning, text canaries; ``data`` is then the training text), or
        train: the user's trainer ``train(x, y, epsilon, delta, seed) -> nn.Module`` (black-box input canaries).
    """

    epsilon: float
    delta: float = 1e-5
    canaries: int = 1000
    confidence: float = 0.95
    clip: float = 1.0
    data: DataLike | None = None
    recipe: Any = None
    train: Any = None
    label_column: str = "label"
    search_dirs: tuple[Path, ...] = ()


@dataclass(frozen=True)
class FederationAuditSettings:
    """``privgate fl audit``: attack a real federation's checkpoints and, with a policy, decide it.

    Attributes:
        manifest: the ``federation.yaml`` describing checkpoints, node data and non-members.
        policy: a policy with federated checks (name, file or Policy); ``None`` measures without deciding.
        attacks: the attacks to run (default: the metric attacks); those the policy names are added.
        fpr: the FPR of the TPR@FPR matrices.
        confidence: the confidence of the intervals.
    """

    manifest: str | Path
    policy: Any = None
    attacks: tuple[str, ...] | None = None
    fpr: float = 0.01
    confidence: float = 0.95


@dataclass(frozen=True)
class SimulationSettings:
    """``privgate fl simulate``: train a decentralised federation and measure who can infer whose data.

    Attributes:
        recipe: how every node trains (``module:attr`` or a Recipe).
        data: all rows (:data:`DataLike`).
        topologies: ``fully``, ``star``, ``ring``, ``random:P``, ``none`` or a graph file; several compare side by side.
        save_dir: also return every round's models in the manifest layout under this folder (as files to write).
    """

    recipe: Any
    data: DataLike
    topologies: tuple[str, ...] = ("fully",)
    nodes: int = 10
    rounds: int = 10
    distribution: str = "iid"
    local_epochs: int = 1
    holdout: float = 0.3
    population: float | None = None
    reference_models: int = 4
    attacks: tuple[str, ...] | None = None
    fpr: float = 0.01
    confidence: float = 0.95
    label_column: str = "label"
    save_dir: str | Path | None = None
    search_dirs: tuple[Path, ...] = ()


__all__ = [
    "CheckSettings",
    "DataLike",
    "DpsgdAuditSettings",
    "FederationAuditSettings",
    "HardenSettings",
    "LdpAuditSettings",
    "SimulationSettings",
    "TextOptions",
]
