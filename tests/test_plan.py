"""How much audit data decides a check: in an inconclusive check's reason and JSON, and before an audit
(``privgate plan``), through the CLI and the API; the built-in policies' needs in docs/policies.md."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cases import run_cli

from privgate import api
from privgate.planning import plan
from privgate.policy import as_policy

#: The loss attack alone, one accuracy check that 60 + 60 rows cannot decide for a model that leaks nothing.
POLICY = textwrap.dedent(
    """
    name: small
    sensitivity: confidential
    release: api
    confidence: 0.95
    attacks: {loss: {}}
    checks:
      - {id: mia-accuracy, attack: loss, metric: accuracy, max: 0.65}
      - {id: low-fpr, attack: loss, metric: tpr_at_fpr, fpr: 0.05, max: 0.2}
    """
)


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> Path:
    import skops.io as sio
    from sklearn.linear_model import LogisticRegression

    d = tmp_path_factory.mktemp("plan")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(920, 5))
    y = (x[:, 0] + rng.normal(0, 1, 920) > 0).astype(np.int64)
    np.savez(d / "m.npz", x=x[:60], y=y[:60])
    np.savez(d / "n.npz", x=x[60:120], y=y[60:120])
    np.savez(d / "m_big.npz", x=x[120:520], y=y[120:520])  # plan reads no model: any 400 rows each
    np.savez(d / "n_big.npz", x=x[520:], y=y[520:])
    sio.dump(LogisticRegression().fit(x[:60], y[:60]), d / "lr.skops")
    (d / "p.yaml").write_text(POLICY)
    return d


def test_an_inconclusive_check_says_how_many_rows_would_decide_it(case, tmp_path):
    r = run_cli("check", "lr.skops", "--policy", "p.yaml", "--members", "m.npz", "--nonmembers", "n.npz",
                "--json", str(tmp_path / "r.json"), "-v", cwd=case)  # fmt: skip
    assert r.returncode == 3, r.stdout + r.stderr
    checks = {c["id"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    acc = checks["mia-accuracy"]
    assert acc["status"] == "inconclusive" and acc["needed"]["members"] > 60 and acc["needed"]["nonmembers"] > 60
    assert f"about {acc['needed']['members']:,} members" in acc["reason"] and "add audit data" not in acc["reason"]
    assert f"{acc['needed']['members']:,} members" in r.stdout
    # 30 non-members per split cannot place a threshold at FPR 0.05 with its order-statistic bounds: sized as
    # the best a model can be
    low = checks["low-fpr"]
    assert low["status"] == "inconclusive" and low["needed"]["nonmembers"] > 60


def test_the_api_and_the_pytest_assertion_carry_the_sizes(case):
    from privgate import assert_mia_below

    rep = api.check(str(case / "lr.skops"), str(case / "p.yaml"), str(case / "m.npz"), str(case / "n.npz"))
    acc = next(c for c in rep.checks if c.id == "mia-accuracy")
    assert acc.needed is not None and acc.needed["members"] > 60
    with pytest.raises(AssertionError, match=r"about [\d,]+ members and [\d,]+ non-members would"):
        assert_mia_below(str(case / "lr.skops"), str(case / "m.npz"), str(case / "n.npz"), accuracy=0.65,
                         attack="loss")  # fmt: skip


def test_plan_says_per_check_what_decides_it_and_exits_3_when_this_data_cannot(case, tmp_path):
    out = tmp_path / "plan.json"
    r = run_cli("plan", "--policy", "p.yaml", "--members", "m.npz", "--nonmembers", "n.npz", "--json", str(out),
                cwd=case)  # fmt: skip
    assert r.returncode == 3, r.stdout + r.stderr
    got = json.loads(out.read_text())
    rows = {c["id"]: c for c in got["checks"]}
    assert got["available"] == {"members": 60, "nonmembers": 60}
    want = {row.id: row.needed.as_dict() for row in plan(as_policy(str(case / "p.yaml")), 60, 60)}
    assert {k: v["needed"] for k, v in rows.items()} == want
    assert rows["mia-accuracy"]["can_decide"] is False and rows["mia-accuracy"]["confidence"] == pytest.approx(0.975)
    assert "no" in r.stdout and f"{want['mia-accuracy']['members']:,}" in r.stdout
    # with the needed rows (and a model assumed halfway to the threshold, more), the answer changes
    n = max(v["nonmembers"] for v in want.values())
    assert n <= 400, want
    big = run_cli("plan", "-p", "p.yaml", "--members", "m_big.npz", "--nonmembers", "n_big.npz", cwd=case)
    assert big.returncode == 0, big.stdout + big.stderr
    half = api.plan(str(case / "p.yaml"), str(case / "m_big.npz"), str(case / "n_big.npz"), share=0.5)
    assert half.exit_code == 3 and half.rows[0].needed.members > want["mia-accuracy"]["members"]


def test_plan_refuses_bad_input_in_one_sentence(case):
    r = run_cli("plan", "-p", "p.yaml", "--members", "m.npz", "--nonmembers", "missing.npz", cwd=case)
    assert r.returncode == 2 and "missing.npz" in r.stderr + r.stdout and "Traceback" not in r.stderr
    r = run_cli("plan", "-p", "p.yaml", "--members", "m.npz", "--nonmembers", "n.npz", "--json", "m.npz", cwd=case)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert np.load(case / "m.npz")["x"].shape == (60, 5)  # the input is untouched


def _documented() -> dict[tuple[str, str], tuple[int, int]]:
    text = (Path(__file__).parents[1] / "docs" / "policies.md").read_text(encoding="utf-8")
    section = text.split("### Audit sizes the built-in policies need", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| `([\w:.-]+)` \|[^|]*\|[^|]*\| ([\d,]+) \| ([\d,]+) \|", section, re.M)
    return {(p, c): (int(m.replace(",", "")), int(n.replace(",", ""))) for p, c, m, n in rows}


def test_the_documented_audit_sizes_of_the_built_in_policies_are_the_functions():
    documented = _documented()
    computed = {
        (name, row.id): (row.needed.members, row.needed.nonmembers)
        for name in ("internal", "confidential", "strict")
        for row in plan(as_policy(name), 1, 1)
        if row.needed.decidable and ":" not in row.id  # inherited checks: sized as in their own policy
    }
    assert documented == computed
