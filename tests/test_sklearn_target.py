"""scikit-learn pipelines as targets (issue 34 items 1, 3, 4): skops without pickle, clones as reference models.

The issue's "done when": ``privgate check model.skops --policy … --members m.parquet --nonmembers
n.parquet`` runs LiRA and RMIA on a Pipeline with string columns — through the CLI in a subprocess, the
Python API, a pytest assertion (pytester) and the GitHub Action; untrusted skops types are one sentence,
exit 2. Cache reuse, the recipe override and the structural attack are measured in-process.
"""

from __future__ import annotations

import json
import secrets
import textwrap

import pytest
from cases import run_cli

from privgate import api
from privgate.errors import RecipeError, TargetError
from privgate.inputs.coerce import as_dataset, as_target

pytest_plugins = ["pytester"]

CHECK = ("--members", "m.parquet", "--nonmembers", "n.parquet", "--population", "p.parquet", "--no-step-summary")


def _attacks(report) -> dict:
    rows = report["attacks"] if isinstance(report, dict) else [a.model_dump() for a in report.attacks]
    return {a["name"]: a for a in rows}


def test_the_done_when_command_runs_lira_and_rmia_on_a_pipeline_with_string_columns(tables, tmp_path):
    r = run_cli("check", "rf.skops", "--policy", "tabular.yaml", *CHECK, "--threads", "2",
                "--cache-dir", "off", "--json", str(tmp_path / "r.json"), cwd=tables)  # fmt: skip
    assert r.returncode == 1, (r.stdout[-3000:], r.stderr[-3000:])  # the forest memorised its members
    report = json.loads((tmp_path / "r.json").read_text())
    attacks = _attacks(report)
    lira, rmia = attacks["lira"], attacks["rmia"]
    assert lira["status"] == rmia["status"] == "ran"
    assert lira["models_trained"] == 8 and rmia["models_trained"] == 0  # RMIA reads LiRA's 8 (shared in the run)
    assert "trained 8 reference model(s) in parallel on 2 threads (joblib)" in lira["notes"][0]
    assert any("clones of the target (sklearn.base.clone)" in n for n in lira["notes"])
    # a forest's vote shares are exactly 1 for most members: read at half a vote, LiRA ranks them (0.72 at ±690)
    assert any("probabilities of exactly 0 or 1" in n for n in lira["notes"])
    assert lira["auc"] > 0.85 and rmia["auc"] > 0.85
    target = report["target"]
    assert target["format"] == "skops" and target["read"] == "its predict_proba"
    assert target["estimator"] == "Pipeline(ColumnTransformer(OneHotEncoder, StandardScaler) → RandomForestClassifier)"
    assert report["data"]["table"]["labels"] == ["bad", "fair", "good"]
    assert report["checks"][0]["status"] == "fail" and report["checks"][0]["ci"][0] > 0.6


def test_confidential_runs_rmia_on_the_clones_in_process(tables):
    report = api.check(tables / "hgb.skops", "confidential", tables / "m.parquet", tables / "n.parquet",
                       population=tables / "p.parquet")  # fmt: skip
    attacks = _attacks(report)
    assert attacks["rmia"]["status"] == "ran" and attacks["rmia"]["models_trained"] == 4
    assert (
        attacks["label_only"]["status"] == "skipped" and "text or category columns" in attacks["label_only"]["reason"]
    )
    assert attacks["blind"]["status"] == "ran"  # the blind baseline reads text columns as categories
    assert "margins" in report.target["read"]  # histogram gradient boosting: its raw scores are its logits


def _user_step(folder) -> None:
    """A pipeline whose FunctionTransformer calls a function of the user's own module, saved with skops."""
    import skops.io as sio

    (folder / "user_steps.py").write_text("def twice(x):\n    return x * 2\n")
    import importlib
    import sys

    sys.path.insert(0, str(folder))
    try:
        steps = importlib.import_module("user_steps")
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import FunctionTransformer
        from tables_case import table

        t = table(100, 1)
        model = make_pipeline(FunctionTransformer(steps.twice), LogisticRegression())
        sio.dump(model.fit(t[["age", "amount"]], t["label"]), folder / "own.skops")
        t.drop(columns=["job", "housing"]).to_parquet(folder / "m.parquet")
        table(100, 2).drop(columns=["job", "housing"]).to_parquet(folder / "n.parquet")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("user_steps", None)


