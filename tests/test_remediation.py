"""Remediation in process: DP-SGD retraining with Opacus and the ε search (privgate.dp).

Small and fast on purpose: scikit-learn's digits, a 64-64-10 MLP, a few DP-SGD
epochs, two-step ε schedules, RDP accounting (PRV is exercised through its
fallback). Every test asserts numbers or behaviour, not only that code runs.
The setup is tests/remediation_case.py (the ``tiny`` fixture); the CLI's ``harden`` and ``check --remediate``:
``test_remediation_cli.py``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from remediation_case import POLICY_PASSABLE
from torch import nn

from privgate import AuditData, CheckResult, Recipe, Target
from privgate.dp import remediate as rem
from privgate.dp.candidates import Candidate
from privgate.dp.clip import accuracy, search_clip_norm
from privgate.dp.hardened import save_hardened
from privgate.dp.recipe import DPRecipe
from privgate.dpsgd.records import DPSettings
from privgate.dpsgd.train import make_private_module, probe_private_training, train_dp
from privgate.errors import PolicyError, RecipeError
from privgate.policy import Utility, parse_policy

# torch.jit (TorchScript, the portable format privgate writes and loads) warns that it is deprecated
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


def _data(tiny) -> AuditData:
    return AuditData(tiny["members"], tiny["nonmembers"], tiny["population"])


def _settings(**kw) -> DPSettings:
    base = dict(epochs=2, batch_size=100, max_grad_norm=1.0, delta=1e-4, accountant="rdp", max_physical_batch_size=64)
    base.update(kw)
    return DPSettings(**base)


# --------------------------------------------------------------------------- pure rules


def test_utility_floor_rules():
    assert rem.utility_floor(None, 0.9) == (None, "no utility floor in the policy")
    assert rem.utility_floor(Utility(min=0.8), 0.95)[0] == pytest.approx(0.8)
    assert rem.utility_floor(Utility(max_drop=0.05), 0.95)[0] == pytest.approx(0.90)
    assert rem.utility_floor(Utility(max_drop=0.10, relative=True), 0.90)[0] == pytest.approx(0.81)
    floor, rule = rem.utility_floor(Utility(min=0.92, max_drop=0.05), 0.95)  # the stricter of both
    assert floor == pytest.approx(0.92) and "stricter" in rule


def _check(cid: str, status: str, value: float | None) -> CheckResult:
    return CheckResult(
        id=cid,
        attack="best",
        metric="auc",
        value=value,
        ci=[None, None],
        threshold=0.6,
        status=status,
        reason="r",
        confidence=0.95,
    )


def test_privacy_status_never_counts_inconclusive_as_pass():
    assert rem.privacy_status([_check("a", "pass", 0.5), _check("b", "fail", 0.9)]) == "fail"
    # within the threshold but the upper bound is not: more noise can decide it, so not accepted
    assert rem.privacy_status([_check("a", "pass", 0.5), _check("b", "inconclusive", 0.58)]) == "undecided"
    # no value: the data cannot measure it (e.g. TPR@0.1% FPR with 600 non-members); noise cannot help
    checks = [_check("a", "pass", 0.5), _check("b", "inconclusive", None)]
    assert rem.privacy_status(checks) == "pass"
    assert [c.id for c in rem.unresolvable(checks)] == ["b"]


@dataclass
class _FakeReport:
    checks: list = field(default_factory=list)


@dataclass
class _Fake:
    """Just what the search reads from a Candidate."""

    epsilon: float
    privacy: str
    utility: float
    floor: float = 0.8
    report: _FakeReport = field(default_factory=_FakeReport)

    @property
    def utility_ok(self) -> bool:
        return self.utility >= self.floor

    @property
    def accepted(self) -> bool:
        return self.privacy == "pass" and self.utility_ok

    # how the search's reasons name an ε candidate (Candidate's)
    none_pass, strongest, beyond = Candidate.none_pass, Candidate.strongest, Candidate.beyond
    where = Candidate.where


def _run(pattern: list[tuple[str, float]], strategy: str):
    eps = [50, 20, 10, 5, 2, 1][: len(pattern)]
    calls: list[int] = []

    def evaluate(i: int) -> _Fake:
        calls.append(i)
        status, util = pattern[i]
        checks = [] if status == "pass" else [_check("mia", "fail", 0.9)]
        return _Fake(eps[i], status, util, report=_FakeReport(checks))

    chosen, broke, reason = rem._search(evaluate, len(pattern), strategy)
    return chosen, broke, reason, calls


def test_ladder_and_bisect_choose_the_same_epsilon_with_different_costs():
    # leakage falls with ε: checks pass from ε = 2 on; utility stays above the floor until ε = 1
    pattern = [("fail", 0.97), ("fail", 0.96), ("fail", 0.95), ("fail", 0.93), ("pass", 0.90), ("pass", 0.70)]
    chosen, broke, _, calls = _run(pattern, "ladder")
    assert chosen.epsilon == 2 and broke is None and calls == [0, 1, 2, 3, 4]
    chosen, broke, _, calls = _run(pattern, "bisect")
    assert chosen.epsilon == 2 and broke is None and calls == [3, 5, 4]  # ⌈log2 7⌉ = 3 trainings
    # the checks pass at the largest ε: the ladder needs one training, bisect three
    easy = [("pass", 0.97)] * 6
    assert _run(easy, "ladder")[3] == [0]
    assert len(_run(easy, "bisect")[3]) == 3 and _run(easy, "bisect")[0].epsilon == 50


def test_search_reports_which_constraint_broke_first():
    # utility falls below the floor (0.8) at ε = 5 while the checks still fail: stop there
    pattern = [("fail", 0.97), ("fail", 0.9), ("fail", 0.85), ("fail", 0.75), ("pass", 0.6), ("pass", 0.5)]
    for strategy in ("ladder", "bisect"):
        chosen, broke, reason, calls = _run(pattern, strategy)
        assert chosen is None and broke == "utility"
        assert "utility floor broke first" in reason and "ε = 5" in reason and "check 'mia' is fail" in reason
    assert _run(pattern, "ladder")[3] == [0, 1, 2, 3]
    # utility never breaks but the checks never pass
    never = [("fail", 0.97)] * 4
    chosen, broke, reason, calls = _run(never, "ladder")
    assert chosen is None and broke == "privacy" and "even at the smallest, ε = 5" in reason and len(calls) == 4
    assert _run(never, "bisect")[1] == "privacy" and _run(never, "bisect")[3] == [2, 3]


# --------------------------------------------------------------------------- DP-SGD training


def test_train_dp_meets_and_records_its_epsilon(tiny):
    from privgate.dpsgd.accounting import calibration

    before = calibration.cache_info()
    x, y = tiny["members"].x, tiny["members"].y
    model, rec = train_dp(tiny["recipe"], x, y, seed=3, settings=_settings(epochs=3), target_epsilon=2.0)
    assert rec.accountant == "rdp" and rec.accountant_note is None
    assert 1.9 <= rec.epsilon <= 2.0  # verified after training: spent ε ≤ target, and not far below
    assert rec.noise_multiplier > 0.5 and rec.max_grad_norm == 1.0 and rec.delta == 1e-4
    assert rec.sample_rate == pytest.approx(1 / 3) and rec.batch_size == 100  # q = 1/ceil(300/100)
    assert rec.steps == 9 and rec.epochs == 3 and rec.n_train == 300  # epochs / q logical steps
    assert rec.architecture_changes == [] and rec.seconds > 0
    assert not any(k.startswith("_module") for k in model.state_dict())  # a clean module, no Opacus wrapper
    again, rec2 = train_dp(tiny["recipe"], x, y, seed=3, settings=_settings(epochs=3), target_epsilon=2.0)
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values())
    )  # same seed, same model
    # physical batches of 16 (BatchMemoryManager) do not change the logical steps or the guarantee
    _, rec3 = train_dp(
        tiny["recipe"], x, y, seed=3, settings=_settings(epochs=3, max_physical_batch_size=16), target_epsilon=2.0
    )
    assert rec3.steps == 9 and rec3.epsilon == pytest.approx(rec.epsilon)
    # ghost clipping (the default) is the same DP-SGD update as materialised per-example gradients
    hooks, rec4 = train_dp(
        tiny["recipe"], x, y, seed=3, settings=_settings(epochs=3, grad_sample_mode="hooks"), target_epsilon=2.0
    )
    assert (
        rec.grad_sample_mode == "ghost"
        and rec4.grad_sample_mode == "hooks"
        and rec4.noise_multiplier == rec.noise_multiplier
    )
    assert all(
        torch.allclose(a, b, atol=1e-5) for a, b in zip(model.state_dict().values(), hooks.state_dict().values())
    )
    # σ for (ε, δ, q, epochs) is calibrated once, not once per run (a binary search of about a second)
    after = calibration.cache_info()
    assert after.misses - before.misses <= 1 and after.hits - before.hits >= 3, (before, after)


def test_prv_failure_falls_back_to_rdp(tiny, monkeypatch, request):
    """The PRV accountant fails at large ε / small σ (Opacus #601: "Discrete mean differs significantly
    from continuous mean"); privgate must fall back to RDP and say so, not crash or skip the check."""
    from opacus.accountants import PRVAccountant

    from privgate.dpsgd.accounting import calibration

    def broken(self, delta, **kw):
        raise RuntimeError("Discrete mean differs significantly from continuous mean.")

    monkeypatch.setattr(PRVAccountant, "get_epsilon", broken)
    # σ is cached per (ε, δ, q, epochs, accountant): neither an earlier test's PRV σ nor this test's fallback
    # may answer another run
    calibration.cache_clear()
    request.addfinalizer(calibration.cache_clear)
    _, rec = train_dp(
        tiny["recipe"], tiny["members"].x, tiny["members"].y, settings=_settings(accountant="prv"), target_epsilon=8.0
    )
    assert rec.accountant == "rdp" and "PRV" in rec.accountant_note and "fell back to RDP" in rec.accountant_note
    assert 7.5 <= rec.epsilon <= 8.0


def test_batchnorm_is_replaced_and_recorded(tiny):
    recipe = Recipe(
        model_factory=lambda: nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10)),
        name="bn",
    )
    fixed, changes = make_private_module(recipe.build(), "bn")
    assert changes == ["1: BatchNorm1d → GroupNorm"] and isinstance(fixed[1], nn.GroupNorm)
    model, rec = train_dp(
        recipe, tiny["members"].x, tiny["members"].y, settings=_settings(epochs=1), target_epsilon=8.0
    )
    assert rec.architecture_changes == ["1: BatchNorm1d → GroupNorm"] and isinstance(model[1], nn.GroupNorm)
    assert probe_private_training(recipe, tiny["members"].x, tiny["members"].y) == ["1: BatchNorm1d → GroupNorm"]
    with pytest.raises(RecipeError, match="Opacus cannot compute per-example gradients"):
        probe_private_training(tiny["bad"], tiny["members"].x, tiny["members"].y)


