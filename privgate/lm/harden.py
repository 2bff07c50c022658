"""``privgate harden`` on a Hugging Face model: DP fine-tuning from the public base (:class:`LMHardenTask`).

The language-model task of the one ε search (:mod:`privgate.dp.remediate`, protocol :mod:`privgate.dp.task`): each
candidate is a DP-SGD fine-tune (:func:`privgate.lm.finetune.finetune`; Yu et al. 2022, arXiv 2110.06500; Li et
al. 2022, arXiv 2110.05679) of the recipe's public base on the members, never the leaking checkpoint, re-audited by
the gate. Unit of privacy: a record, or a user (:mod:`privgate.lm.userlevel`); utility: :mod:`privgate.lm.utility`.
The result (a ``save_pretrained`` folder, its model card, the JSON report) is returned as bytes for the caller to
write all or nothing (:mod:`privgate.lm.hardened`). Details: ``docs/remediation.md``.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from privgate.dp.candidates import Candidate
from privgate.dp.hardened import folder_beside, refuse_existing_folder
from privgate.dp.statement import hyperparameters
from privgate.dp.task import HardenTask, Plan
from privgate.dpsgd.records import DPSettings, DPTraining
from privgate.errors import DataError, PolicyError, RecipeError
from privgate.inputs.lm_recipe import LMRecipe
from privgate.lm.finetune import DPFineTune, finetune, load_base
from privgate.lm.utility import HeldOutAccuracy, HeldOutPerplexity
from privgate.options import RunOptions
from privgate.report.model import Report
from privgate.report.remediation_section import SearchSettings
from privgate.threads import limit_threads

UNIT_NOTE = (
    "one record (one line of the training text); a patient or writer with k records is protected as a group of k "
    "(roughly k·ε)"
)


def user_note(text: Any, recipe: LMRecipe, n_users: int, n_records: int) -> str:
    """The statement's unit of privacy at user level (Ponomareva et al. 2023, arXiv 2303.00654)."""
    field = getattr(text, "user_field", None) or recipe.user_field
    return (
        f"one user (field '{field}'): all of a user's records together — {n_users} users, {n_records} records; each "
        "step samples users (Poisson, q over users) and clips the sum of a user's record gradients as one "
        "contribution; the membership evaluation stays per record"
    )


def kind_of_base(model: Any) -> str:
    """``causal_lm`` or ``sequence_classifier`` for a loaded base model (its architecture's name)."""
    arch = (model.config.architectures or [""])[0]
    return "sequence_classifier" if arch.endswith("ForSequenceClassification") else "causal_lm"


