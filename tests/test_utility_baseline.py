"""Utility beside a model that ignores its input: the majority-class and prior baselines (issue 42, item 5).

A forest scored 0.628 where always predicting the majority class scores 0.737, and harden's table showed utility
"improving" as its candidates approached a constant model. The baselines are now reported beside utility in
``check`` (and a warning when the model is no better) and ``harden`` (a row of the table), and ``harden`` never
hands out a candidate no better than the majority guess (``privgate.stats.trivial``).
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from cases import run_cli

POLICY = textwrap.dedent(
    """
    name: baseline
    sensitivity: confidential
    release: api
    confidence: 0.95
    attacks:
      loss: {}
    checks:
      - {id: mia-auc, attack: best, metric: auc, max: 0.65}
    remediation: {enabled: true, capacity: [{model__min_samples_leaf: 0.5}]}
    """
)
DATA = ("--members", "m.parquet", "--nonmembers", "n.parquet", "--population", "p.parquet")


def test_the_baselines_are_the_majority_guess_and_the_prior_on_the_held_out_rows():
    from privgate.stats.trivial import trivial_accuracy

    train = np.array([0] * 6 + [1] * 3 + [2] * 1)  # the members: label 0 is most common (0.6, 0.3, 0.1)
    held = np.array([0] * 5 + [1] * 4 + [2] * 1)  # the held-out rows: 0.5, 0.4, 0.1
    t = trivial_accuracy(train, held)
    assert (t.label, t.correct, t.n, t.majority) == (0, 5, 10, 0.5)
    assert t.prior == pytest.approx(0.6 * 0.5 + 0.3 * 0.4 + 0.1 * 0.1)  # 0.43
    assert t.better_floor == 0.6 and t.beaten_by(6) and not t.beaten_by(5)  # one row more than the guess
    assert t.as_dict(["no", "yes", "maybe"])["label"] == "no"


def test_harden_refuses_a_candidate_no_better_than_a_constant_model(tables, tmp_path):
    # a leaf of half the rows makes every tree a stump that predicts the majority: checks pass, utility = baseline;
    # before, no floor in the policy meant this constant model was handed out (exit 0)
    (tmp_path / "p.yaml").write_text(POLICY)
    out, report = tmp_path / "x.skops", tmp_path / "r.json"
    r = run_cli("harden", "rf.skops", "--policy", str(tmp_path / "p.yaml"), *DATA, "--output-model", str(out),
                "--json", str(report), cwd=tables)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "│ baseline │ always 'good'" in r.stdout and "0.370" in r.stdout  # the constant model's row in the table
    rem = json.loads(report.read_text())["remediation"]
    base = rem["utility"]["baseline"]
    assert base["label"] == "good" and base["n"] == 200 and base["majority"] == pytest.approx(0.37)
    assert 0 < base["prior"] < base["majority"]
    assert rem["utility"]["floor"] == pytest.approx(0.375)  # one of the 200 rows more than the guess gets right
    assert "better than always predicting the most common label 'good'" in rem["utility"]["rule"]
    row = rem["rows"][0]
    assert row["privacy"] == "pass" and row["utility"] == pytest.approx(0.37) and not row["utility_ok"]
    assert rem["status"] == "no_setting" and "no better than always predicting the most common label" in rem["reason"]
    assert not out.exists()


def test_check_warns_when_the_model_is_no_better_than_the_majority_guess(tables, tmp_path):
    import pandas as pd
    import skops.io as sio
    from sklearn.ensemble import RandomForestClassifier
    from tables_case import pipeline

    m = pd.read_parquet(tables / "m.parquet")
    stump = pipeline(RandomForestClassifier(n_estimators=5, min_samples_leaf=0.5, random_state=0))
    sio.dump(stump.fit(m.drop(columns="label"), m["label"]), tmp_path / "stump.skops")
    (tmp_path / "p.yaml").write_text(POLICY)
    r = run_cli("check", str(tmp_path / "stump.skops"), "--policy", str(tmp_path / "p.yaml"), *DATA, "--json",
                str(tmp_path / "r.json"), cwd=tables)  # fmt: skip
    assert r.returncode in (0, 3), r.stdout + r.stderr
    said = " ".join((r.stdout + r.stderr).split())
    assert "no more accurate on its non-members" in said and "most common label 'good'" in said, said
    acc = json.loads((tmp_path / "r.json").read_text())["target"]["accuracy"]
    trivial = acc["trivial"]
    assert trivial["label"] == "good" and trivial["n"] == acc["nonmembers"]["n"] == 200
    assert acc["nonmembers"]["correct"] <= round(trivial["majority"] * 200)  # no better than the guess
    assert "always 'good'" in said  # beside the accuracy line of the report