def test_dp_recipe_trains_reference_models_like_the_target(tiny):
    from privgate.training.fingerprint import recipe_fingerprint

    x, y = tiny["members"].x, tiny["members"].y
    settings = _settings(epochs=2)
    _, rec = train_dp(tiny["recipe"], x, y, settings=settings, target_epsilon=4.0)
    dp = DPRecipe.from_training(tiny["recipe"], rec, settings)
    assert dp.vectorisable is False and tiny["recipe"].vectorisable is True
    assert (dp.noise_multiplier, dp.max_grad_norm, dp.steps_per_epoch, dp.epochs) == (rec.noise_multiplier, 1.0, 3, 2)
    ref = dp.train(x[:150], y[:150], seed=1)  # half the rows: same σ, C, steps per epoch, epochs
    assert ref.state_dict().keys() == dp.build().state_dict().keys()
    _, ref_rec = train_dp(
        dp,
        x[:150],
        y[:150],
        1,
        settings=dp.settings,
        noise_multiplier=dp.noise_multiplier,
        steps_per_epoch=dp.steps_per_epoch,
    )
    assert (
        ref_rec.steps == rec.steps
        and ref_rec.sample_rate == pytest.approx(rec.sample_rate)
        and ref_rec.epsilon == pytest.approx(rec.epsilon, rel=1e-6)
    )
    # the reference-model cache keys on the DP settings: another clip norm or σ is another recipe
    assert recipe_fingerprint(dp) != recipe_fingerprint(dataclasses.replace(dp, max_grad_norm=0.1))
    assert recipe_fingerprint(dp) != recipe_fingerprint(
        dataclasses.replace(dp, noise_multiplier=2 * dp.noise_multiplier)
    )