class LMHardenTask(HardenTask):
    """DP fine-tuning of a Hugging Face model from its public base (module docstring); made by :meth:`open`."""

    trained_as = "DP fine-tune"
    training = "DP fine-tuning"
    trainings = "fine-tune(s)"

    @classmethod
    def open(cls, settings: Any, run: RunOptions) -> LMHardenTask:
        """Policy, recipe, output folder, canaries and users checked before any work; the inputs loaded once."""
        from privgate.inputs.canaries import load_canaries
        from privgate.inputs.coerce import as_lm_recipe, resolved
        from privgate.inputs.door import load_text_inputs
        from privgate.inputs.text import load_users
        from privgate.policy import as_policy

        dirs = tuple(settings.search_dirs) or (Path.cwd(),)
        policy = as_policy(settings.policy)
        if not policy.remediation.enabled:
            raise PolicyError(
                f"policy '{policy.name}': remediation is not enabled (set 'remediation: {{enabled: true}}' in a copy "
                "of the policy to allow DP fine-tuning)."
            )
        recipe = as_lm_recipe(settings.recipe, dirs, required=True)
        out = Path(settings.output_model) if settings.output_model else folder_beside(settings.model)
        refuse_existing_folder(out)
        where, text = dirs[0], settings.text
        canaries = resolved(text.canaries, where)
        if canaries is not None:
            load_canaries(canaries, text.max_canaries)
        user_field = getattr(text, "user_field", None) or recipe.user_field  # user-level DP: bad input before any work
        users = None
        if user_field is not None:
            members = str(resolved(str(settings.members), where))
            users = load_users(members, user_field, max_bytes=text.max_text_mib << 20)
        inputs = load_text_inputs(dataclasses.replace(settings, policy=policy), recipe_for_audit=False)
        return cls(inputs, recipe, settings, users, out, run.resolved())

    def __init__(self, inputs: Any, recipe: LMRecipe, settings: Any, users: Any, out: Path, run: RunOptions):
        self.policy, self.target, self.data = inputs.policy, inputs.target, inputs.data
        self.recipe, self.text, self.users, self.out, self.run = recipe, settings.text, users, out, run
        self.given, self.members_given = settings.model, settings.members
        self.lm = self.target.lm
        self.classifier = self.lm.kind != "causal_lm"
        self.measure_class = HeldOutAccuracy if self.classifier else HeldOutPerplexity
        self.metric, self.candidate = self.measure_class.metric, self.measure_class.candidate
        self.utility_source = (
            f"held-out text {recipe.heldout}"
            if recipe.heldout is not None
            else f"the non-members ({len(self.data.nonmembers)} records, never trained on)"
        )
        self._measure: Any = None
        self._plan: Plan | None = None

    # ------------------------------------------------------------------ the candidates

    def _held_out(self) -> Any:
        """The held-out measure, its text read when first needed (after the original audit)."""
        if self._measure is None:
            from privgate.inputs.door import text_reading
            from privgate.inputs.text import load_texts

            heldout = self.data.nonmembers
            if self.recipe.heldout is not None:
                heldout = load_texts(str(self.recipe.heldout), "held-out", **text_reading(self.text, self.lm))
            run = self.run
            self._measure = self.measure_class(heldout, self.lm.context, self.policy.confidence, run.seed, run.device)
        return self._measure

    def utility(self, target: Any) -> tuple[float, list[float]]:
        measure = self._held_out()
        with limit_threads(self.run.threads):
            return measure.utility(target.lm.model, target.lm.tokenizer)

    def floor(self, original: float) -> tuple[float | None, str]:
        return self._held_out().floor(self.policy, original)

    def plan(self, run: RunOptions) -> Plan:
        """Records or users as units; DPSettings from the policy and the recipe; the public base loaded once."""
        rem, recipe, users = self.policy.remediation, self.recipe, self.users
        self.members = self.data.members.texts
        self.n_records = len(self.members)
        if users is not None and len(users) != self.n_records:
            field = getattr(self.text, "user_field", None) or recipe.user_field
            raise DataError(
                f"{self.members_given}: {len(users)} users read from field '{field}' for {self.n_records} records."
            )
        n = self.n_units = len(set(users)) if users is not None else self.n_records  # units: users, else records
        unit = "users" if users is not None else "training records"
        clip_auto = rem.max_grad_norm == "auto"
        settings = DPSettings(
            epochs=rem.epochs or recipe.epochs,
            batch_size=rem.batch_size or recipe.batch_size,
            max_grad_norm=1.0 if clip_auto else float(rem.max_grad_norm),
            delta=1.0 / (10.0 * n) if rem.delta == "auto" else float(rem.delta),
            accountant=rem.accountant,
            max_physical_batch_size=recipe.max_physical_batch_size,
        )
        clip_from = (
            "the default 1.0: max_grad_norm is auto, and privgate never tunes it on the members without noise "
            "(language models have no population to tune it on)"
            if clip_auto
            else "the policy (remediation.max_grad_norm)"
        )
        section = SearchSettings(
            epochs=settings.epochs,
            batch_size=settings.batch_size,
            max_grad_norm=settings.max_grad_norm,
            max_grad_norm_mode="auto" if clip_auto else "fixed",
            delta=settings.delta,
            delta_rule="auto: 1/(10·N)" if rem.delta == "auto" else "policy",
            accountant=settings.accountant,
            max_physical_batch_size=settings.max_physical_batch_size,
            n_train=n,
            start=f"the public base model {recipe.base} ({recipe.mode}; never the audited checkpoint)",
        )
        hyper = hyperparameters(
            settings,
            epochs_from="the policy (remediation.epochs)" if rem.epochs else f"the recipe {recipe.source}",
            batch_from="the policy (remediation.batch_size)" if rem.batch_size else f"the recipe {recipe.source}",
            clip_from=clip_from,
            delta_from="the policy (remediation.delta)" if rem.delta != "auto" else f"1/(10·N) for N {unit}",
            recipe_name=recipe.source,
            search=rem.search,
        )
        self.base = load_base(recipe)
        if self.base[0].config.architectures and kind_of_base(self.base[0]) != self.lm.kind:
            raise RecipeError(
                f"{recipe.source}: field 'base': {recipe.base} is a {kind_of_base(self.base[0]).replace('_', ' ')}, "
                f"but the model to harden is a {self.lm.kind.replace('_', ' ')}; the base must be the same kind of "
                "model."
            )
        self._plan = Plan(settings, section, hyper, clip_from)
        return self._plan

    def train(self, epsilon: float, sigma: float, seed: int, run: RunOptions) -> tuple[Any, DPTraining]:
        assert self._plan is not None
        recipe = self.recipe
        labels = [int(v) for v in self.data.members.labels] if self.classifier else None
        model, self._tokenizer, stats = finetune(
            recipe, self.members, seed=seed, device=run.device, dp=DPFineTune(self._plan.settings, sigma, epsilon),
            base=self.base, merge=recipe.merge, labels=labels, users=self.users,
        )  # fmt: skip
        assert stats.dp is not None
        return model, stats.dp

    def audited(self, model: Any, record: DPTraining, label: str) -> tuple[Any, None]:
        """The fine-tune as the gate audits it (adapters merged), with the original's reference model."""
        from privgate.inputs.targets.hf import LoadedLM
        from privgate.inputs.targets.hf_target import hf_target

        audited = model if self.recipe.merge else copy.deepcopy(model).merge_and_unload()
        lm = LoadedLM(
            audited, self._tokenizer, self.lm.kind, f"<{label}>", "", self.lm.context, {"dp": record.to_dict()}
        )
        return hf_target(lm, reference=self.target.reference, batch_size=self.text.batch_size), None

    # ------------------------------------------------------------------ what the section says

    def selection_statement(self, n: int, basis: str, clip_from: str) -> str:
        return (
            f"Choosing ε among {n} DP fine-tune(s) of the public base on the members costs privacy beyond the "
            "chosen run's own ε (Liu & Talwar 2019, arXiv 1811.07971; Papernot & Steinke 2022, arXiv 2110.03620): "
            f"the released ε accounts for it ({basis}). The clipping norm: {clip_from}."
        )

    def utility_phrase(self, value: float, original: float, floor: float | None) -> str:
        bound = "floor" if self.classifier else "ceiling"
        return f" with held-out {self.metric} {value:.4g} (audited model {original:.4g}" + (
            f", {bound} {floor:.4g})" if floor is not None else ")"
        )

    def utility_of(self, value: float) -> str:
        return f"held-out {self.metric} {value:.4g}"

    def reason(self, reason: str | None, floor: float | None) -> str | None:
        return self._held_out().reason(reason or "", floor)

    def statement(self) -> dict[str, Any]:
        recipe, users, n = self.recipe, self.users, self.n_units
        public = [
            f"the base model {recipe.base} (public pre-trained weights; every candidate starts from it, never from "
            "the audited checkpoint)",
            f"the recipe {recipe.source} ({recipe.mode}, optimiser {recipe.optimiser_text()})",
            "the ε schedule, the search's rules and the policy",
            f"the number of {'users' if users is not None else 'training records'} N = {n} (it sets q and δ)"
            + ("" if users is None else f" and of records ({self.n_records}); which record belongs to which user"),
        ]
        return {
            "public": public,
            "model_kind": f"{self.measure_class.model_kind} (DP fine-tuning, "
            + ("LoRA adapters)" if recipe.mode == "lora" else "all weights)"),
            "unit": "record" if users is None else "user",
            "unit_note": UNIT_NOTE if users is None else user_note(self.text, recipe, n, self.n_records),
        }

    def sampling(self) -> str | None:
        if self.users is None:
            return None
        return "Poisson over users (each user joins each step independently with probability q)"

    def one_run_audit(self, chosen: Candidate, settings: DPSettings, run: RunOptions) -> dict[str, Any] | str:
        """Text canaries in one more DP fine-tune at the chosen ε (:mod:`privgate.lm.oneaudit`)."""
        if self.classifier:
            return "one-run audit not run: its text canaries are scored by a causal language model's likelihood"
        from privgate.lm.oneaudit import audit_lm_finetune

        tr, rem = chosen.training, self.policy.remediation
        run.say(f"auditing DP fine-tuning at ε = {chosen.epsilon:g} with text canaries (one more fine-tune)")
        return audit_lm_finetune(
            self.recipe, self.members, settings, chosen.epsilon, tr.noise_multiplier, rem.audit_canaries,
            self.policy.confidence, run, self.base, users=self.users,
        )  # fmt: skip

    def files(self, report: Report, chosen: Candidate) -> tuple[Report, dict[Path, tuple[str, bytes]]]:
        from privgate.lm.hardened import hardened_folder

        return hardened_folder(report, chosen, self.recipe, self.out, self.target, self.given)


__all__ = ["UNIT_NOTE", "LMHardenTask", "kind_of_base", "user_note"]