def test_an_untrusted_skops_type_is_one_sentence_and_trusting_it_loads_the_model(tmp_path, monkeypatch):
    """The command a user runs in the model's folder, in this process (CliRunner: the CLI's flags, config, guard
    and exit code; reading a .skops file imports skops, every scikit-learn module and torch, 4.6 s of CPU per
    subprocess): refused in one sentence on stderr, exit 2; trusted in the config, loaded and audited."""
    import sys

    from click.testing import CliRunner

    from privgate.cli import cli

    _user_step(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "user_steps", raising=False)
    args = ["check", "own.skops", "--policy", "internal", "--members", "m.parquet", "--nonmembers", "n.parquet",
            "--no-step-summary", "--json", "r.json"]  # fmt: skip
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 2 and "user_steps" not in sys.modules, (refused.output, refused.exception)
    err = " ".join(refused.stderr.split())
    assert "Traceback" not in refused.output and err.startswith("error:") and err.count(". ") == 0, err
    assert "own.skops: the skops file names the type 'user_steps.twice', which privgate does not trust" in err
    assert "trust it with --trust-type user_steps.twice (or trust_types in privgate.toml)" in err
    assert not (tmp_path / "r.json").exists()
    # trusted in the project's config, the model loads (its module found beside it) and is audited
    (tmp_path / "privgate.toml").write_text('trust_types = ["user_steps.twice"]\n')
    try:
        run = CliRunner().invoke(cli, args)
    finally:
        sys.modules.pop("user_steps", None)
    assert run.exit_code in (0, 1, 3), (run.output, run.exception)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["target"]["estimator"] == "Pipeline(FunctionTransformer → LogisticRegression)"
    with pytest.raises(TargetError, match=r"--trust-type 'builtins.eval': privgate never trusts 'builtins'"):
        api.check(tmp_path / "own.skops", "internal", tmp_path / "m.parquet", tmp_path / "n.parquet",
                  trust_types=("builtins.eval",))  # fmt: skip


def test_a_random_forest_loads_from_skops_without_trusting_anything_and_joblib_needs_the_flag(tables):
    """skops 0.16 lists sklearn.tree._tree.Tree as untrusted: privgate trusts scikit-learn's own types."""
    import skops.io as sio

    assert "sklearn.tree._tree.Tree" in sio.get_untrusted_types(file=tables / "rf.skops")
    with pytest.raises(TargetError, match=r"rf.joblib: is a pickle, and loading it would run code"):
        as_target(str(tables / "rf.joblib"))
    pickled = as_target(str(tables / "rf.joblib"), trust_checkpoint=True)
    assert pickled.fmt == "sklearn" and list(pickled.model.classes_) == ["bad", "fair", "good"]


def test_the_cache_serves_the_clones_again_and_refuses_entries_of_another_key(tables, tmp_path):
    cache, key = tmp_path / "cache", secrets.token_bytes(32)

    def run(k: bytes):
        return api.check(tables / "lr.skops", tables / "clones.yaml", tables / "m.parquet", tables / "n.parquet",
                         population=tables / "p.parquet", cache_dir=cache, cache_key=k)  # fmt: skip

    first, again = run(key), run(key)
    a, b = _attacks(first)["lira"], _attacks(again)["lira"]
    assert a["models_trained"] == 4 and a["extras"]["models_from_cache"] == 0
    assert b["models_trained"] == 0 and b["extras"]["models_from_cache"] == 4
    assert a["auc"] == b["auc"] and a["tpr_at_fpr"] == b["tpr_at_fpr"]  # the same models, the same numbers
    assert len(list(cache.rglob("*.skl"))) == 4
    forged = run(secrets.token_bytes(32))  # entries written under another key are never unpickled
    c = _attacks(forged)["lira"]
    assert c["models_trained"] == 4 and c["auc"] == a["auc"]
    assert any("4 cache entries" in w and "had no valid tag" in w for w in forged.warnings)


