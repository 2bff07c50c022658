"""Hardening a tabular model: DP-SGD retraining of its recipe from scratch (:class:`TabularTask`).

The kind-specific half of the ε search (:mod:`privgate.dp.remediate`, the protocol in :mod:`privgate.dp.task`)
for a classifier on rows of features: settings fixed once (:mod:`privgate.dp.settings`), each candidate
retrained with :func:`privgate.dpsgd.train.train_dp` and re-audited with :class:`privgate.dp.recipe.DPRecipe`,
utility from :mod:`privgate.dp.utility`, the optional one-run audit
(:func:`privgate.audits.dpsgd.audit_remediation`), the hardened model written by :mod:`privgate.dp.hardened`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from privgate.dp.candidates import Candidate
from privgate.dp.clip import choose_clip
from privgate.dp.recipe import DPRecipe
from privgate.dp.settings import check_can_remediate, settings_for
from privgate.dp.statement import hyperparameters
from privgate.dp.task import HardenTask, Plan
from privgate.dp.utility import measure_utility, utility_data, utility_floor
from privgate.dpsgd.records import DPSettings, DPTraining
from privgate.dpsgd.train import probe_private_training, train_dp
from privgate.inputs.data import AuditData, Dataset
from privgate.inputs.target import Target
from privgate.options import RunOptions
from privgate.policy import Policy, as_policy
from privgate.recipe import Recipe
from privgate.report.model import Report
from privgate.report.remediation_section import ClipRun, SearchSettings
from privgate.stats.trivial import trivial_accuracy

SELECTION_STATEMENT = (
    "Choosing ε among {n} DP-SGD candidate(s) trained on the members costs privacy beyond the chosen run's own "
    "ε (Liu & Talwar 2019, arXiv 1811.07971; Papernot & Steinke 2022, arXiv 2110.03620): the released ε "
    "accounts for it ({how}). The clipping norm: {clip}."
)


class TabularTask(HardenTask):
    """DP-SGD retraining of a tabular model (module docstring).

    Args:
        target: the model under audit (never modified, never trained further).
        data: the audit data; utility is measured on its population, else its non-members.
        policy: the policy, with its ``utility`` and ``remediation`` sections.
        recipe: how the target was trained; DP-SGD retrains with its model factory and optimiser.
        train: the full training set (default: the audit's members).
        model_kind: what the DP statement calls the model.

    Raises:
        PolicyError: the policy does not allow remediation.
        RecipeError: no recipe, or one Opacus cannot make private (found before any audit).
    """

    candidate = Candidate

    def __init__(
        self,
        target: Target,
        data: AuditData,
        policy: Policy,
        recipe: Recipe | None,
        *,
        train: Dataset | None = None,
        run: RunOptions,
        model_kind: str = "tabular",
        output: Any = None,
    ) -> None:
        check_can_remediate(policy, recipe)
        assert recipe is not None
        self.target, self.data, self.policy, self.recipe = target, data, policy, recipe
        self.audit_recipe = recipe
        self.train_set = train or data.members
        probe_private_training(recipe, self.train_set.x, self.train_set.y, run.seed)  # bad input, before any audit
        self.n_units = len(self.train_set)
        self.model_kind, self.output = model_kind, output
        self.held_out = utility_data(data)
        self.utility_source = self.held_out.source
        self._plan: Plan | None = None
        self.clip_data: str | None = None

    @classmethod
    def open(cls, settings: Any, run: RunOptions) -> TabularTask:
        """The task of ``settings``: policy and recipe checked before the model and data are loaded."""
        from privgate.inputs.coerce import as_recipe
        from privgate.inputs.door import load_inputs

        pol, rec = as_policy(settings.policy), as_recipe(settings.recipe, list(settings.search_dirs))
        check_can_remediate(pol, rec)  # an unusable remediation setup fails before the model and data are loaded
        i = load_inputs(dataclasses.replace(settings, policy=pol, recipe=rec), run.seed)
        given = settings.model if isinstance(settings.model, (str, Path)) else "model.pt"  # in memory: a name
        from privgate.dp.hardened import default_output

        out = Path(settings.output_model) if settings.output_model else default_output(given)
        return cls(i.target, i.data, i.policy, i.recipe, train=i.members, run=run, output=out)

    # ------------------------------------------------------------------ the candidates

    def utility(self, target: Any) -> tuple[float, list[float]]:
        return measure_utility(target, self.held_out, self.policy.confidence)

    def floor(self, original: float) -> tuple[float | None, str]:
        """The policy's floor, and never below beating a constant model on the held-out rows."""
        trivial = trivial_accuracy(self.train_set.y, self.held_out.y)
        self.baseline = trivial.as_dict()
        return utility_floor(self.policy.utility, original, trivial, str(trivial.label))

    def plan(self, run: RunOptions) -> Plan:
        policy, recipe, rem = self.policy, self.recipe, self.policy.remediation
        settings = settings_for(policy, recipe, self.n_units)
        clip, clip_rows, clip_from, clip_data = choose_clip(policy, recipe, self.data, settings, run)
        settings = settings.with_clip(clip)
        self.clip_data = clip_data
        section = SearchSettings(
            epochs=settings.epochs,
            batch_size=settings.batch_size,
            max_grad_norm=settings.max_grad_norm,
            max_grad_norm_mode="auto" if rem.max_grad_norm == "auto" else "fixed",
            clip_search=[ClipRun(**r) for r in clip_rows],
            clip_search_data=clip_data,
            delta=settings.delta,
            delta_rule="auto: 1/(10·N)" if rem.delta == "auto" else "policy",
            accountant=settings.accountant,
            max_physical_batch_size=settings.max_physical_batch_size,
            n_train=self.n_units,
            start=f"public pre-trained weights {recipe.pretrained}"
            if recipe.pretrained
            else "fresh initialisation (never the audited checkpoint)",
        )
        hyper = hyperparameters(
            settings,
            epochs_from="the policy (remediation.epochs)" if rem.epochs else f"the recipe '{recipe.name}'",
            batch_from="the policy (remediation.batch_size)" if rem.batch_size else f"the recipe '{recipe.name}'",
            clip_from=clip_from,
            delta_from="the policy (remediation.delta)" if rem.delta != "auto" else "1/(10·N) for N training rows",
            recipe_name=recipe.name,
            search=rem.search,
        )
        self._plan = Plan(settings, section, hyper, clip_from, len(clip_rows))
        return self._plan

    def train(self, epsilon: float, sigma: float, seed: int, run: RunOptions) -> tuple[Any, DPTraining]:
        assert self._plan is not None
        x, y = self.train_set.x, self.train_set.y
        return train_dp(
            self.recipe, x, y, seed, settings=self._plan.settings, noise_multiplier=sigma, device=run.device
        )

    def audited(self, model: Any, record: DPTraining, label: str) -> tuple[Target, DPRecipe]:
        assert self._plan is not None
        dp_recipe = DPRecipe.from_training(self.recipe, record, self._plan.settings)
        return Target(model, source=f"<{label}>", fmt="module", extra={"dp": record.to_dict()}), dp_recipe

    # ------------------------------------------------------------------ what the section says

    def selection_statement(self, n: int, basis: str, clip_from: str) -> str:
        return SELECTION_STATEMENT.format(n=n, how=basis, clip=clip_from)

    def utility_phrase(self, value: float, original: float, floor: float | None) -> str:
        return f" with utility {value:.4f} (original {original:.4f}" + (
            f", floor {floor:.4f})" if floor is not None else ")"
        )

    def utility_of(self, value: float) -> str:
        return f"utility {value:.4f}"

    def statement(self) -> dict[str, Any]:
        recipe = self.recipe
        public = [
            f"the model architecture and the training recipe '{recipe.name}' (optimiser, learning rate)",
            f"public pre-trained weights {recipe.pretrained}"
            if recipe.pretrained
            else "no pre-trained weights (fresh initialisation)",
            "the ε schedule, the search's rules and the policy",
            f"the number of training rows N = {self.n_units} (it sets q and δ)",
        ] + ([f"the {self.clip_data} the clip norm was tuned on"] if self.clip_data else [])
        return {"public": public, "model_kind": self.model_kind}

    def one_run_audit(self, chosen: Candidate, settings: DPSettings, run: RunOptions) -> dict[str, Any]:
        """Gradient canaries in one more DP-SGD training at the chosen ε (Steinke, Nasr & Jagielski 2023)."""
        from privgate.audits.dpsgd import audit_remediation

        rem, policy = self.policy.remediation, self.policy
        run.say(f"auditing DP-SGD at ε = {chosen.epsilon:g} with gradient canaries (one more training)")
        return audit_remediation(
            self.recipe, self.train_set, settings, chosen.epsilon, rem.audit_canaries, policy.confidence, run.seed,
            run.threads,
        )  # fmt: skip

    def files(self, report: Report, chosen: Candidate) -> tuple[Report, dict[Path, tuple[str, bytes]]]:
        """The model at the output path (:mod:`privgate.dp.hardened`), its state_dict and card beside it, described."""
        from privgate.dp.card import model_card
        from privgate.dp.hardened import files_named, hardened_files

        out, model = self.output, chosen.model
        card = model_card(report.remediation, model_file=str(out), verdict=report.verdict, summary=report.summary)
        written_files, written = hardened_files(model, out, self.train_set.x, card)
        named = files_named(out)
        files = {path: (named[path], data) for path, data in written_files.items()}
        section = report.remediation.model_copy(update={"output": written, "input_sha256": self.target.sha256})
        described = {
            "path": written["model"],
            "format": written["format"],
            "sha256": written["model_sha256"],
            "white_box": True,
            "parameters": sum(p.numel() for p in model.parameters()),
            "state_dict": written["state_dict"],
            "hardened_from": {"path": str(self.target.source), "sha256": self.target.sha256},
            "dp": chosen.training.to_dict(),
            **{k: report.target[k] for k in ("accuracy", "outputs") if k in report.target},  # the hardened model's own
        }
        return report.model_copy(update={"remediation": section, "target": described}), files


__all__ = ["SELECTION_STATEMENT", "TabularTask"]