def test_clip_search_stops_at_the_first_clear_drop(tiny):
    x, y = tiny["members"].x, tiny["members"].y
    # plain SGD is not scale-invariant: clipping at C = 1 slows it down clearly, so C = 10 is the last good value
    sgd = Recipe(model_factory=tiny["recipe"].model_factory, optimizer="sgd", lr=0.5, batch_size=50, name="sgd")
    clip, rows = search_clip_norm(sgd, x, y, 0, _settings(batch_size=50), epochs=3, exponents=(1, 0, -3))
    assert clip == 10.0 and [r["max_grad_norm"] for r in rows] == [10.0, 1.0]  # stopped: 10^-3 never tried
    assert [r["good"] for r in rows] == [True, False] and rows[1]["accuracy"] < rows[0]["accuracy"] - 0.05
    # Adam normalises the update, so once every gradient is clipped C no longer matters: the search goes down
    clip, rows = search_clip_norm(tiny["recipe"], x, y, 0, _settings(), epochs=3, exponents=(0, -1, -2))
    assert clip == 0.01 and all(r["good"] for r in rows) and len(rows) == 3


# --------------------------------------------------------------------------- the search, end to end


@pytest.fixture(scope="module")
def hardened(tiny):
    """One remediation of the tiny model with the passable policy: (outcome, rows as they came, progress)."""
    rows: list = []
    said: list[str] = []
    target = Target(tiny["model"], source="tiny")
    out = rem.remediate(
        target,
        _data(tiny),
        parse_policy(POLICY_PASSABLE),
        tiny["recipe"],
        seed=0,
        on_row=rows.append,
        progress=said.append,
    )
    return out, rows, said


