"""Hardening a scikit-learn pipeline: its own capacity ladder searched by the gate, a .skops back, no DP claim.

The table is the tests' credit-like table with text columns and text labels (``tests/tables_case.py``), larger
here (600 members, non-members and population) so that a regularised forest can be told apart from a leaking
one at the policy's confidence: a forest of fully grown trees leaks (RMIA AUC ≈ 0.95), one with leaves of 64
rows does not (≈ 0.56).
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest
from cases import run_cli

POLICY = textwrap.dedent(
    """
    name: harden-tables
    sensitivity: confidential
    release: api
    confidence: 0.95
    attacks:
      loss: {}
      rmia: {models: 4, min_population: 100}
    checks:
      - {id: mia-auc, attack: best, metric: auc, max: 0.65}
    remediation: {enabled: true}
    utility: {max_drop: 0.1}
    """
)
DATA = ("--members", "m.parquet", "--nonmembers", "n.parquet", "--population", "p.parquet")


def _remediation(section: str) -> str:
    """The policy with another remediation section."""
    return POLICY.replace("remediation: {enabled: true}", f"remediation: {section}")


def _build(d: Path) -> Path:
    import skops.io as sio
    from sklearn.ensemble import RandomForestClassifier
    from tables_case import pipeline, table

    d.mkdir(parents=True, exist_ok=True)
    m, n, p = table(600, 11), table(600, 12), table(600, 13)
    for name, frame in {"m": m, "n": n, "p": p}.items():
        frame.to_parquet(d / f"{name}.parquet")
    x, y = m.drop(columns="label"), m["label"]
    sio.dump(pipeline(RandomForestClassifier(n_estimators=25, random_state=0)).fit(x, y), d / "rf.skops")
    (d / "h.yaml").write_text(POLICY)
    return d


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("harden-tables"))


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_harden_hands_back_a_regularised_pipeline_with_a_card_and_no_dp_claim(big, tmp_path):
    before = _sha(big / "rf.skops")
    out, report = tmp_path / "rf.hardened.skops", tmp_path / "r.json"
    (tmp_path / "p.yaml").write_text(_remediation("{enabled: true, capacity: [{model__min_samples_leaf: 4}, "
                                                  "{model__min_samples_leaf: 64}]}"))  # fmt: skip
    r = run_cli("harden", "rf.skops", "--policy", str(tmp_path / "p.yaml"), *DATA, "--output-model", str(out), "--json",
                str(report), "--markdown", str(tmp_path / "r.md"), "--sarif", str(tmp_path / "r.sarif"), "--junit",
                str(tmp_path / "junit.xml"), cwd=big)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "capacity search" in r.stdout and "no DP guarantee" in r.stdout
    rep = json.loads(report.read_text())
    rem = rep["remediation"]
    assert rep["job"] == "harden" and rep["verdict"] == "pass"
    assert rem["method"] == "capacity" and rem["status"] == "hardened"
    assert rem["statement"] is None and rem["accounting"] is None  # no ε anywhere
    assert [s["model__min_samples_leaf"] for s in rem["ladder"]] == [4, 64]  # the policy's ladder
    rows = rem["rows"]
    assert [row["step"] for row in rows] == list(range(1, len(rows) + 1)) and all(r["epsilon"] is None for r in rows)
    assert [row["accepted"] for row in rows] == [False] * (len(rows) - 1) + [True]  # the ladder stops at the first
    auc = [row["checks"][0]["value"] for row in rows]
    original = rem["original"]["checks"][0]["value"]
    assert original > 0.85 and auc[0] < original and auc[-1] < 0.62  # the forest leaked; the handed-out one less
    chosen = rows[-1]["setting"]
    st = rem["capacity"]
    assert st["chosen"] == chosen and st["varied"] == {"model__min_samples_leaf": 1}
    assert st["candidates"] == len(rows) == 2 and "no differential-privacy guarantee" in st["guarantee"]
    assert st["ladder"] == "the policy (remediation.capacity, 2 step(s))"
    assert st["confidence"] == pytest.approx(1 - 0.05 / 2, abs=1e-6)  # Bonferroni over the ladder's 2 steps
    assert st["selection_bits"] == pytest.approx(1.0, abs=1e-3)
    assert rep["policy"]["confidence"] == pytest.approx(st["confidence"], abs=1e-6)  # the chosen one's checks
    assert "DP-SGD" in st["dp_alternative"]
    assert rep["target"]["format"] == "skops" and rep["target"]["settings"] == chosen
    assert rep["target"]["sha256"] == _sha(out) and rem["output"]["skops"] == str(out)
    card = (tmp_path / "rf.hardened.card.md").read_text()
    assert "**No differential-privacy guarantee**" in card and "dp-statement" not in card
    block = card.split("```json capacity-statement\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(block)["chosen"] == chosen
    md = (tmp_path / "r.md").read_text()
    assert "### Remediation (capacity search, no DP guarantee)" in md and "Chosen ε" not in md
    sarif = json.loads((tmp_path / "r.sarif").read_text())["runs"][0]["properties"]
    assert sarif["capacityStatement"]["chosen"] == chosen and "dpStatement" not in sarif
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="dp_guarantee" value="none (capacity search' in junit and "dp_released_epsilon" not in junit
    assert _sha(big / "rf.skops") == before  # the input is only read

    from privgate import Target

    hardened = Target.load(out).model.estimator  # a .skops whose types privgate trusts by default: no pickle
    assert hardened.get_params()["model__min_samples_leaf"] == chosen["model__min_samples_leaf"]
    again = run_cli("check", str(out), "--policy", str(tmp_path / "p.yaml"), *DATA, "-q", cwd=big)
    assert again.returncode == 0, again.stdout + again.stderr


def test_bisect_finds_the_same_step_with_fewer_fits_in_process(big):
    from privgate import api, load_policy

    pol = load_policy(big / "h.yaml").model_copy(deep=True)
    pol.remediation.strategy = "bisect"
    found = api.harden(str(big / "rf.skops"), pol, str(big / "m.parquet"), str(big / "n.parquet"),
                       population=str(big / "p.parquet"))  # fmt: skip
    rem = found.report.remediation
    assert found.status == "hardened" and rem.strategy == "bisect"
    steps = [s["model__min_samples_leaf"] for s in rem.ladder]
    assert steps == [2, 4, 8, 16, 32, 64, 128]  # privgate's: above the forest's own 1, at most a quarter of 600
    assert rem.capacity.confidence == pytest.approx(1 - 0.05 / 7, abs=1e-6)  # Bonferroni over its 7 steps
    assert len(rem.rows) <= 3 < 6  # ⌈log2(8)⌉ fits instead of the ladder's six
    assert found.model.get_params()["model__min_samples_leaf"] == 64
    assert set(found.files) == {Path(big / "rf.hardened.skops"), Path(big / "rf.hardened.card.md")}
    assert not (big / "rf.hardened.skops").exists()  # the library writes nothing: the files come back


def test_no_setting_that_passes_writes_nothing_and_says_where_the_ladder_ended(big, tmp_path):
    (tmp_path / "p.yaml").write_text(
        POLICY.replace(
            "remediation: {enabled: true}", "remediation: {enabled: true, capacity: [{model__min_samples_leaf: 2}]}"
        )
    )
    out = tmp_path / "x.skops"
    r = run_cli("harden", "rf.skops", "--policy", str(tmp_path / "p.yaml"), *DATA, "--output-model", str(out),
                "--json", str(tmp_path / "r.json"), cwd=big)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    rem = json.loads((tmp_path / "r.json").read_text())["remediation"]
    assert rem["status"] == "no_setting" and len(rem["rows"]) == 1
    assert "even at the most regularised, step 1 (model__min_samples_leaf=2)" in rem["reason"]
    assert rem["ladder"] == [{"model__min_samples_leaf": 2}] and rem["capacity"] is None
    assert not out.exists() and not (tmp_path / "x.card.md").exists()


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        (
            "{enabled: true, capacity: [{model__min_sample_leaf: 8}]}",
            ["capacity[0] (step 1): 'model__min_sample_leaf' is not a setting",
             "did you mean 'model__min_samples_leaf'"],
        ),
        ("{enabled: true, capacity: []}", ["capacity needs at least one step"]),
        ("{enabled: false}", ["remediation is not enabled"]),
    ],
)  # fmt: skip
def test_a_bad_capacity_policy_is_one_sentence_exit_2_and_no_report(big, tmp_path, edit, needles):
    (tmp_path / "p.yaml").write_text(_remediation(edit))
    r = run_cli("harden", "rf.skops", "--policy", str(tmp_path / "p.yaml"), *DATA, "--output-model",
                str(tmp_path / "x.skops"), "--json", str(tmp_path / "r.json"), cwd=big)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and all(n in r.stderr for n in needles), r.stderr
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "x.skops").exists()


def test_the_hardened_scikit_learn_model_is_a_skops_file(big, tmp_path):
    r = run_cli("harden", "rf.skops", "--policy", "h.yaml", *DATA, "--output-model", str(tmp_path / "x.pt"), cwd=big)
    assert r.returncode == 2 and "name the --output-model *.skops" in r.stderr, r.stderr
    # a pickle may hold a torch model: its output is refused once it has loaded as a scikit-learn one
    import joblib
    import pandas as pd
    from sklearn.ensemble import RandomForestClassifier
    from tables_case import pipeline

    m = pd.read_parquet(big / "m.parquet")
    joblib.dump(pipeline(RandomForestClassifier(n_estimators=5)).fit(m.drop(columns="label"), m["label"]),
                tmp_path / "rf.joblib")  # fmt: skip
    r = run_cli("harden", str(tmp_path / "rf.joblib"), "--trust-checkpoint", "--policy", "h.yaml", *DATA,
                "--output-model", str(tmp_path / "x.pt"), cwd=big)  # fmt: skip
    assert r.returncode == 2 and "x.pt: a hardened scikit-learn model is written with skops" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rf.joblib"]  # nothing written


def test_an_estimator_without_a_known_ladder_asks_for_one_in_the_policy(big, tmp_path):
    import pandas as pd
    import skops.io as sio
    from sklearn.naive_bayes import GaussianNB
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OrdinalEncoder

    m = pd.read_parquet(big / "m.parquet")
    est = Pipeline([("encode", OrdinalEncoder()), ("nb", GaussianNB())]).fit(m.drop(columns="label"), m["label"])
    sio.dump(est, tmp_path / "nb.skops")
    r = run_cli("harden", str(tmp_path / "nb.skops"), "--policy", "h.yaml", *DATA, "--output-model",
                str(tmp_path / "x.skops"), cwd=big)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "privgate knows no capacity ladder for a GaussianNB" in r.stderr and "nb__max_depth" in r.stderr


def test_each_family_gets_its_own_ladder_from_its_own_setting():
    from lightgbm import LGBMClassifier
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import Pipeline
    from xgboost import XGBClassifier

    from privgate.dp.capacity import family_ladder, ladder

    leaf = family_ladder(RandomForestClassifier(min_samples_leaf=4), 200)
    assert [s["min_samples_leaf"] for s in leaf] == [8, 16, 32]  # past its own 4, at most a quarter of 200 rows
    assert family_ladder(LogisticRegression(C=2.0), 1000) == [{"C": v} for v in (0.2, 0.02, 0.002, 0.0002, 2e-05)]
    assert family_ladder(MLPClassifier(alpha=1e-3), 1000)[0] == {"alpha": 0.01}
    assert family_ladder(KNeighborsClassifier(n_neighbors=3), 100) == [{"n_neighbors": k} for k in (6, 12, 24)]
    hgb = family_ladder(HistGradientBoostingClassifier(), 1000)
    assert hgb[0] == {"min_samples_leaf": 40, "max_leaf_nodes": 15} and hgb[-1]["max_leaf_nodes"] == 2
    assert family_ladder(XGBClassifier(), 1000)[0] == {"min_child_weight": 2.0}
    assert family_ladder(LGBMClassifier(), 1000)[0] == {"min_child_samples": 32}
    piped = ladder(Pipeline([("inner", Pipeline([("rf", RandomForestClassifier())]))]), 1000, None, "p")
    assert piped.steps[0] == {"inner__rf__min_samples_leaf": 2} and piped.fitted == {"inner__rf__min_samples_leaf": 1}


def test_a_scikit_learn_recipe_is_no_dp_sgd_recipe_and_says_what_to_do(big, tmp_path):
    (tmp_path / "other.py").write_text(
        "from sklearn.ensemble import RandomForestClassifier\n\nRECIPE = RandomForestClassifier(min_samples_leaf=5)\n"
    )
    data = [a if a.startswith("--") else str(big / a) for a in DATA]
    r = run_cli("harden", str(big / "rf.skops"), "--policy", str(big / "h.yaml"), *data, "--recipe",
                "other:RECIPE", "--output-model", str(tmp_path / "x.pt"), cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "leave --recipe out to search the scikit-learn model's own capacity" in r.stderr, r.stderr