def test_a_recipe_naming_another_estimator_overrides_the_clone(tables, tmp_path, case):
    (tmp_path / "other_forest.py").write_text(textwrap.dedent("""
        from sklearn.ensemble import ExtraTreesClassifier
        from tables_case import pipeline

        RECIPE = pipeline(ExtraTreesClassifier(n_estimators=10, min_samples_leaf=3))
    """))  # fmt: skip
    report = api.check(tables / "rf.skops", tables / "clones.yaml", tables / "m.parquet", tables / "n.parquet",
                       recipe="other_forest:RECIPE", search_dirs=(tmp_path,))  # fmt: skip
    lira = _attacks(report)["lira"]
    assert lira["status"] == "ran" and any("clones of recipe 'other_forest:RECIPE'" in n for n in lira["notes"])
    from sklearn.ensemble import RandomForestClassifier

    from privgate.sklearn_recipe import SklearnRecipe
    from privgate.training.sklearn_models import check_target

    with pytest.raises(RecipeError, match="fits scikit-learn estimators but the target is torchscript"):
        check_target(as_target(str(case.leaky_ts)), SklearnRecipe(RandomForestClassifier()))


def test_the_structural_attack_reads_the_released_trees(tables):
    forest = api.check(tables / "rf.skops", tables / "released.yaml", tables / "m.parquet", tables / "n.parquet")
    check = forest.checks[0]
    assert check.metric == "isolated_fraction" and check.status == "fail"
    assert check.value == 1.0 and check.ci[0] > 0.9  # a fully grown forest isolates every member somewhere
    structural = _attacks(forest)["structural"]
    assert structural["status"] == "ran" and structural["auc"] > 0.7
    assert "read 25 tree(s) of the released RandomForestClassifier" in structural["notes"][0]
    boosted = api.check(tables / "hgb.skops", tables / "released.yaml", tables / "m.parquet", tables / "n.parquet")
    assert _attacks(boosted)["structural"]["extras"]["trees"] == 60  # 20 iterations × 3 classes
    assert boosted.checks[0].value < 0.5  # leaves of at least 20 rows (min_samples_leaf): nobody isolated
    linear = api.check(tables / "lr.skops", tables / "released.yaml", tables / "m.parquet", tables / "n.parquet")
    assert linear.checks[0].status == "inconclusive"
    assert "the model's last step is a LogisticRegression, which has none" in _attacks(linear)["structural"]["reason"]


USER_TEST = textwrap.dedent(
    """
    from tables_case import pipeline, table
    from sklearn.ensemble import RandomForestClassifier
    from pytest_privgate import assert_mia_below


    def test_credit_model_does_not_leak():
        members, nonmembers = table(200, 1), table(200, 2)
        x, y = members.drop(columns="label"), members["label"]
        model = pipeline(RandomForestClassifier(n_estimators=25, random_state=0)).fit(x, y)
        assert_mia_below(
            model, (x, y), (nonmembers.drop(columns="label"), nonmembers["label"]), auc=0.6,
            attack="lira", attack_options={"lira": {"models": 4}},
        )
    """
)


def test_a_pytest_assertion_on_a_pipeline_fitted_on_a_dataframe(pytester: pytest.Pytester):
    from pathlib import Path

    pytester.makepyfile(tables_case=(Path(__file__).parent / "tables_case.py").read_text(), test_credit=USER_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*assert_mia_below failed (policy 'assert_mia_below' on <Pipeline>)*", "*  fail * lira auc = 0.*≤ 0.6*"]
    )


def test_the_action_gates_a_skops_pipeline(tables, tmp_path):
    from test_action import run_action

    run = run_action(
        {
            "model": str(tables / "lr.skops"),
            "policy": str(tables / "clones.yaml"),
            "members": str(tables / "m.parquet"),
            "nonmembers": str(tables / "n.parquet"),
            "population": str(tables / "p.parquet"),
            "reports-dir": "reports",
        },
        tmp_path,
    )
    gate = run.step("Run the privacy gate")
    assert gate.returncode == 0, gate.log
    report = json.loads((tmp_path / run.outputs["report"]).read_text())
    attacks = _attacks(report)
    assert attacks["lira"]["status"] == attacks["rmia"]["status"] == "ran"
    assert run.outputs["verdict"] == report["verdict"] and report["target"]["format"] == "skops"


