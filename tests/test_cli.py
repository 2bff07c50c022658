"""The CLI as a user runs it: a subprocess, exit codes, the JSON report parsed back."""

from __future__ import annotations

import json
import shutil

import inproc
import numpy as np
import pytest
from cases import run_cli

from privgate import CheckResult, decision, load_policy, stats
from privgate.report.model import EXIT_CODES


def _check(case, model, policy="internal", *extra, json_path=None):
    args = [
        "check",
        str(model),
        "--policy",
        policy,
        "--members",
        str(case.members),
        "--nonmembers",
        str(case.nonmembers),
    ]
    if json_path:
        args += ["--json", str(json_path)]
    return run_cli(*args, *extra)


def test_leaky_model_fails_internal_with_numbers(case, tmp_path):
    out = tmp_path / "report.json"
    r = _check(case, case.leaky_ts, json_path=out)
    assert r.returncode == 1, r.stderr
    rep = json.loads(out.read_text())
    assert rep["schema_version"] == 1
    assert rep["verdict"] == "fail"
    (chk,) = rep["checks"]
    assert chk["id"] == "mia-accuracy" and chk["status"] == "fail"
    # a fail is a proven violation: even the lower bound is above the threshold
    assert 0.8 < chk["ci"][0] < chk["value"] < chk["ci"][1]
    assert chk["chosen_attack"] in {"loss", "modified_entropy", "true_class_confidence", "learned"}
    # internal holds at 99 %; best of 7 attacks: Bonferroni-adjusted confidence
    assert rep["policy"]["confidence"] == 0.99
    assert chk["confidence"] == pytest.approx(1 - 0.01 / 7)
    assert chk["details"]["bonferroni"] == {"alpha": pytest.approx(0.01), "checks": 1, "attacks": 7}
    # the deciding attack has the highest point estimate among the failing candidates
    cands = chk["details"]["candidates"]
    assert max((c for c in cands if c["status"] == "fail"), key=lambda c: c["value"])["attack"] == chk["chosen_attack"]
    assert chk["n_members"] == 150 and chk["n_nonmembers"] == 150
    names = {a["name"]: a for a in rep["attacks"]}
    assert set(names) == {
        "loss",
        "confidence",
        "entropy",
        "modified_entropy",
        "true_class_confidence",
        "correctness",
        "learned",
    }
    loss = names["loss"]
    assert loss["auc"] > 0.7 and loss["auc_ci"][0] > 0.6
    assert [p["fpr"] for p in loss["tpr_at_fpr"]] == [0.001, 0.01]
    assert loss["tpr_at_fpr"][0]["resolvable"] is False  # 150 non-members cannot measure FPR 0.001
    assert loss["tpr_at_fpr"][1]["resolvable"] is True
    # next to every TPR@FPR: the FPR its threshold achieved on the evaluation split, with an interval
    low = loss["tpr_at_fpr"][1]
    assert low["fpr_achieved"] is not None and low["fpr_ci"][0] <= low["fpr_achieved"] <= low["fpr_ci"][1]
    # correctness scores take two values: not measurable at 1 % FPR, said so
    corr = names["correctness"]["tpr_at_fpr"][1]
    assert corr["measurable"] is False and "not measurable at FPR 0.01" in corr["reason"]
    assert loss["roc"]["fpr"][0] == 0.0 and loss["roc"]["fpr"][-1] == 1.0
    assert rep["environment"]["seed"] == 0 and rep["environment"]["versions"]["torch"]
    assert rep["target"]["format"] == "torchscript" and len(rep["target"]["sha256"]) == 64
    # console: one row per check and the verdict line
    assert "mia-accuracy" in r.stdout and "FAIL" in r.stdout