def test_remediate_hardens_a_leaking_model(tiny, hardened, tmp_path):
    out, rows, said = hardened
    section = out.report.remediation
    # progress: the original audit's attacks, then the candidate's training and attacks, each labelled with its ε
    assert said == [
        "running attack loss (1/2)",
        "running attack confidence (2/2)",
        "DP-SGD ε=8: training (model 1)",
        "DP-SGD ε=8: running attack loss (1/2)",
        "DP-SGD ε=8: running attack confidence (2/2)",
    ]
    assert section.original.verdict == "fail" and section.original.checks[0].value > 0.55
    assert out.status == "hardened" and out.report.verdict == "pass" and out.exit_code == 0
    assert section.chosen_epsilon == 8 and section.trainings == 1 and len(rows) == 1 == len(section.rows)
    row = section.rows[0]
    assert row.accepted and row.checks[0].id == "mia-acc" and row.checks[0].value <= 0.55
    floor = section.utility.floor
    assert floor == pytest.approx(section.original.utility - 0.15, abs=1e-6) and row.utility >= floor
    assert section.utility.data.startswith("population (300 rows")
    tr = row.training
    assert tr.epsilon <= 8 and tr.delta == pytest.approx(1 / 3000) and tr.steps == 24 and tr.accountant == "rdp"
    # one candidate: the released ε is that run's (composition of one run), and the statement names both
    acc, st = section.accounting, section.statement
    assert acc.method == "compose" and acc.candidates == 1 and acc.epsilon == pytest.approx(tr.epsilon, rel=1e-6)
    assert st.training_epsilon == pytest.approx(tr.epsilon) and st.released_epsilon == acc.epsilon
    assert st.unit == "record" and st.sampling.startswith("Poisson") and st.steps == 24 and st.max_grad_norm == 1.0
    assert {h.name: h.source for h in st.hyperparameters}["clipping norm C"].startswith("the policy")
    assert "training ε = " in out.report.summary or "released ε = " in out.report.summary
    assert "among 1 DP-SGD candidate(s)" in section.selection_leakage
    # the hardened model is the candidate the report describes
    assert accuracy(out.model, tiny["population"].x, tiny["population"].y) == pytest.approx(row.utility, abs=1e-6)
    written = save_hardened(out.model, tmp_path / "h.pt", tiny["members"].x, card="# card\n")
    assert Path(written["model_card"]).read_text() == "# card\n" and written["model_card"].endswith("h.card.md")
    loaded = Target.load(written["torchscript"])
    assert loaded.fmt == "torchscript" and np.allclose(
        loaded.predict_proba(tiny["population"].x), Target(out.model).predict_proba(tiny["population"].x), atol=1e-6
    )
    sd = torch.load(written["state_dict"], weights_only=True)
    assert sd.keys() == out.model.state_dict().keys()