def test_the_clones_outputs_are_read_once_per_array_and_kept_within_the_bound(tables, monkeypatch):
    """The attacks of a run read the same clones on the same rows (kind, LiRA, RMIA, the learned attack)."""
    import numpy as np

    import privgate.training.trained as trained
    from privgate import AuditData
    from privgate.training.plan import model_seeds, paired_masks
    from privgate.training.sklearn_models import own_recipe, train_clones

    target = as_target(str(tables / "rf.skops"))
    audit = AuditData(as_dataset(tables / "m.parquet", "members"), as_dataset(tables / "n.parquet", "non-members"))
    audit.check_against(target)
    x, y = audit.members.x, audit.members.y
    ens = train_clones(own_recipe(target), target.model, x, y, paired_masks(len(x), 4, 0), model_seeds(0, 4))
    first = [out for _, _, out in ens.output_batches(x, 64)]
    assert len(ens.reader._outputs) == 1 and len(first) == 4 * 4  # 4 models x 4 batches of 64 of the 200 rows
    first[0][:] = -1.0  # what a caller does with the arrays it gets never reaches the kept outputs
    again = [out for _, _, out in ens.first(2).output_batches(x, 64)]
    assert len(again) == 2 * 4 and all(np.array_equal(a, b) for a, b in zip(again[1:], first[1:8]))
    assert not np.array_equal(again[0], first[0])
    monkeypatch.setattr(trained, "OUTPUT_MEMO_BYTES", 1000)  # above the bound: streamed, nothing kept
    ens2 = train_clones(own_recipe(target), target.model, x, y, paired_masks(len(x), 4, 0), model_seeds(0, 4))
    assert len(list(ens2.output_batches(x, 64))) == 16 and ens2.reader._outputs == {}


def _final_steps():
    from sklearn.ensemble import ExtraTreesClassifier, GradientBoostingClassifier
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.svm import SVC

    steps = {
        "extra-trees": (lambda: ExtraTreesClassifier(n_estimators=10, random_state=0), "its predict_proba"),
        "gradient-boosting": (lambda: GradientBoostingClassifier(n_estimators=10, random_state=0), "margins"),
        "svc": (lambda: SVC(probability=True, random_state=0), "its predict_proba"),
        "knn": (lambda: KNeighborsClassifier(3), "its predict_proba"),
        "mlp": (lambda: MLPClassifier((16,), max_iter=50, random_state=0), "its predict_proba"),
    }
    xgboost = pytest.importorskip("xgboost")
    lightgbm = pytest.importorskip("lightgbm")
    # one thread each (as privgate's clones are): their OpenMP threads spin-wait on a loaded machine (LightGBM's
    # fit on every core cost 1.5 to 30 s of CPU from one run to the next)
    steps["xgboost"] = (
        lambda: xgboost.XGBClassifier(n_estimators=10, max_depth=3, random_state=0, n_jobs=1),
        "margins",
    )
    steps["lightgbm"] = (
        lambda: lightgbm.LGBMClassifier(n_estimators=10, verbose=-1, random_state=0, n_jobs=1),
        "margins",
    )
    return steps


@pytest.mark.parametrize(
    "kind", ["extra-trees", "gradient-boosting", "svc", "knn", "mlp", "xgboost", "lightgbm"]
)  # fmt: skip
def test_any_fitted_classifier_behind_the_encoder_is_read_and_cloned(kind):
    """Issue 34 item 1: any classifier with predict_proba or decision_function, behind the ColumnTransformer,
    fitted on the frame with string labels (XGBoost's wrapper on class indices, as it requires)."""
    import warnings

    from tables_case import pipeline, table

    make, reading = _final_steps()[kind]
    members, nonmembers = table(200, 1), table(200, 2)
    x, y = members.drop(columns="label"), members["label"]
    if kind == "xgboost":  # XGBClassifier takes class indices only
        y, nonmembers = y.map({"bad": 0, "fair": 1, "good": 2}), nonmembers.replace({"label": {"bad": 0, "fair": 1,
                                                                                             "good": 2}})  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an MLP of 50 iterations has not converged, and says so
        model = pipeline(make()).fit(x, y)
    import yaml

    from privgate.policy import parse_policy

    attacks = {"loss": {}, "lira": {"models": 4}}
    policy = {"name": "any", "sensitivity": "internal", "release": "api", "attacks": attacks,
              "checks": [{"id": "auc", "attack": "best", "metric": "auc", "max": 0.99}]}  # fmt: skip
    report = api.check(model, parse_policy(yaml.safe_dump(policy)), (x, y),
                       (nonmembers.drop(columns="label"), nonmembers["label"]))  # fmt: skip
    assert reading in report.target["read"], report.target["read"]
    lira = _attacks(report)["lira"]
    assert lira["status"] == "ran" and lira["models_trained"] == 4, lira
    assert any("clones of the target (sklearn.base.clone)" in n for n in lira["notes"])
    assert 0.0 <= lira["auc"] <= 1.0 and report.data["members"]["n"] == 200
