"""The causal language-model kind: every record scored once, the policy translated, the shift guard as diagnostic.

As for a classifier on rows (:mod:`privgate.attacks.contexts.tabular`): records pooled, shuffled, split into
calibration and evaluation halves, scored blind to membership. It adds per-token log-probabilities computed once
(:mod:`privgate.lm.scoring`) and shared; the policy translated to the language-model family
(:mod:`privgate.lm.family`), with references from :class:`privgate.lm.references.ReferenceFactory`; measurements
(:mod:`privgate.lm.attacks.measures`); and the shift guard (Duan et al. 2024, arXiv 2402.07841,
:mod:`privgate.lm.shift_guard`): when it separates the sets without the model, no membership check can pass.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from privgate import stats
from privgate.attacks import threat_model_of
from privgate.attacks.contexts.base import AuditKind, Pooled, cache_warnings, pooled_order
from privgate.device import placed
from privgate.errors import DataError
from privgate.inputs.text import TextAudit, shorten
from privgate.lm.attacks.context import LMContext
from privgate.lm.family import lm_policy, skipped_attacks
from privgate.lm.references import ReferenceFactory
from privgate.lm.score_cache import cached_score_texts, open_cache
from privgate.lm.scoring import score_texts
from privgate.lm.shift_guard import GUARD, SHIFT, DistributionShift, shift_warning
from privgate.options import RunOptions
from privgate.policy import Policy
from privgate.report.model import AttackSummary
from privgate.threads import limit_threads


def pool(data: TextAudit, seed: int) -> tuple[list[str], Pooled, np.ndarray]:
    """The pooled records in the order the attacks see them, their split, and which were cut when read."""
    n1, n0 = len(data.members), len(data.nonmembers)
    texts = data.members.texts + data.nonmembers.texts
    membership = np.r_[np.ones(n1, bool), np.zeros(n0, bool)]
    rows = np.r_[np.arange(n1), np.full(n0, -1)]
    clipped = np.zeros(n1 + n0, dtype=bool)
    clipped[list(data.members.clipped) + [n1 + i for i in data.nonmembers.clipped]] = True
    perm = pooled_order(n1, n0, seed)
    membership, rows = membership[perm], rows[perm]
    pooled = Pooled(membership, stats.calibration_mask(membership, seed), rows, np.zeros(n1 + n0, dtype=np.int64))
    return [texts[i] for i in perm], pooled, clipped[perm]


class CausalLMAudit(AuditKind):
    """An audit of a causal language model (module docstring).

    Args:
        target: an :class:`~privgate.inputs.targets.hf_target.HFTarget` of kind ``causal_lm`` (its reference
            model and scoring batch with it); the models run on the run's device and go back where they were.
        data: the :class:`~privgate.inputs.text.TextAudit` (its population feeds the fine-tuned references,
            its canaries ``canary_exposure``).
        policy: the policy as written; recipe: a language-model recipe (:class:`~privgate.inputs.lm_recipe.LMRecipe`)
            for LiRA and RMIA's references, or ``None``.
    """

    def __init__(self, target: Any, data: TextAudit, policy: Policy, recipe: Any, run: RunOptions) -> None:
        super().__init__()
        self.target, self.lm, self.reference = target, target.lm, target.reference
        self.data, self.recipe, self.run = data, recipe, run
        self.shown_policy, self.policy = policy, lm_policy(policy, recipe is not None)
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(placed(self.lm.model, run.device))
        if self.reference is not None:
            self._stack.enter_context(placed(self.reference.model, run.device))
        try:
            self._score()
        except BaseException:
            self._stack.close()
            raise
        self.missing = skipped_attacks(policy, recipe is not None)
        self.summaries = [
            AttackSummary(name=n, threat_model=threat_model_of(n), status="skipped", reason=why)
            for n, why in self.missing.items()
        ]
        self.diagnostics = [DistributionShift()]

    def _score(self) -> None:
        """Every pooled record scored once by the target (and the reference model), and the attacks' context."""
        lm, run, batch = self.lm, self.run, self.target.batch_size
        self.texts, self.pooled, self.clipped = pool(self.data, run.seed)
        with limit_threads(run.threads):
            run.say(f"scoring {len(self.texts)} records")
            scores = score_texts(lm.model, lm.tokenizer, self.texts, context=lm.context, batch_size=batch)
            ref_scores, self.cache = None, open_cache(run.cache, run.cache_key)
            if self.reference is not None:
                run.say("scoring the records with the reference model")
                ref_scores, self.ref_cached = cached_score_texts(
                    self.reference.model,
                    lm.tokenizer,
                    self.texts,
                    digest=self.reference.sha256,
                    context=lm.context,
                    cache=self.cache,
                    device=run.device,
                    batch_size=batch,
                    moments=False,  # the attacks read the reference's log-probabilities only
                )
        short = np.flatnonzero(scores.n_tokens == 0)
        if len(short):
            shown = shorten(self.texts[int(short[0])])
            raise DataError(f"a record has a single token, so the model predicts none of it: {shown!r}.")
        self.scores = scores
        population = self.data.population
        self.ctx = LMContext(
            target=None,  # type: ignore[arg-type]  # language-model attacks read scores, never a Target
            x=np.asarray(self.texts, dtype=object),
            y=np.zeros(len(self.texts), dtype=np.int64),
            run=run,
            texts=self.texts,
            scores=scores,
            reference=ref_scores,
            lm=lm,
            fine_tuned=ReferenceFactory(
                self.recipe,
                population.texts if population is not None else None,
                lm,
                self.texts,
                seed=run.seed,
                device=run.device,
                cache_dir=run.cache,
                cache_key=run.cache_key,
                batch_size=batch,
                progress=run.progress,
            ),
            policy=self.policy,
            members=self.data.members.texts,
            nonmembers=self.data.nonmembers.texts,
            canaries=self.data.canaries,
            max_canaries=self.data.max_canaries,
            batch_size=batch,
        )

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def todo(self) -> dict[str, dict[str, Any]]:
        todo = self.policy.attacks_to_run()
        if self.data.canaries is not None and "canary_exposure" not in todo:  # measured; decided if a check asks
            todo["canary_exposure"] = {}
        return todo

    def finish(self, ran: dict[str, Any], missing: dict[str, str]) -> None:
        for name in {c.attack for p in self.policy.chain() for c in p.checks} - set(ran) - set(missing) - {"best"}:
            missing[name] = (
                f"'{name}' attacks classifier outputs; on a causal language model use the language-model family"
            )

    def guards(self, ran: dict[str, Any]) -> list[str]:
        return [GUARD] if self._warning(ran) else []

    def _warning(self, ran: dict[str, Any]) -> str | None:
        return shift_warning(ran[SHIFT].result if SHIFT in ran else None)

    def exposed(self, section: dict[str, Any], run: RunOptions) -> dict[str, Any]:
        """Each exposed member shown as its text, truncated."""
        where = {int(m): i for i, m in enumerate(self.pooled.member_rows) if m >= 0}
        for rec in section["records"]:
            rec["text"] = shorten(self.texts[where[rec["member_index"]]])
        return section

    def target_facts(self) -> dict[str, Any]:
        ref, recipe = self.reference, self.recipe
        return {
            **self.target.describe(),
            **({"reference_model": ref.source, "reference_sha256": ref.sha256} if ref else {}),
            **({"reference_scores_from_cache": self.ref_cached} if ref else {}),
            **({"recipe": recipe.describe()} if recipe is not None else {}),
        }

    def data_facts(self) -> dict[str, Any]:
        described = self.data.describe()
        described["truncated"] = self._truncated()
        described["tokens"] = self.scores.tokens
        return described

    def _truncated(self) -> int:
        return int(np.sum(self.scores.cut | self.clipped))  # cut when read, or longer than the context in tokens

    def warnings(self, ran: dict[str, Any], summaries: list[AttackSummary]) -> list[str]:
        shift = self._warning(ran)
        out = [w for w in (shift,) if w] + list(
            dict.fromkeys([*(self.cache.warnings if self.cache is not None else [])] + cache_warnings(ran))
        )
        truncated = self._truncated()
        if truncated:
            out.append(
                f"{truncated} of {len(self.texts)} records are longer than the model's context of "
                f"{self.lm.context} tokens and were truncated to it"
            )
        return out


__all__ = ["CausalLMAudit", "pool"]
