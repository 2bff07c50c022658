"""The GitHub composite action (action.yml), run locally.

No runner exists here, so this file carries a small one: it reads action.yml,
substitutes ``${{ inputs.* }}``, ``${{ steps.*.outputs.* }}`` and friends,
evaluates the simple ``if:`` conditions the action uses, and runs each ``run:``
step with ``bash -eo pipefail`` (as GitHub does) and ``GITHUB_OUTPUT``,
``GITHUB_STEP_SUMMARY``, ``GITHUB_ENV`` pointed at temporary files. Steps that
``uses:`` another action (setup-python) and the pip install are skipped:
privgate is installed in this environment already.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import inproc
import pytest
import yaml
from cli_on_path import privgate_bin, serve
from pipeline_cases import torch_files

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
EXAMPLE = ROOT / "examples" / "github-actions" / "privacy-gate.yml"
REGRESSION_EXAMPLE = ROOT / "examples" / "github-actions" / "privacy-regression.yml"
BIN = Path(sys.executable).parent  # python, which the action's steps run; `privgate` comes from privgate_bin()
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
SPEC_INPUTS = {"model", "policy", "config", "remediate", "fail-on", "python-version", "pip-args"}
SPEC_OUTPUTS = {"verdict", "report", "epsilon"}
CACHE_KEY = "a-repository-secret-0123456789abcdef"


def load_action() -> dict:
    return yaml.safe_load(ACTION.read_text())


# --------------------------------------------------------------------------- a tiny local runner


@dataclass
class StepRun:
    name: str
    ran: bool
    returncode: int = 0
    outputs: dict[str, str] = field(default_factory=dict)
    log: str = ""


@dataclass
class ActionRun:
    steps: list[StepRun]
    outputs: dict[str, str]
    summary: str
    env_file: str

    @property
    def failed(self) -> bool:
        return any(s.returncode != 0 for s in self.steps if s.ran)

    def step(self, name: str) -> StepRun:
        return next(s for s in self.steps if s.name == name)


def parse_output_file(text: str) -> dict[str, str]:
    """GITHUB_OUTPUT syntax: ``key=value`` lines and ``key<<DELIM`` ... ``DELIM`` blocks."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[key] = "\n".join(lines[i + 1 : j])
            i = j + 1
            continue
        if "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
        i += 1
    return out


def _lookup(expr: str, ctx: dict) -> str:
    parts = expr.split(".")
    if parts[0] == "inputs":
        return ctx["inputs"][".".join(parts[1:])]
    if parts[0] == "steps" and parts[2] == "outputs":
        return ctx["steps"].get(parts[1], {}).get(".".join(parts[3:]), "")
    if expr == "github.action_path":
        return str(ROOT)
    if expr == "github.event_name":
        return ctx["event"]
    if expr in ("github.workspace", "runner.temp"):
        return str(ctx["workspace"])
    raise AssertionError(f"the local runner does not know the expression {expr!r}")


def substitute(text: str, ctx: dict) -> str:
    return EXPR.sub(lambda m: _lookup(m.group(1), ctx), str(text))


def condition(expr: str | None, ctx: dict, failed: bool) -> bool:
    if expr is None:
        return not failed  # success()
    expr = EXPR.sub(lambda m: m.group(1), str(expr)).strip()
    if expr == "always()":
        return True
    m = re.fullmatch(r"(\S+)\s*(==|!=)\s*'([^']*)'", expr)
    assert m, f"the local runner cannot evaluate if: {expr}"
    value = _lookup(m.group(1), ctx)
    return (not failed) and ((value == m.group(3)) if m.group(2) == "==" else (value != m.group(3)))