def test_regularised_model_passes_internal_and_no_library_warns(case, tmp_path):
    """The regularised model passes; loading a TorchScript model (torch.jit.load is deprecated in torch 2.x) and
    the whole run warn nothing, even with Python's warnings on."""
    out = tmp_path / "r.json"
    r = run_cli(
        "check", str(case.safe_ts), "--policy", "internal", "--members", str(case.members), "--nonmembers",
        str(case.nonmembers), "--json", str(out), env={"PYTHONWARNINGS": "default"},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Warning" not in r.stderr and "warn" not in r.stderr, r.stderr
    rep = json.loads(out.read_text())
    assert rep["verdict"] == "pass"
    assert rep["checks"][0]["ci"][1] <= 0.8


def test_unmeasurable_check_is_inconclusive_exit_3(case, tmp_path):
    pol = tmp_path / "lowfpr.yaml"
    pol.write_text(
        "name: lowfpr\nsensitivity: confidential\nrelease: api\n"
        "checks:\n  - {id: tpr, attack: loss, metric: tpr_at_fpr, fpr: 0.001, max: 0.5}\n"
    )
    out = tmp_path / "r.json"
    r = _check(case, case.safe_ts, str(pol), json_path=out)
    assert r.returncode == 3, r.stdout + r.stderr
    chk = json.loads(out.read_text())["checks"][0]
    assert chk["status"] == "inconclusive" and chk["value"] is None
    assert "1000 non-members" in chk["reason"]


def test_decision_rules_on_one_interval(tmp_path):
    """One measured interval, four thresholds: fail only above it, pass only below it, inconclusive across it.

    The rules are pure functions of the interval (:func:`privgate.decision.decide`), tested here on an interval
    measured from a leaking attack's scores and on policies read from YAML as a user writes them; the exit codes
    1 / 3 / 0 of fail / inconclusive / pass are tested through the CLI in a subprocess by the tests around this one.
    """
    rng = np.random.default_rng(0)
    # a loss attack that separates 150 + 150 evaluation rows well, but not perfectly
    sp = stats.SplitScores(
        cal_in=rng.normal(1.0, 1, 150), cal_out=rng.normal(0, 1, 150), eval_in=rng.normal(1.0, 1, 150),
        eval_out=rng.normal(0, 1, 150),
    )  # fmt: skip
    pol = tmp_path / "edge.yaml"

    def decide(mx: float, extra: str = "") -> tuple[dict, int]:
        pol.write_text(
            f"name: edge\nsensitivity: internal\nrelease: api\n{extra}"
            f"checks:\n  - {{id: acc, attack: loss, metric: accuracy, max: {mx}}}\n"
        )
        policy = load_policy(str(pol))
        (check,) = policy.checks
        est = stats.balanced_accuracy(sp, policy.confidence)
        status, reason = decision.decide(est, check, policy.decision)
        verdict = decision.verdict_of(
            [CheckResult(**_fields(check, policy), status=status, reason=reason, confidence=est.confidence)]
        )
        return {"status": status, "reason": reason, "value": est.value, "ci": [est.lo, est.hi]}, EXIT_CODES[verdict]

    chk, _ = decide(0.5)
    value, (lo, hi) = chk["value"], chk["ci"]
    assert lo < value < hi
    below_lo, mid_low, mid_high, above_hi = lo - 0.01, (lo + value) / 2, (value + hi) / 2, min(1.0, hi + 0.01)
    c, code = decide(below_lo)
    assert (c["status"], code) == ("fail", 1) and "even the lower bound" in c["reason"]
    c, code = decide(mid_low)  # the point estimate is over, the lower bound is not: not proven
    assert (c["status"], code) == ("inconclusive", 3) and "cannot prove a violation" in c["reason"]
    c, code = decide(mid_high)  # within, but the upper bound is not
    assert (c["status"], code) == ("inconclusive", 3) and "cannot rule out" in c["reason"]
    c, code = decide(above_hi)
    assert (c["status"], code) == ("pass", 0)
    # decided on the point estimate (no error control): pass and fail around the value
    assert decide(mid_high, "decision: point\n")[0]["status"] == "pass"
    assert decide(mid_low, "decision: point\n")[0]["status"] == "fail"


def _fields(check, policy) -> dict:
    return decision.check_fields(check, decision.Level.of(policy, policy)) | {"value": None, "ci": [None, None]}


@pytest.fixture(scope="module")
def seed_7_quiet(case, tmp_path_factory):
    """One CLI run of the leaky model at ``--seed 7 --quiet``: (the finished process, its JSON report)."""
    out = tmp_path_factory.mktemp("seed7") / "r7.json"
    return _check(case, case.leaky_ts, "internal", "--seed", "7", "--quiet", json_path=out), out


def test_same_seed_same_numbers_other_seed_other_split(case, seed_7_quiet):
    """`--seed` reaches the split: the CLI's numbers at seed 7 are the Python API's at seed 7; the API repeats
    itself at seed 0 and differs from seed 7 (one subprocess, shared with the --quiet test, three in-process
    audits)."""
    import privgate

    def numbers(rep):
        return [(c["value"], c["ci"]) for c in rep["checks"]] + [
            (a["auc"], a["auc_ci"], a["accuracy"]) for a in rep["attacks"]
        ]

    def api(seed):
        rep = privgate.check(str(case.leaky_ts), "internal", str(case.members), str(case.nonmembers), seed=seed)
        return numbers(json.loads(rep.to_json()))

    _, out = seed_7_quiet
    seven = numbers(json.loads(out.read_text()))
    assert api(7) == seven
    first = api(0)
    assert api(0) == first
    assert seven != first


def test_state_dict_needs_recipe(case, tmp_path):
    r = _check(case, case.leaky_state)
    assert r.returncode == 2
    assert "--recipe" in r.stderr and "Traceback" not in r.stderr
    # with the recipe (found from the working folder, as the CLI's --recipe is: tests/test_bad_input.py) it is
    # audited: in process through privgate.api, the CLI's report (tests/test_front_door.py)
    report = inproc.check(
        case.leaky_state, "internal", case.members, case.nonmembers, recipe=case.recipe_spec, search_dirs=(case.dir,)
    )
    assert report.exit_code == 1
    assert json.loads(inproc.render(report, "json")["json"])["target"]["format"] == "state_dict"


def test_unavailable_attack_is_reported_not_dropped(case, monkeypatch):
    """A policy may name an attack this version does not implement: its check is inconclusive, with the reason."""
    import numpy as np

    import privgate
    from privgate.attacks import PLANNED
    from privgate.policy import parse_policy

    monkeypatch.setitem(PLANNED, "future_attack", "black-box")
    pol = parse_policy(
        "name: p\nsensitivity: internal\nrelease: api\n"
        "checks:\n  - {id: acc, attack: loss, metric: accuracy, max: 0.99}\n  - {id: fut, attack: "
        "future_attack, metric: auc, max: 0.6}\n"
    )
    m, n = np.load(case.members), np.load(case.nonmembers)
    rep = privgate.check(str(case.safe_ts), pol, (m["x"], m["y"]), (n["x"], n["y"]))
    fut = next(c for c in rep.checks if c.id == "fut")
    assert fut.status == "inconclusive" and "not implemented" in fut.reason
    assert any(a.name == "future_attack" and a.status == "unavailable" for a in rep.attacks)
    assert rep.verdict == "inconclusive" and rep.exit_code == 3


def test_quiet_prints_only_the_verdict(seed_7_quiet):
    r, _ = seed_7_quiet
    assert r.returncode == 1
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("FAIL:")


def test_json_report_never_overwrites_an_input(case, tmp_path):
    members = tmp_path / "members.npz"
    shutil.copy(case.members, members)
    before = members.read_bytes()
    r = run_cli(
        "check",
        str(case.leaky_ts),
        "--policy",
        "internal",
        "--members",
        str(members),
        "--nonmembers",
        str(case.nonmembers),
        "--json",
        str(members),
    )
    assert r.returncode == 2 and "refusing to overwrite" in r.stderr
    assert members.read_bytes() == before


def test_config_found_upward_and_flags_override(case, tmp_path):
    proj = tmp_path / "proj"
    sub = proj / "deep" / "er"
    sub.mkdir(parents=True)
    for f in (case.leaky_ts, case.members, case.nonmembers):
        shutil.copy(f, proj / f.name)
    (proj / "pyproject.toml").write_text(
        "[project]\nname='x'\n[tool.privgate]\nmodel = 'leaky.ts.pt'\npolicy = 'internal'\n"
        "members = 'members.npz'\nnonmembers = 'nonmembers.npz'\njson = 'out/report.json'\n"
    )
    r = run_cli("check", cwd=sub)
    assert r.returncode == 1, r.stderr
    assert json.loads((proj / "out" / "report.json").read_text())["policy"]["name"] == "internal"
    r = run_cli("check", "--policy", "public", cwd=sub)  # a flag overrides the config
    assert r.returncode == 0, r.stderr
    assert "requires no checks" in r.stdout  # the public policy passes the leaky model without an attack


def test_policy_subcommands():
    r = run_cli("policy", "list")
    assert r.returncode == 0
    for name in ("public", "internal", "confidential", "strict"):
        assert name in r.stdout
    r = run_cli("policy", "show", "internal")
    assert r.returncode == 0 and "max: 0.80" in r.stdout and "# Reasoning" in r.stdout
    r = run_cli("policy", "schema")
    assert r.returncode == 0
    schema = json.loads(r.stdout)
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema)
    assert {"name", "sensitivity", "release", "checks"} <= set(schema["properties"])