def test_remediate_does_nothing_for_a_passing_model(tiny):
    policy = parse_policy(POLICY_PASSABLE.replace("max: 0.55", "max: 0.9"))
    out = rem.remediate(Target(tiny["model"]), _data(tiny), policy, tiny["recipe"])
    assert out.status == "not_needed" and out.report.remediation.trainings == 0 and out.model is None
    assert out.exit_code == 0 and out.report.remediation.statement is None


def test_remediation_must_be_enabled_and_needs_a_recipe(tiny):
    disabled = parse_policy(POLICY_PASSABLE.replace("enabled: true", "enabled: false"))
    with pytest.raises(PolicyError, match="remediation is not enabled"):
        rem.remediate(Target(tiny["model"]), _data(tiny), disabled, tiny["recipe"])
    with pytest.raises(RecipeError, match="needs its training recipe"):
        rem.remediate(Target(tiny["model"]), _data(tiny), parse_policy(POLICY_PASSABLE), None)


def test_the_dp_statement_is_in_every_format(hardened):
    """JSON (typed, parsed back), console (one line), Markdown, HTML, JUnit, SARIF and the model card."""
    import xml.etree.ElementTree as ET
    from html.parser import HTMLParser

    from rich.console import Console

    from privgate import Report
    from privgate.dp.card import model_card, read_statement
    from privgate.report import render
    from privgate.report.console import print_report

    out, _, _ = hardened
    st = out.report.remediation.statement
    back = Report.from_json(out.report.to_json())
    assert back.remediation.statement == st and back.remediation.accounting == out.report.remediation.accounting
    line = st.line()
    assert f"training ε = {st.training_epsilon:.3g}" in line and f"released ε = {st.released_epsilon:.3g}" in line
    console = Console(record=True, width=400)
    print_report(out.report, console)
    assert line in console.export_text()
    md = render(out.report, "markdown")
    assert f"**{line}**" in md and "#### DP statement" in md
    table = md[md.index("#### DP statement") :].split("\n\n")[1]  # the statement's table, before the hyper-parameters
    md_rows = dict(tuple(c.strip() for c in r.strip("|").split("|"))[:2] for r in table.splitlines()[2:])
    assert md_rows["δ"] == f"{st.delta:.3g}" and md_rows["noise multiplier σ"] == f"{st.noise_multiplier:.4g}"
    assert md_rows["unit of privacy"].startswith("record") and md_rows["sampling"].startswith("Poisson")

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.inside, self.cells = False, []

        def handle_starttag(self, tag, attrs):  # noqa: ANN001, ANN201
            self.inside = self.inside or (tag == "table" and ("id", "dp-statement") in attrs)

        def handle_endtag(self, tag):  # noqa: ANN001, ANN201
            self.inside = self.inside and tag != "table"

        def handle_data(self, data):  # noqa: ANN001, ANN201
            if self.inside and data.strip():
                self.cells.append(data)

    page = Cells()
    page.feed(render(out.report, "html"))
    html_rows = dict(zip(page.cells[::2], page.cells[1::2]))
    assert html_rows["clipping norm C"] == f"{st.max_grad_norm:g}" and html_rows["accountant"] == st.accountant
    assert html_rows["released ε"].startswith(f"{st.released_epsilon:.4g}")
    props = {p.get("name"): p.get("value") for p in ET.fromstring(render(out.report, "junit")).iter("property")}
    assert float(props["dp_released_epsilon"]) == st.released_epsilon and props["dp_epsilons"] == line
    sarif = json.loads(render(out.report, "sarif"))["runs"][0]["properties"]
    assert sarif["dpEpsilons"] == line and sarif["dpStatement"]["training_epsilon"] == st.training_epsilon
    card = model_card(out.report.remediation, model_file="m.hardened.pt", verdict="pass", summary=out.report.summary)
    assert read_statement(card) == st and line in card