def run_action(
    inputs: dict[str, str],
    workspace: Path,
    *,
    only: list[str] | None = None,
    preset: dict | None = None,
    path_prefix: Path | None = None,
    event: str = "push",
) -> ActionRun:
    """Run action.yml's run-steps locally with ``inputs`` (defaults from the file) in ``workspace``, as the workflow
    ``event`` (``github.event_name``) would."""
    action = load_action()
    declared = action["inputs"]
    unknown = set(inputs) - set(declared)
    assert not unknown, f"inputs not declared in action.yml: {unknown}"
    values = {k: str(v.get("default", "")) for k, v in declared.items()}
    values.update({k: str(v) for k, v in inputs.items()})
    ctx = {"inputs": values, "steps": dict(preset or {}), "workspace": workspace, "event": event}
    gh = workspace / ".github-runner"
    gh.mkdir(exist_ok=True)
    summary, env_file = gh / "step_summary.md", gh / "env"
    summary.touch()
    env_file.touch()
    runs: list[StepRun] = []
    failed = False
    for i, step in enumerate(action["runs"]["steps"]):
        name = step.get("name", f"step {i}")
        if only is not None and name not in only:
            continue
        if "uses" in step or step.get("id") == "install" or not condition(step.get("if"), ctx, failed):
            runs.append(StepRun(name, ran=False))
            continue
        out_file = gh / f"output-{i}"
        out_file.write_text("")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
        path = [str(p) for p in (path_prefix, privgate_bin(), BIN) if p] + [env.get("PATH", "")]
        env.update(
            {
                "GITHUB_OUTPUT": str(out_file),
                "GITHUB_STEP_SUMMARY": str(summary),
                "GITHUB_ENV": str(env_file),
                "GITHUB_ACTION_PATH": str(ROOT),
                "GITHUB_WORKSPACE": str(workspace),
                "CI": "true",
                "PATH": os.pathsep.join(path),
            }
        )
        env.update({k: substitute(v, ctx) for k, v in (step.get("env") or {}).items()})
        if path_prefix is None and re.search(r"^\s*privgate ", step["run"], re.M):
            serve(env)  # the step's `privgate` runs fork from a server started with this environment (cli_on_path)
        script = gh / f"step-{i}.sh"
        script.write_text(step["run"])
        assert step.get("shell") == "bash"
        p = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        outputs = parse_output_file(out_file.read_text())
        if step.get("id"):
            ctx["steps"][step["id"]] = outputs
        runs.append(StepRun(name, True, p.returncode, outputs, p.stdout + p.stderr))
        failed = failed or p.returncode != 0
    outputs = {k: substitute(v["value"], ctx) for k, v in action["outputs"].items()}
    return ActionRun(runs, outputs, summary.read_text(), env_file.read_text())


# --------------------------------------------------------------------------- static checks


def test_action_is_a_valid_composite_action():
    action = load_action()
    assert action["runs"]["using"] == "composite"
    assert set(action["inputs"]) >= SPEC_INPUTS and set(action["outputs"]) >= SPEC_OUTPUTS
    text = ACTION.read_text()
    used = set(re.findall(r"inputs\.([A-Za-z0-9_-]+)", text))
    assert used and used <= set(action["inputs"]), f"inputs used but not declared: {used - set(action['inputs'])}"
    assert set(action["inputs"]) - used == set(), f"declared inputs never used: {set(action['inputs']) - used}"
    ids = {s.get("id") for s in action["runs"]["steps"]}
    for name, out in action["outputs"].items():
        m = re.fullmatch(r"\$\{\{ steps\.([A-Za-z0-9_-]+)\.outputs\.([A-Za-z0-9_-]+) \}\}", out["value"])
        assert m and m.group(1) in ids, f"output {name} does not come from a step: {out['value']}"
        assert out.get("description")
    for step in action["runs"]["steps"]:
        if "run" in step:
            assert step.get("shell") == "bash", f"composite run steps need a shell: {step.get('name')}"
            assert "${{" not in step["run"], (
                f"expressions in run: are injectable; pass them through env: ({step.get('name')})"
            )
    for name, spec in action["inputs"].items():
        assert spec.get("description") and "default" in spec, name


