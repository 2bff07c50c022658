"""Target sanity (privgate.inputs.sanity): the target's accuracy on members and non-members in every report,
and the warning when the members do not look like the model's training data."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import inproc
import numpy as np
import pytest
import torch
from cases import run_cli
from sklearn.datasets import load_digits
from torch import nn

from privgate import AuditData, Dataset, Target, check_model, load_policy, stats
from privgate.inputs.sanity import WARNING_PREFIX, Accuracy, baseline_accuracy, members_fit
from privgate.report.safe import md_text

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


def _sanity(warnings: list[str]) -> list[str]:
    return [w for w in warnings if w.startswith(WARNING_PREFIX)]


# --------------------------------------------------------------------------- the rule on counts


def test_rule_on_counts():
    a = lambda k, n: Accuracy(k, n, 0.95)  # noqa: E731
    # a well-generalising model: 0.97 on its training data, 0.96 on unseen data
    fit = members_fit(a(291, 300), a(288, 300), baseline=0.1)
    assert fit.warning is None and fit.level == pytest.approx(0.55) and fit.members_upper > 0.98
    # 36 % on both sets of a 10-class task: the members were not fitted
    fit = members_fit(a(108, 300), a(105, 300), baseline=0.1)
    assert fit.warning.startswith(
        f"{WARNING_PREFIX}: the model is no more accurate on its members (0.360 [0.306, 0.417], n = 300)"
    )
    assert "upper bound 0.417 < 0.550" in fit.warning and "guessing the most common label, 0.100" in fit.warning
    # members predicted worse than non-members
    fit = members_fit(a(150, 300), a(250, 300), baseline=0.1)
    assert fit.p_below < 1e-10 and "less accurate on its members" in fit.warning
    # a memorising model: members far better, never a warning
    assert members_fit(a(300, 300), a(160, 300), baseline=0.1).warning is None
    # too little data to tell: 5 of 10 has an upper bound of 0.81 > 0.55
    assert members_fit(a(5, 10), a(4, 10), baseline=0.1).warning is None
    # a weak model that fits its members better than unseen data does not warn either
    assert members_fit(a(150, 300), a(90, 300), baseline=0.1).warning is None
    # the level follows the most common label: 90 % negatives
    assert baseline_accuracy(np.r_[np.zeros(90, int), np.ones(10, int)], 2) == pytest.approx(0.9)
    assert baseline_accuracy(np.arange(10), 10) == pytest.approx(0.1)
    assert baseline_accuracy(np.zeros(4, int), 10) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "p_members, p_nonmembers, warn_at_most, warn_at_least",
    [
        (0.97, 0.96, 0.05, 0.0),  # well-generalising: false warnings at most α
        (0.60, 0.60, 0.025, 0.0),  # weak but above the level 0.55, no gap: at most α/2
        (0.90, 0.60, 0.0, 0.0),  # overfitting: never
        (0.36, 0.36, 1.0, 0.95),  # members not fitted: warns nearly always
        (0.75, 0.90, 1.0, 0.95),  # members worse than non-members
    ],
)
def test_warning_rates(p_members, p_nonmembers, warn_at_most, warn_at_least):
    """Binomial draws of the two accuracies (n = 300 each): the warning rates the docstring promises."""
    rng = np.random.default_rng(7)
    runs = 400
    k1, k0 = rng.binomial(300, p_members, runs), rng.binomial(300, p_nonmembers, runs)
    rate = np.mean(
        [
            members_fit(Accuracy(int(a), 300, 0.95), Accuracy(int(b), 300, 0.95), 0.1).warning is not None
            for a, b in zip(k1, k0)
        ]
    )
    assert warn_at_least <= rate <= warn_at_most, rate


# --------------------------------------------------------------------------- real models


@pytest.fixture(scope="module")
def digits():
    """An MLP that memorises 600 standardised digits; audit sets of 600 members and 600 non-members."""
    x, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(y))
    x, y = x[perm].astype(np.float32), y[perm].astype(np.int64)
    mu, sd = x[:600].mean(0), x[:600].std(0) + 1e-3
    z = ((x - mu) / sd).astype(np.float32)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(200):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.from_numpy(z[:600])), torch.from_numpy(y[:600])).backward()
        opt.step()
    return model.eval(), (z[:600], y[:600]), (z[1000:1600], y[1000:1600])


def _flip(x: np.ndarray) -> np.ndarray:
    """Images mirrored left-right: the preprocessing a pipeline might silently change."""
    return np.ascontiguousarray(x.reshape(-1, 8, 8)[:, :, ::-1].reshape(len(x), 64))


def _write(d: Path, model: nn.Module, members, nonmembers) -> None:
    d.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(model), str(d / "model.pt"))
    np.savez(d / "members.npz", x=members[0], y=members[1])
    np.savez(d / "nonmembers.npz", x=nonmembers[0], y=nonmembers[1])


def _check_all_formats(d: Path):
    r = run_cli(
        "check",
        "model.pt",
        "--policy",
        "internal",
        "--members",
        "members.npz",
        "--nonmembers",
        "nonmembers.npz",
        "--json",
        "r.json",
        "--markdown",
        "r.md",
        "--html",
        "r.html",
        "--junit",
        "r.xml",
        "--sarif",
        "r.sarif",
        "--no-step-summary",
        cwd=d,
    )
    assert r.returncode in (0, 1, 3), r.stdout + r.stderr
    return r, json.loads((d / "r.json").read_text())


def test_genuine_members_show_accuracy_in_every_format_without_warning(digits, tmp_path):
    model, members, nonmembers = digits
    _write(tmp_path, model, members, nonmembers)
    r, rep = _check_all_formats(tmp_path)
    acc = rep["target"]["accuracy"]
    conf = rep["policy"]["confidence"]  # the intervals are at the policy's confidence (internal: 99 %)
    assert rep["schema_version"] == 1 and acc["confidence"] == conf == 0.99
    m, n = acc["members"], acc["nonmembers"]
    assert (m["n"], n["n"]) == (600, 600)
    assert m["correct"] == 600 and m["value"] == 1.0  # it memorised its training set
    assert n["value"] == pytest.approx(n["correct"] / 600) and 0.95 < n["value"] < 0.98
    for x in (m, n):
        assert list(x["ci"]) == pytest.approx(list(stats.clopper_pearson(x["correct"], 600, conf)))
        assert x["ci"][0] <= x["value"] <= x["ci"][1]
    assert acc["classes"] == 10 and acc["trained_level"] == pytest.approx((1 + acc["baseline"]) / 2)
    assert _sanity(rep["warnings"]) == []
    assert (
        "outputs" in rep["target"]
        and rep["target"]["outputs"]["kind"] == "logits"
        and rep["target"]["outputs"]["note"] is None
    )
    line = f"target accuracy: members 1.000 [{m['ci'][0]:.3f}, 1.000] (n = 600) · non-members {n['value']:.3f}"
    assert line in r.stdout
    assert line in (tmp_path / "r.md").read_text() and line in (tmp_path / "r.html").read_text()
    props = {p.get("name"): p.get("value") for p in ET.parse(tmp_path / "r.xml").getroot().iter("property")}
    assert props["target_accuracy"].startswith(line)
    sarif = json.loads((tmp_path / "r.sarif").read_text())["runs"][0]
    assert sarif["properties"]["targetAccuracy"]["members"]["n"] == 600
    assert sarif["invocations"][0]["toolExecutionNotifications"] == []


def test_wrongly_preprocessed_members_warn_in_every_format(digits, tmp_path):
    """Both sets mirrored: 34 % and 36 % on a 10-class model that is 100 % on its real training data."""
    model, members, nonmembers = digits
    _write(tmp_path, model, (_flip(members[0]), members[1]), (_flip(nonmembers[0]), nonmembers[1]))
    # in process (inproc: the CLI's report, test_front_door.py); the test above runs the CLI itself
    report = inproc.check(tmp_path / "model.pt", "internal", tmp_path / "members.npz", tmp_path / "nonmembers.npz")
    text = inproc.render(report)
    for fmt, name in (("markdown", "r.md"), ("html", "r.html"), ("junit", "r.xml"), ("sarif", "r.sarif")):
        (tmp_path / name).write_text(text[fmt], encoding="utf-8")
    stdout, rep = inproc.console(report), json.loads(text["json"])
    acc = rep["target"]["accuracy"]
    assert 0.30 < acc["members"]["value"] < 0.40 and 0.30 < acc["nonmembers"]["value"] < 0.40
    assert acc["members"]["ci"][1] < acc["trained_level"] and acc["p_members_above"] > 0.025
    assert rep["verdict"] == "pass"  # what the gate would have said without the warning
    (w,) = _sanity(rep["warnings"])
    assert "no more accurate on its members" in w and "preprocessed differently" in w
    assert " ".join(w.split()) in " ".join(stdout.split())  # the console wraps long lines
    assert md_text(w) in (tmp_path / "r.md").read_text()  # escaped for GitHub's Markdown
    assert "no more accurate on its members" in (tmp_path / "r.html").read_text()
    assert w in ET.parse(tmp_path / "r.xml").getroot().find("testsuite").find("system-err").text
    notes = json.loads((tmp_path / "r.sarif").read_text())["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert [n["message"]["text"] for n in notes if n["message"]["text"].startswith(WARNING_PREFIX)] == [w]


def _audit(model, members, nonmembers):
    return check_model(
        Target(model), AuditData(Dataset(*members), Dataset(*nonmembers)), load_policy("internal"), seed=0
    )


def test_members_with_shuffled_labels_or_other_scaling_warn(digits):
    model, members, nonmembers = digits
    shuffled = (members[0], np.random.default_rng(1).permutation(members[1]))
    rep = _audit(model, shuffled, nonmembers)
    (w,) = _sanity(rep.warnings)
    assert "less accurate on its members" in w and rep.target["accuracy"]["members"]["value"] < 0.2
    # only the members scaled differently (raw pixels / 16 instead of standardised)
    x, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(y))
    raw = ((x[perm][:600]) / 16).astype(np.float32)
    rep = _audit(model, (raw, y[perm][:600]), nonmembers)
    (w,) = _sanity(rep.warnings)
    assert "less accurate on its members" in w and rep.target["accuracy"]["p_members_below"] < 1e-6


def test_well_generalising_model_does_not_warn():
    """A linear model on 10 overlapping Gaussian classes: about 0.97 on its training data, 0.96 on unseen data."""
    centres = np.random.default_rng(5).normal(0, 1, (10, 20)) * 0.85

    def sample(n: int, seed: int):
        rng = np.random.default_rng(seed)
        y = rng.integers(0, 10, n)
        return (centres[y] + rng.normal(0, 1, (n, 20))).astype(np.float32), y

    (xa, ya), nonmembers = sample(3000, 1), sample(600, 2)
    torch.manual_seed(0)
    model = nn.Linear(20, 10)
    opt = torch.optim.Adam(model.parameters(), lr=5e-2)
    for _ in range(200):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.from_numpy(xa)), torch.from_numpy(ya)).backward()
        opt.step()
    rep = _audit(model.eval(), (xa[:600], ya[:600]), nonmembers)
    acc = rep.target["accuracy"]
    assert 0.95 < acc["members"]["value"] < 0.99 and 0.94 < acc["nonmembers"]["value"] < 0.98
    assert acc["members"]["value"] - acc["nonmembers"]["value"] < 0.03
    assert _sanity(rep.warnings) == []


def test_a_model_privgate_trained_on_the_members_itself_gets_no_doubt(digits):
    """Remediation's DP-SGD candidates (Target.extra['dp']) were trained on these members by privgate."""
    model, members, nonmembers = digits
    flipped = (_flip(members[0]), members[1]), (_flip(nonmembers[0]), nonmembers[1])
    data = AuditData(Dataset(*flipped[0]), Dataset(*flipped[1]))
    rep = check_model(Target(model, extra={"dp": {"epsilon": 1.0}}), data, load_policy("internal"), seed=0)
    assert _sanity(rep.warnings) == [] and rep.target["accuracy"]["members"]["value"] < 0.4