def test_the_clip_norm_is_never_tuned_on_the_members(tiny, monkeypatch):
    from privgate import RunOptions
    from privgate.dp import clip as dp_clip

    seen: list[np.ndarray] = []
    real = dp_clip.search_clip_norm

    def spy(recipe, x, y, seed, settings, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.append(x)
        return real(recipe, x, y, seed, settings, epochs=1, exponents=(0, -1))

    monkeypatch.setattr(dp_clip, "search_clip_norm", spy)
    policy = parse_policy(POLICY_PASSABLE.replace("max_grad_norm: 1.0", "max_grad_norm: auto"))
    run = RunOptions(seed=0).resolved()
    settings = rem.settings_for(policy, tiny["recipe"], 300)
    clip, rows, source, used = dp_clip.choose_clip(policy, tiny["recipe"], _data(tiny), settings, run)
    assert len(seen) == 1 and seen[0] is tiny["population"].x  # the population's rows, not the members'
    assert clip in (1.0, 0.1) and [r["max_grad_norm"] for r in rows][:1] == [1.0]
    assert used.startswith("population (300 rows") and "never the members" in source
    # no population: no noise-free training at all, the default C
    alone = AuditData(tiny["members"], tiny["nonmembers"])
    clip, rows, source, used = dp_clip.choose_clip(policy, tiny["recipe"], alone, settings, run)
    assert (clip, rows, used) == (1.0, [], None) and len(seen) == 1 and "never tunes on the members" in source


def test_random_stopping_releases_the_papers_bound(tiny):
    from privgate.dp.selection import Trials, random_stopping_epsilon
    from privgate.dpsgd.accounting import Run, rdp_curve

    text = POLICY_PASSABLE.replace("epsilons: [8, 1]", "epsilons: [8]").replace(
        "max_grad_norm: 1.0}", "max_grad_norm: 1.0,\n              search: random_stopping, trials: {mean: 1}}"
    )
    out = rem.remediate(Target(tiny["model"]), _data(tiny), parse_policy(text), tiny["recipe"], seed=0)
    section = out.report.remediation
    acc, row = section.accounting, section.rows[0]
    assert out.status == "hardened" and acc.method == "random_stopping" and acc.trials.drawn == 1 == row.trial
    tr = row.training
    expected = random_stopping_epsilon(
        [rdp_curve([Run(tr.noise_multiplier, tr.sample_rate, tr.steps)])], tr.delta, Trials("geometric", 1.0)
    )
    assert acc.epsilon == pytest.approx(expected.epsilon, rel=1e-5) and acc.epsilon > tr.epsilon
    assert section.statement.search == "random-stopping search" and "Theorem 2" in acc.basis