def test_the_kept_cache_is_the_gates_and_never_holds_the_key():
    """With a cache-key, actions/cache restores and saves the folder the gate's privgate uses, under one key; the
    secret reaches privgate only through the environment (never a flag, never a file in the cached folder)."""
    steps = {s["name"]: s for s in load_action()["runs"]["steps"]}
    restore, save = steps["Restore the reference-model cache"], steps["Save the reference-model cache"]
    gate = steps["Run the privacy gate"]
    assert restore["uses"].startswith("actions/cache/restore@") and save["uses"].startswith("actions/cache/save@")
    assert restore["if"] == save["if"] == "inputs.cache-key != ''"
    assert restore["with"]["path"] == save["with"]["path"] == gate["env"]["PRIVGATE_KEPT_CACHE"]
    assert restore["with"]["key"] == save["with"]["key"] and save["with"]["key"].startswith("privgate-cache-")
    assert gate["env"]["PRIVGATE_CACHE_KEY"] == "${{ inputs.cache-key }}"
    assert 'export PRIVGATE_CACHE_DIR="$PRIVGATE_KEPT_CACHE"' in gate["run"] and "--cache-key" not in gate["run"]
    assert "secret" in load_action()["inputs"]["cache-key"]["description"]


def test_example_workflow_gates_the_deploy_and_uploads_sarif():
    wf = yaml.safe_load(EXAMPLE.read_text())
    jobs = wf["jobs"]
    gate_job = jobs["privacy-gate"]
    assert jobs["deploy"]["needs"] == "privacy-gate" and gate_job["needs"] == "train"
    steps = {s.get("id") or s.get("name"): s for s in gate_job["steps"]}
    assert steps["gate"]["uses"].split("@")[0] in ("privgate/privgate", "./")
    assert set(steps["gate"]["with"]) <= set(load_action()["inputs"])
    uses = [s.get("uses", "") for s in gate_job["steps"]]
    assert any(u.startswith("github/codeql-action/upload-sarif@") for u in uses)
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    assert gate_job["permissions"]["security-events"] == "write"
    referenced = set(re.findall(r"steps\.gate\.outputs\.([A-Za-z0-9_-]+)", EXAMPLE.read_text()))
    assert referenced and referenced <= set(load_action()["outputs"])


# --------------------------------------------------------------------------- running the steps


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return torch_files(tmp_path_factory.mktemp("model"))


def test_action_on_a_leaky_model_fails_the_job_and_publishes_reports(files, tmp_path):
    run = run_action(
        {
            "model": str(files.model),
            "policy": "internal",
            "members": str(files.members),
            "nonmembers": str(files.nonmembers),
            "reports-dir": "reports",
        },
        tmp_path,
    )
    # setup-python and pip skipped here; no baseline: no comparison
    # and no cache-key: no cache restored or saved
    assert [s.ran for s in run.steps] == [False, False, False, True, False, False, True, False]
    gate = run.step("Run the privacy gate")
    assert gate.returncode == 0, gate.log
    # every declared output was set by the step it names
    from_gate = {k for k, v in load_action()["outputs"].items() if "steps.gate." in v["value"]}
    assert set(gate.outputs) >= from_gate and len(from_gate) == 10
    out = run.outputs
    assert out["verdict"] == "fail" and out["exit-code"] == "1" and out["epsilon"] == "" and out["model"] == ""
    assert out["regression"] == "" and out["diff-exit-code"] == ""  # no baseline: no comparison
    assert out["report"] == "reports/privgate-report.json" and out["reports-dir"] == "reports"
    report = json.loads((tmp_path / out["report"]).read_text())
    assert report["verdict"] == "fail" and report["checks"][0]["value"] > 0.8
    for key in ("junit", "sarif", "markdown", "html"):
        assert (tmp_path / out[key]).stat().st_size > 0, key
    assert json.loads((tmp_path / out["sarif"]).read_text())["runs"][0]["results"][0]["ruleId"] == "privgate/accuracy"
    assert '<testcase classname="privgate.internal" name="mia-accuracy"' in (tmp_path / out["junit"]).read_text()
    # the job summary got the Markdown report (privgate appends it when GITHUB_STEP_SUMMARY is set)
    assert run.summary.startswith("## privgate ❌ FAIL · policy `internal`")
    assert run.summary == (tmp_path / out["markdown"]).read_text()
    assert run.env_file == ""
    enforce = run.step("Enforce the verdict")
    assert (
        enforce.returncode == 1 and "::error title=privacy gate::the model violates the privacy policy" in enforce.log
    )
    assert run.failed


