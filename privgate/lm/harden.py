"""``privgate harden`` on a causal language model: DP fine-tuning from the public base at decreasing ε.

The tabular ε search (:mod:`privgate.dp.remediate`) for a language model, with
the same accounting (:mod:`privgate.dp.search`): each candidate is a DP-SGD
fine-tune (:func:`privgate.lm.finetune.finetune`; Yu et al. 2022, arXiv
2110.06500; Li et al. 2022, arXiv 2110.05679) of the recipe's **public base
model** on the members — never a continuation of the leaking checkpoint — with
σ calibrated by the accountant for the candidate's ε; the released ε composes
every candidate (or is the random-stopping bound), and ``max_total_epsilon``
stops a search that would exceed it. Each candidate is re-audited by the
language-model gate in the same command (membership inference, canary
exposure, extraction: :func:`privgate.lm.gate.audit_lm`).

Utility is **held-out perplexity** (lower is better): on the recipe's
``heldout`` text when it names one, else on the non-members (never trained on;
the attacks only read them). The floor is a perplexity ceiling: the policy's
``remediation.max_perplexity`` and/or ``max_perplexity_ratio`` × the audited
model's; its interval is a bootstrap over records (Efron & Tibshirani 1993).

The hardened model is a ``save_pretrained`` folder (adapters merged into the
base, or — ``merge: false`` in the recipe — the adapter naming its base) with
its model card (``README.md``, the DP statement inside) and the JSON report,
returned as bytes for the caller to write all or nothing into a folder that
does not exist yet.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from privgate.dp.candidates import Candidate, best_of, privacy_status, unresolvable
from privgate.dp.search import accounting_of, compose_search, random_stopping_search
from privgate.dp.selection import Trials
from privgate.dp.statement import hyperparameters, statement
from privgate.dp.train import DPSettings
from privgate.errors import DataError, PolicyError, RecipeError
from privgate.inputs.lm_recipe import LMRecipe, is_lm_recipe, load_lm_recipe
from privgate.inputs.text import load_users
from privgate.lm.finetune import DPFineTune, finetune, load_base
from privgate.lm.hardened import default_output, refuse_existing
from privgate.lm.hardtask import ClassifierTask, HardenTask, LMCandidate, perplexity_ceiling, perplexity_ci
from privgate.options import RunOptions
from privgate.report.model import Report
from privgate.report.remediation_section import (
    Chosen,
    RemediationSection,
    SearchSettings,
    UtilitySpec,
)
from privgate.training.threads import limit_threads

UNIT_NOTE = (
    "one record (one line of the training text); a patient or writer with k records is protected as a group of k "
    "(roughly k·ε)"
)


def _recipe(spec: Any, dirs: tuple[Path, ...]) -> LMRecipe:
    if isinstance(spec, LMRecipe):
        return spec
    if spec is None or not is_lm_recipe(spec):
        raise RecipeError(
            "hardening a language model fine-tunes its public base model with DP-SGD and needs a language-model "
            "recipe file (--recipe lm_recipe.yaml naming 'base')."
        )
    p = Path(str(spec))
    if not p.is_absolute() and not p.exists():
        p = next((d / p for d in dirs if (d / p).exists()), p)
    return load_lm_recipe(p)


def harden_lm(s: Any, run: RunOptions) -> Any:
    """:func:`privgate.api.harden` for a Hugging Face model directory (``s``: its HardenSettings)."""
    from privgate.api import Hardening, as_policy
    from privgate.inputs.canaries import load_canaries
    from privgate.inputs.targets.hf import CAUSAL, LoadedLM, load_model_dir
    from privgate.inputs.text import TextAudit, load_texts
    from privgate.lm.api import _resolve, check_lm, text_reading

    run = run.resolved()
    dirs = tuple(s.search_dirs) or (Path.cwd(),)
    policy = as_policy(s.policy)
    if not policy.remediation.enabled:
        raise PolicyError(
            f"policy '{policy.name}': remediation is not enabled (set 'remediation: {{enabled: true}}' in a copy of "
            "the policy to allow DP fine-tuning)."
        )
    recipe = _recipe(s.recipe, dirs)
    out = Path(s.output_model) if s.output_model else default_output(s.model)
    refuse_existing(out)
    where, text = dirs[0], s.text
    canaries = _resolve(text.canaries, where)
    if canaries is not None:
        load_canaries(canaries, text.max_canaries)
    user_field = getattr(text, "user_field", None) or recipe.user_field  # user-level DP: bad input before any work
    users = (
        None
        if user_field is None
        else load_users(str(_resolve(str(s.members), where)), user_field, max_bytes=text.max_text_mib << 20)
    )
    t0 = time.perf_counter()
    original = check_lm(
        s.model,
        policy,
        s.members,
        s.nonmembers,
        text=text,
        trust_checkpoint=s.trust_checkpoint,
        options=run,
        base=where,
    )
    target = load_model_dir(s.model, base_model=_resolve(text.base_model, where), trust_checkpoint=s.trust_checkpoint)
    classifier = target.kind != CAUSAL
    read = text_reading(text, target)
    data = TextAudit(
        load_texts(_resolve(str(s.members), where), "members", **read),
        load_texts(_resolve(str(s.nonmembers), where), "non-members", **read),
    )
    reference = None
    if text.reference_model is not None:
        reference = load_model_dir(_resolve(text.reference_model, where), trust_checkpoint=s.trust_checkpoint)
    heldout, heldout_from = (
        (load_texts(str(recipe.heldout), "held-out", **read), f"held-out text {recipe.heldout}")
        if recipe.heldout is not None
        else (data.nonmembers, f"the non-members ({len(data.nonmembers)} records, never trained on)")
    )
    conf = policy.confidence
    task = (ClassifierTask if classifier else HardenTask)(heldout, target.context, conf, run.seed, run.device)
    with limit_threads(run.threads):
        orig_ppl, orig_ci = task.utility(target.model, target.tokenizer)
    ceiling, rule = task.floor(policy, orig_ppl)
    rem = policy.remediation
    section = RemediationSection.opening(
        rem,
        original,
        orig_ppl,
        orig_ci,
        UtilitySpec(
            metric=task.metric, data=heldout_from, floor=None if ceiling is None else round(ceiling, 6), rule=rule
        ),
    )
    clock = (t0, time.perf_counter())

    def finish(report: Report, status: str, summary: str | None = None) -> Any:
        section.seconds = round(time.perf_counter() - clock[1], 3)
        update: dict[str, Any] = {
            "remediation": section,
            "job": "harden",
            "duration_s": round(time.perf_counter() - t0, 3),
        }
        if summary is not None:
            update["summary"] = summary
        return Hardening(report.model_copy(update=update), status)

    if original.verdict == "pass":
        section.status, section.reason = "not_needed", "the original model passes the policy; nothing was retrained"
        return finish(original, "not_needed")
    if privacy_status(original.checks) == "pass":
        blocked = unresolvable(original.checks)
        section.status = "cannot_help"
        section.reason = (
            "nothing fails; the inconclusive check(s) cannot be decided on this data whatever the model "
            f"({'; '.join(f'{c.id}: {c.reason}' for c in blocked)}), so retraining would not change the verdict"
        )
        return finish(original, "cannot_help")

    members = data.members.texts
    n_records = len(members)
    if users is not None and len(users) != n_records:
        raise DataError(f"{s.members}: {len(users)} users read from field '{user_field}' for {n_records} records.")
    n = len(set(users)) if users is not None else n_records  # the units of privacy: users, else records
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
    section.settings = SearchSettings(
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
    base = load_base(recipe)
    if base[0].config.architectures and kind_of_base(base[0]) != target.kind:
        raise RecipeError(
            f"{recipe.source}: field 'base': {recipe.base} is a {kind_of_base(base[0]).replace('_', ' ')}, but the "
            f"model to harden is a {target.kind.replace('_', ' ')}; the base must be the same kind of model."
        )
    memo: dict[Any, Candidate] = {}

    def train_candidate(eps: float, sigma: float, trial: int | None) -> Candidate:
        key = (eps, trial)
        if key in memo:
            return memo[key]
        label = f"DP fine-tune ε={eps:g}" + (f" (trial {trial})" if trial else "")
        run.say(f"{label}: training (model {len(section.rows) + 1})")
        seed = run.seed if trial is None else run.seed + 7919 * trial
        with limit_threads(run.threads):
            model, tok, stats = finetune(
                recipe, members, seed=seed, device=run.device, dp=DPFineTune(settings, sigma, eps), base=base,
                merge=recipe.merge, labels=task.labels(data.members), users=users,
            )  # fmt: skip
        audited = model if recipe.merge else copy.deepcopy(model).merge_and_unload()
        record = stats.dp
        assert record is not None
        if record.epsilon > eps * (1 + 1e-9) + 1e-12:
            raise RuntimeError(
                f"DP-SGD verification failed: the {record.accountant} accountant reports ε = {record.epsilon:.4g} "
                f"after training, above the target {eps:g}"
            )
        folder = f"dp-eps-{eps:g}" + (f"-trial{trial}" if trial else "")
        lm = LoadedLM(audited, tok, target.kind, f"<{label}>", "", target.context, {"dp": record.to_dict()})
        report = task.audit(
            lm, data, policy, reference=reference, canaries=canaries, batch_size=text.batch_size,
            options=run.replace(
                artefacts_dir=str(Path(run.artefacts_dir) / folder) if run.artefacts_dir else None,
                progress=lambda msg: run.say(f"{label}: {msg}"),
            ),
        )  # fmt: skip
        with limit_threads(run.threads):
            ppl, ci = task.utility(audited, tok)
        memo[key] = task.candidate(eps, model, None, record, report, ppl, ci, ceiling, trial)  # type: ignore[arg-type]
        return memo[key]

    def on_candidate(cand: Candidate, released_eps: float | None) -> None:
        row = cand.row(in_search=True, released_epsilon=released_eps)
        section.rows.append(row)
        if s.on_row:
            s.on_row(row)

    if rem.search == "random_stopping":
        trials = Trials(rem.trials.distribution, rem.trials.mean, rem.trials.shape)
        found = random_stopping_search(
            train_candidate, rem.epsilons, settings, n, trials, run.seed,
            max_total_epsilon=rem.max_total_epsilon, on_candidate=on_candidate,
        )  # fmt: skip
    else:
        found = compose_search(
            train_candidate, rem.epsilons, rem.strategy, settings, n,
            max_total_epsilon=rem.max_total_epsilon, on_candidate=on_candidate,
        )  # fmt: skip
    section.trainings = len(found.candidates)
    section.accounting = accounting_of(found, settings, rem.search, rem.max_total_epsilon)
    section.rows.sort(key=lambda r: (-r.epsilon, r.trial or 0))
    section.selection_leakage = (
        f"Choosing ε among {len(found.candidates)} DP fine-tune(s) of the public base on the members costs privacy "
        "beyond the chosen run's own ε (Liu & Talwar 2019, arXiv 1811.07971; Papernot & Steinke 2022, arXiv "
        f"2110.03620): the released ε accounts for it ({section.accounting.basis}). The clipping norm: {clip_from}."
    )
    if found.stopped is not None:
        best = best_of(found.candidates)
        section.status, section.first_broken = "budget_exceeded", "budget"
        section.reason = f"the search stopped: {found.stopped.why}" + (
            f"; the best candidate trained (ε = {best.epsilon:g}, held-out {task.metric} {best.utility:.4g}, checks "
            f"{best.privacy}) is not handed out"
            if best is not None
            else ""
        )
        if best is not None:
            section.best_not_released = next((r for r in section.rows if r.epsilon == best.epsilon), None)
        return finish(
            original.model_copy(update={"verdict": "fail"}),
            "budget_exceeded",
            f"{original.summary} — remediation: {section.reason}",
        )
    chosen = found.chosen
    if chosen is None:
        section.status, section.first_broken = "no_epsilon", found.broke
        section.reason = task.reason(found.reason or "", ceiling)
        return finish(original, "no_epsilon", f"{original.summary} — remediation: {section.reason}")
    tr = chosen.training
    public = [
        f"the base model {recipe.base} (public pre-trained weights; every candidate starts from it, never from the "
        "audited checkpoint)",
        f"the recipe {recipe.source} ({recipe.mode}, optimiser AdamW, learning rate {recipe.learning_rate:g})",
        "the ε schedule, the search's rules and the policy",
        f"the number of {unit} N = {n} (it sets q and δ)"
        + ("" if users is None else f" and of records ({n_records}); which record belongs to which user"),
    ]
    section.statement = statement(
        tr,
        section.accounting,
        hyper=hyper,
        public=public,
        model_kind=f"{task.model_kind} (DP fine-tuning, "
        + ("LoRA adapters)" if recipe.mode == "lora" else "all weights)"),
        unit="record" if users is None else "user",
        unit_note=UNIT_NOTE if users is None else user_note(text, recipe, n, n_records),
    )
    if users is not None:
        section.statement.sampling = "Poisson over users (each user joins each step independently with probability q)"
    section.status, section.chosen_epsilon = "hardened", chosen.epsilon
    section.chosen = Chosen(
        epsilon=chosen.epsilon, epsilon_spent=tr.to_dict()["epsilon"], utility=round(chosen.utility, 6),
        noise_multiplier=tr.noise_multiplier, max_grad_norm=tr.max_grad_norm, sample_rate=tr.sample_rate,
        steps=tr.steps, delta=tr.delta, accountant=tr.accountant,
    )  # fmt: skip
    section.reason = (
        f"DP fine-tuning at ε = {chosen.epsilon:g} (δ = {settings.delta:.3g}) "
        + ("passes every check" if chosen.report.verdict == "pass" else "passes every check the data can resolve")
        + f" with held-out {task.metric} {chosen.utility:.4g} (audited model {orig_ppl:.4g}"
        + (f", {'floor' if classifier else 'ceiling'} {ceiling:.4g})" if ceiling is not None else ")")
    )
    summary = (
        f"{chosen.report.summary} — hardened: {section.reason}; {len(found.candidates)} fine-tune(s); released ε = "
        f"{section.accounting.epsilon:.3g} including the search (training ε {tr.epsilon:.3g})"
    )
    if rem.audit and classifier:
        section.audit_summary = (
            "one-run audit not run: its text canaries are scored by a causal language model's likelihood"
        )
    elif rem.audit:
        from privgate.lm.oneaudit import audit_lm_finetune

        run.say(f"auditing DP fine-tuning at ε = {chosen.epsilon:g} with text canaries (one more fine-tune)")
        section.audit = audit_lm_finetune(
            recipe,
            members,
            settings,
            chosen.epsilon,
            tr.noise_multiplier,
            rem.audit_canaries,
            conf,
            run,
            base,
            users=users,
        )
        section.audit_summary = section.audit["summary"]
        summary += f"; {section.audit_summary}"
        if section.audit["verdict"] == "fail":
            section.status, section.reason = "audit_failed", section.audit["summary"]
            return finish(chosen.report.model_copy(update={"verdict": "fail"}), "audit_failed", summary)
    hardened = finish(chosen.report, "hardened", summary)
    return _with_files(hardened, chosen, recipe, out, target, s.model)


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


def _with_files(h: Any, chosen: Candidate, recipe: LMRecipe, out: Path, target: Any, model_dir: Any) -> Any:
    """The hardened folder's files (``save_pretrained``, tokenizer, card, report), as bytes for the caller."""
    from privgate.dp.card import model_card

    report, section = h.report, h.report.remediation
    model = chosen.model
    with tempfile.TemporaryDirectory(prefix="privgate-lm-") as tmp:
        root = Path(tmp) / "m"
        if not recipe.merge:  # the adapter alone, naming its public base
            for cfg in model.peft_config.values():
                cfg.base_model_name_or_path = str(recipe.base)
        model.save_pretrained(root, safe_serialization=True)
        tokenizer = target.tokenizer
        tokenizer.save_pretrained(root)
        blobs = {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}
    digests = {name: hashlib.sha256(b).hexdigest() for name, b in blobs.items()}
    written = {"folder": str(out), "format": "save_pretrained" + ("" if recipe.merge else " (adapter)")}
    written.update({f"sha256:{k}": v for k, v in digests.items()})
    section = section.model_copy(update={"output": written, "input_sha256": target.sha256})
    described = {
        "path": str(out),
        "format": "hf_dir",
        "kind": target.kind,
        "white_box": True,
        "parameters": sum(p.numel() for p in model.parameters()),
        "hardened_from": {"path": str(model_dir), "sha256": target.sha256},
        "base_model": str(recipe.base),
        "adapter": not recipe.merge,
        "dp": chosen.training.to_dict(),
    }
    report = report.model_copy(update={"remediation": section, "target": described})
    card = model_card(section, model_file=str(out), verdict=report.verdict, summary=report.summary)
    files = {out / name: (f"hardened model's {name}", data) for name, data in blobs.items()}
    files[out / "README.md"] = ("hardened model's card (DP statement)", card.encode("utf-8"))
    files[out / "privgate-report.json"] = (
        "hardened model's report",
        json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False).encode("utf-8"),
    )
    return dataclasses.replace(h, report=report, model=model, files=files)


__all__ = ["LMCandidate", "harden_lm", "perplexity_ceiling", "perplexity_ci"]