def test_version_and_help():
    r = run_cli("--version")
    assert r.returncode == 0 and "0.1.0" in r.stdout
    r = run_cli("check", "--help")
    assert r.returncode == 0 and "--trust-checkpoint" in r.stdout


def test_internal_error_exit_4_without_traceback(case, monkeypatch):
    from click.testing import CliRunner

    import privgate.api
    from privgate.cli import cli

    def boom(*a, **k):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(privgate.api, "check", boom)
    res = CliRunner().invoke(
        cli,
        [
            "check",
            str(case.leaky_ts),
            "--policy",
            "internal",
            "--members",
            str(case.members),
            "--nonmembers",
            str(case.nonmembers),
        ],
    )
    assert res.exit_code == 4
    assert "internal error" in res.output and "Traceback" not in res.output
    # $PRIVGATE_DEBUG (read once by the group, privgate.cli.guard.Environment) asks for the traceback
    args = ["check", str(case.leaky_ts), "--policy", "internal", "--members", str(case.members)]
    debug = CliRunner().invoke(cli, [*args, "--nonmembers", str(case.nonmembers)], env={"PRIVGATE_DEBUG": "1"})
    assert debug.exit_code == 4 and "Traceback" in debug.output and "simulated bug" in debug.output


def _cli_imports(args: list[str], modules: tuple[str, ...], cwd=None):  # noqa: ANN001, ANN202
    """Run ``privgate ARGS`` in a fresh interpreter; its output, and as the last stdout line ``EXIT <code> LOADED
    <the names of ``modules`` it imported, or ->``."""
    import os
    import subprocess
    import sys

    if os.environ.get("PRIVGATE_DEVICE", "").strip().lower() == "cuda":  # make test-gpu: `--device cuda` is
        # checked first, which imports torch (a machine without a GPU refuses it in one sentence before any input)
        modules = tuple(m for m in modules if m != "torch")
    script = (
        "import sys\n"
        "from privgate.cli import cli\n"
        "try:\n"
        f"    cli({args!r}, prog_name='privgate')\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        f"print('EXIT', code, 'LOADED', ','.join(m for m in {modules!r} if m in sys.modules) or '-')\n"
    )
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("PRIVGATE_DEBUG", None)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def test_policy_list_does_not_import_torch():
    """`privgate policy list` validates the built-ins without loading torch, scipy or scikit-learn (5.6 s with them)."""
    r = _cli_imports(["policy", "list"], ("torch", "scipy", "sklearn", "opacus"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "EXIT 0 LOADED -"
    rows = [line.split() for line in r.stdout.splitlines()[1:-1]]
    # in the order of the ladder, each with what it extends, its checks (inherited included) and its confidence
    assert [row[:6] for row in rows] == [
        ["public", "public", "model", "—", "0", "0.95"],
        ["internal", "internal", "api", "—", "1", "0.99"],
        ["confidential", "confidential", "api", "internal", "4", "0.975"],
        ["strict", "strictly_confidential", "model", "confidential", "9", "0.95"],
    ]


@pytest.mark.parametrize("args", [["--version"], ["check", "--help"], ["audit", "dpsgd", "--help"]])
def test_the_format_flags_cost_no_report_import(args):
    """Every command's output flags come from the format registry, which names its writers: starting the CLI (its
    help, its version, a refused run's first step) imports neither the report model nor a writer, nor numpy."""
    names = ("numpy", "pydantic", "privgate.report.model", "privgate.report.html", "privgate.report.junit",
             "privgate.report.sarif", "privgate.report.markdown")  # fmt: skip
    r = _cli_imports(args, names)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "EXIT 0 LOADED -"
    if "--help" in args:
        for flag in ("--json", "--junit", "--sarif", "--markdown", "--html"):
            assert flag in r.stdout


@pytest.mark.parametrize(
    "model, policy, heavy, needle",
    [
        # a bad policy, a missing model or missing data: refused before torch too (0.4 s of CPU, not 1.5 s)
        ("model.pt", "gone.yaml", ("torch", "scipy.stats", "sklearn", "opacus", "privgate.gate"), "gone.yaml"),
        ("gone.pt", "internal", ("torch", "scipy.stats", "sklearn"), "gone.pt: model file not found"),
        ("model.pt", "internal", ("torch", "scipy.stats", "sklearn"), "m.npz: members file not found"),
    ],
)
def test_a_refused_check_does_not_import_the_statistics(tmp_path, model, policy, heavy, needle):
    """Bad input exits 2 before the heavy libraries a run that goes on needs are imported."""
    (tmp_path / "model.pt").write_bytes(b"a model file, never loaded: the run is refused before")
    args = ["check", model, "--policy", policy, "--members", "m.npz", "--nonmembers", "n.npz"]
    r = _cli_imports(args, heavy, cwd=tmp_path)
    assert r.stdout.strip().splitlines()[-1] == "EXIT 2 LOADED -", r.stdout + r.stderr
    assert needle in r.stderr and "not found" in r.stderr