def test_action_with_a_config_file_and_fail_on_inconclusive(files, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "name: low-fpr\nsensitivity: internal\nrelease: api\nattacks: {loss: {}}\n"
        "checks:\n  - {id: tpr, attack: loss, metric: tpr_at_fpr, fpr: 0.001, max: 0.01}\n"
    )
    (tmp_path / "privgate.toml").write_text(
        f'model = "{files.model}"\npolicy = "policy.yaml"\n'
        f'members = "{files.members}"\nnonmembers = "{files.nonmembers}"\n'
    )
    run = run_action({"config": "privgate.toml", "fail-on": "inconclusive"}, tmp_path)
    assert run.outputs["verdict"] == "inconclusive" and run.outputs["exit-code"] == "3"
    assert run.step("Run the privacy gate").outputs["inconclusive"] == "1"
    assert "⚠️ INCONCLUSIVE" in run.summary
    enforce = run.step("Enforce the verdict")
    assert enforce.returncode == 1 and "fail-on is 'inconclusive'" in enforce.log
    # the same verdict with fail-on: fail is a warning, not a failed job
    again = run_action(
        {"fail-on": "fail"},
        tmp_path,
        only=["Enforce the verdict"],
        preset={"gate": run.step("Run the privacy gate").outputs},
    )
    assert (
        again.step("Enforce the verdict").returncode == 0
        and "::warning title=privacy gate::inconclusive" in again.step("Enforce the verdict").log
    )


@pytest.mark.parametrize(
    "exit_code, fail_on, expected",
    [
        ("0", "fail", 0),
        ("1", "fail", 1),
        ("1", "inconclusive", 1),
        ("3", "fail", 0),
        ("3", "inconclusive", 1),
        ("2", "fail", 2),
        ("4", "inconclusive", 4),
        ("", "fail", 4),
        ("0", "never", 2),
    ],
)
def test_enforce_step_follows_exit_code_and_fail_on(tmp_path, exit_code, fail_on, expected):
    run = run_action(
        {"fail-on": fail_on},
        tmp_path,
        only=["Enforce the verdict"],
        preset={"gate": {"exit-code": exit_code, "verdict": "x"}},
    )
    assert run.step("Enforce the verdict").returncode == expected


FAKE_PRIVGATE = """#!/usr/bin/env bash
# records how the action calls `privgate check`, answers with a canned report; other commands are real
if [ "$1" = check ]; then
  printf '%s\\n' "$@" > "$FAKE_ARGS"
  [ -n "$FAKE_EXIT_NO_REPORT" ] && { echo "error: bad input" >&2; exit "$FAKE_EXIT_NO_REPORT"; }
  prev=""
  for a in "$@"; do
    [ "$prev" = --json ] && cp "$FAKE_REPORT" "$a"
    [ "$prev" = --output-model ] && echo model > "$a"
    prev="$a"
  done
  exit 0
fi
exec "{real}" "$@"
"""


@pytest.fixture
def fake_privgate(tmp_path, monkeypatch):
    from pipeline_cases import constant_model

    import privgate
    from privgate.report.remediation_section import RemediationSection, SearchRow

    model, members, nonmembers = constant_model(n=120)
    report = privgate.check(model, "internal", members, nonmembers)
    assert report.verdict == "pass"  # the canned report the fake privgate answers with
    report = report.model_copy(
        update={
            "remediation": RemediationSection(
                chosen_epsilon=4.0,
                rows=[SearchRow(epsilon=8.0, utility=0.9), SearchRow(epsilon=4.0, utility=0.85)],
            )
        }
    )
    canned = tmp_path / "canned.json"
    canned.write_text(report.to_json())
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    exe = bindir / "privgate"
    exe.write_text(FAKE_PRIVGATE.replace("{real}", str(privgate_bin() / "privgate")))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "args.txt"))
    monkeypatch.setenv("FAKE_REPORT", str(canned))
    return bindir


def test_action_remediate_passes_flags_and_outputs_the_chosen_epsilon(fake_privgate, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    run = run_action(
        {
            "model": "m.pt",
            "policy": "strict",
            "recipe": "recipe:RECIPE",
            "remediate": "true",
            "seed": "7",
            "threads": "3",
            "args": "--trust-checkpoint --label-column target",
        },
        ws,
        path_prefix=fake_privgate,
    )
    args = (tmp_path / "args.txt").read_text().splitlines()
    assert args[:4] == ["check", "m.pt", "--policy", "strict"]
    joined = " ".join(args)
    assert "--recipe recipe:RECIPE" in joined and "--seed 7" in joined and "--threads 3" in joined
    assert "--remediate --output-model privgate-reports/model-dp.pt" in joined
    assert "--trust-checkpoint --label-column target" in joined
    assert (
        "--json privgate-reports/privgate-report.json" in joined and "--sarif privgate-reports/privgate.sarif" in joined
    )
    assert "--members" not in args and "--config" not in args  # empty inputs add no flags
    assert run.outputs["epsilon"] == "4" and run.outputs["model"] == "privgate-reports/model-dp.pt"
    assert run.outputs["verdict"] == "pass" and run.step("Enforce the verdict").returncode == 0


def test_action_without_a_report_says_error(fake_privgate, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_EXIT_NO_REPORT", "2")
    run = run_action({"model": "missing.pt", "policy": "internal"}, tmp_path, path_prefix=fake_privgate)
    assert run.outputs["verdict"] == "error" and run.outputs["exit-code"] == "2" and run.outputs["report"] == ""
    cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()  # honours OMP_NUM_THREADS
    assert f"--threads {cpus}" in " ".join((tmp_path / "args.txt").read_text().splitlines())  # default: auto
    assert "privgate: error (exit 2)" in run.summary
    assert run.step("Enforce the verdict").returncode == 2


@pytest.mark.parametrize(
    ("event", "value", "on"),
    [
        ("pull_request_target", "auto", True),  # secrets at hand, the checkout may be the pull request's files
        ("workflow_run", "auto", True),
        ("pull_request", "auto", False),
        ("push", "auto", False),
        ("push", "true", True),
        ("pull_request_target", "false", False),
    ],
)
def test_no_config_code_is_on_where_a_pull_requests_files_meet_secrets(tmp_path, monkeypatch, event, value, on):
    """The gate passes --no-config-code (privgate refuses the config's code keys, tests/test_config_code.py) by
    default on the events that run with secrets on files a pull request may have written."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "privgate").write_text('#!/usr/bin/env bash\nprintf \'%s\\n\' "$@" > "$FAKE_ARGS"\nexit 2\n')
    (bindir / "privgate").chmod(0o755)
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "args.txt"))
    inputs = {"config": "privgate.toml", "no-config-code": value}
    run = run_action(inputs, tmp_path, only=["Run the privacy gate"], path_prefix=bindir, event=event)
    args = (tmp_path / "args.txt").read_text().splitlines()
    assert args[:3] == ["check", "--config", "privgate.toml"] and ("--no-config-code" in args) == on
    assert run.outputs["exit-code"] == "2" and run.outputs["verdict"] == "error"


def test_a_misspelt_no_config_code_stops_the_gate(tmp_path):
    run = run_action({"no-config-code": "yes"}, tmp_path, only=["Run the privacy gate"])
    gate = run.step("Run the privacy gate")
    assert gate.returncode == 2 and "input no-config-code must be auto, true or false, got 'yes'" in gate.log


# --------------------------------------------------------------------------- baseline: privgate diff after the check

LENIENT = """name: lenient
sensitivity: internal
release: api
confidence: 0.95
checks:
  - {id: mia-accuracy, attack: best, metric: accuracy, max: 0.99}
"""


@pytest.fixture(scope="module")
def pair(case, tmp_path_factory):
    """The session's generalising and memorising MLPs on the same audit data, and a policy both pass."""
    from dataclasses import replace

    folder = tmp_path_factory.mktemp("pair")
    (folder / "lenient.yaml").write_text(LENIENT)
    return replace(case, dir=folder)  # the models and data stay where the session built them


def _inputs(case, model: Path, reports: str, **extra: str) -> dict[str, str]:
    return {
        "model": str(model),
        "policy": str(case.dir / "lenient.yaml"),
        "members": str(case.members),
        "nonmembers": str(case.nonmembers),
        "reports-dir": reports,
        **extra,
    }


def test_action_with_a_baseline_fails_the_job_on_a_regression(pair, tmp_path):
    """The default branch's kept report is the baseline: made in process (the CLI's report, test_front_door.py;
    a run without a baseline compares nothing: test_action_on_a_leaky_model_fails_the_job_and_publishes_reports);
    a pull request's run on a leakier model fails the job, one on the same model passes it."""
    main = inproc.check(pair.safe_ts, str(pair.dir / "lenient.yaml"), pair.members, pair.nonmembers)
    assert main.verdict == "pass"
    baseline = tmp_path / "baseline" / "privgate-report.json"
    baseline.parent.mkdir()
    baseline.write_text(inproc.render(main, "json")["json"], encoding="utf-8")

    pr = run_action(_inputs(pair, pair.leaky_ts, "pr-reports", baseline="baseline/privgate-report.json"), tmp_path)
    assert [s.ran for s in pr.steps] == [False, False, False, True, False, True, True, True]
    assert pr.outputs["verdict"] == "pass"  # within the lenient policy, but leaking far more than main
    assert pr.outputs["regression"] == "true" and pr.outputs["diff-exit-code"] == "1"
    assert pr.outputs["diff-report"] == "pr-reports/privgate-diff.json"
    diff = json.loads((tmp_path / pr.outputs["diff-report"]).read_text())
    acc = next(r for r in diff["rows"] if r["id"] == "mia-accuracy")
    assert diff["result"] == "regression" and acc["status"] == "regressed" and acc["change_ci"][0] > 0.02
    assert (tmp_path / pr.outputs["diff-markdown"]).read_text().startswith("## privgate diff ❌ REGRESSION")
    assert "## privgate diff ❌ REGRESSION · policy `lenient`" in pr.summary  # the job summary has both reports
    assert pr.step("Enforce the verdict").returncode == 0
    enforce = pr.step("Enforce the comparison")
    assert enforce.returncode == 1 and "::error title=privacy regression::" in enforce.log and pr.failed

    # the same model as main: no regression, the job passes
    same = run_action(_inputs(pair, pair.safe_ts, "same-reports", baseline="baseline/privgate-report.json"), tmp_path)
    assert same.outputs["regression"] == "false" and same.outputs["diff-exit-code"] == "0" and not same.failed
    assert "## privgate diff ✅ NO REGRESSION" in same.summary


def test_compare_step_without_a_usable_baseline_warns(pair, tmp_path):
    """A missing baseline, or one of another policy (exit 2), is a warning: the policy alone gates the run.

    Only the comparison steps run; the two reports they compare are built in process (tests/inproc.py)."""
    reports = tmp_path / "r"
    reports.mkdir()
    for name, policy in (("other", "internal"), ("lenient", str(pair.dir / "lenient.yaml"))):
        report = inproc.check(pair.safe_ts, policy, pair.members, pair.nonmembers)
        (tmp_path / name).mkdir()
        (tmp_path / name / "privgate-report.json").write_text(inproc.render(report, "json")["json"], encoding="utf-8")
    gate = {"report": "other/privgate-report.json", "reports-dir": "r"}
    steps = ["Compare with the baseline", "Enforce the comparison"]
    missing = run_action({"baseline": "nowhere.json"}, tmp_path, only=steps, preset={"gate": gate})
    assert missing.outputs["regression"] == "" and missing.outputs["diff-exit-code"] == ""
    assert "::warning title=privgate diff::no baseline report at nowhere.json" in missing.step(steps[0]).log
    assert not missing.failed
    incomparable = run_action({"baseline": "lenient/privgate-report.json"}, tmp_path, only=steps, preset={"gate": gate})
    assert incomparable.outputs["diff-exit-code"] == "2" and incomparable.outputs["regression"] == ""
    assert "different policies" in incomparable.step(steps[0]).log
    assert "::warning title=privgate diff::the baseline cannot be compared" in incomparable.step(steps[1]).log
    assert not incomparable.failed


@pytest.mark.parametrize("code, expected", [("", 0), ("0", 0), ("1", 1), ("2", 0), ("4", 4)])
def test_enforce_comparison_follows_the_diff_exit_code(tmp_path, code, expected):
    run = run_action(
        {"baseline": "b.json"}, tmp_path, only=["Enforce the comparison"], preset={"diff": {"diff-exit-code": code}}
    )
    assert run.step("Enforce the comparison").returncode == expected


def test_regression_example_workflow_keeps_main_and_compares_pull_requests():
    wf = yaml.safe_load(REGRESSION_EXAMPLE.read_text())
    steps = {s.get("id") or s.get("name"): s for s in wf["jobs"]["privacy-gate"]["steps"]}
    gate = steps["gate"]
    assert set(gate["with"]) <= set(load_action()["inputs"]) and "baseline" in gate["with"]
    keep = steps["Keep this report as the baseline of later pull requests"]
    download = steps["Download the baseline report"]
    assert keep["uses"].startswith("actions/upload-artifact@") and keep["with"]["name"] == download["with"]["name"]
    assert "baseline/privgate-report.json" in gate["with"]["baseline"] and download["with"]["path"] == "baseline"
    referenced = set(re.findall(r"steps\.gate\.outputs\.([A-Za-z0-9_-]+)", REGRESSION_EXAMPLE.read_text()))
    assert referenced and referenced <= set(load_action()["outputs"])


# --------------------------------------------------------------------------- a language model

LM_POLICY = """name: lm-release
sensitivity: internal
release: api
confidence: 0.95
attacks: {lm_loss: {}, reference_ratio: {form: difference}}
checks:
  - {id: mia-auc, attack: best, metric: auc, max: 0.8}
"""


def test_action_on_a_language_model_fails_and_diffs_against_the_released_one(clinical, tmp_path):
    """A Hugging Face directory and text files through the action; the baseline is the model in production."""
    from privgate import check
    from privgate.settings import TextOptions

    policy = tmp_path / "lm-release.yaml"
    policy.write_text(LM_POLICY)
    data = {"members": str(clinical / "members.jsonl"), "nonmembers": str(clinical / "nonmembers.jsonl")}
    released = check(
        str(clinical / "other"),
        str(policy),
        **data,
        text=TextOptions(reference_model=str(clinical / "base")),
        cache_dir=str(tmp_path / "privgate-cache"),  # the action's kept cache ($RUNNER_TEMP here): its run reads it
        cache_key=CACHE_KEY.encode(),
    )
    assert released.verdict == "pass"
    (tmp_path / "baseline.json").write_text(released.to_json())  # in process: the action's own run is the subject
    run = run_action(
        {
            "model": str(clinical / "memorised"),
            "policy": str(policy),
            **data,
            "threads": "1",
            "args": f"--reference-model {clinical / 'base'}",
            "reports-dir": "reports",
            "baseline": "baseline.json",
            "cache-key": CACHE_KEY,
        },
        tmp_path,
    )
    gate = run.step("Run the privacy gate")
    assert gate.returncode == 0, gate.log
    assert f"::add-mask::{CACHE_KEY}" in gate.log and gate.log.count(CACHE_KEY) == 1  # masked, never echoed
    assert run.outputs["verdict"] == "fail" and run.outputs["exit-code"] == "1"
    report = json.loads((tmp_path / run.outputs["report"]).read_text())
    assert report["target"]["kind"] == "causal_lm" and report["target"]["reference_model"] == str(clinical / "base")
    assert report["target"]["reference_scores_from_cache"] is True  # the kept cache, authenticated with the key
    ref = next(a for a in report["attacks"] if a["name"] == "reference_ratio")
    assert ref["status"] == "ran" and ref["auc_ci"][0] > 0.8
    assert report["checks"][0]["status"] == "fail" and report["checks"][0]["ci"][0] > 0.8
    # exposed records are shown as text in every report a reviewer reads
    assert '<testcase classname="privgate.lm-release" name="mia-auc"' in (tmp_path / run.outputs["junit"]).read_text()
    assert (
        json.loads((tmp_path / run.outputs["sarif"]).read_text())["runs"][0]["results"][0]["ruleId"] == "privgate/auc"
    )
    assert "Patient " in (tmp_path / run.outputs["markdown"]).read_text()
    # the comparison with the released model: a regression proven beyond both reports' noise
    assert run.outputs["regression"] == "true" and run.outputs["diff-exit-code"] == "1"
    diff = json.loads((tmp_path / run.outputs["diff-report"]).read_text())
    row = next(r for r in diff["rows"] if r["id"] == "reference_ratio")
    assert row["status"] == "regressed" and row["change_ci"][0] > 0.2
    assert run.step("Enforce the verdict").returncode == 1 and run.failed  # the verdict fails the job first
