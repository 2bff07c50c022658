"""A policy's capacity ladder is data: only regularisation settings of known meaning, numbers in range, a bounded walk.

``remediation.capacity`` once accepted any ``set_params`` key: a Pipeline's ``memory`` pointed joblib's cache (whose
pickles are loaded back) at a folder of the policy's choosing, a 20,000-step ladder was walked, and one step could
set ``n_estimators: 10**12``. Each is now exit 2 naming the step, before anything is fitted
(``privgate.policy.capacity_rules``, ``privgate.dp.capacity``; docs/threat-model.md).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cases import run_cli

POLICY = textwrap.dedent(
    """
    name: hostile-ladder
    sensitivity: confidential
    release: api
    confidence: 0.95
    attacks:
      loss: {}
    checks:
      - {id: mia-auc, attack: best, metric: auc, max: 0.55}
    remediation: {enabled: true, capacity: CAPACITY}
    """
)
DATA = ("--members", "m.parquet", "--nonmembers", "n.parquet", "--population", "p.parquet")


def _harden(tables: Path, tmp_path: Path, capacity: str):
    (tmp_path / "p.yaml").write_text(POLICY.replace("CAPACITY", capacity))
    return run_cli("harden", "rf.skops", "--policy", str(tmp_path / "p.yaml"), *DATA, "--output-model",
                   str(tmp_path / "x.skops"), "--json", str(tmp_path / "r.json"), cwd=tables)  # fmt: skip


def _refused(r, tmp_path: Path, *needles: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and all(n in r.stderr for n in needles), r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]  # no report, no model, no cache folder


def test_a_policy_cannot_point_the_pipelines_joblib_memory_at_a_folder(tables, tmp_path):
    planted = tmp_path / "planted"  # before: joblib wrote output.pkl here, and unpickled it on the next run
    r = _harden(tables, tmp_path, f"[{{model__min_samples_leaf: 4}}, {{memory: '{planted}'}}]")
    _refused(r, tmp_path, "remediation.capacity", "capacity[1] (step 2): 'memory' is not a setting")


def test_a_ladder_of_more_than_32_steps_is_refused_before_any_fit(tables, tmp_path):
    # 20,000 steps were once walked (700 in 60 s); 100 make the point without parsing 600 KB of YAML
    r = _harden(tables, tmp_path, "[" + ", ".join(["{model__min_samples_leaf: 2}"] * 100) + "]")
    _refused(r, tmp_path, "capacity has 100 steps; privgate walks at most 32")


def test_a_step_cannot_ask_for_a_trillion_trees(tables, tmp_path):
    r = _harden(tables, tmp_path, "[{model__n_estimators: 1000000000000}]")
    _refused(r, tmp_path, "'model__n_estimators' (trees or boosting rounds) must be a whole number from 1 to 10,000")


@pytest.mark.parametrize(
    ("step", "needle"),
    [
        ("{clf__estimator__memory: /tmp/x}", "'clf__estimator__memory' is not a setting"),
        ("{steps: []}", "'steps' is not a setting"),
        ("{model__verbose: 3}", "'model__verbose' is not a setting"),
        ("{model__n_jobs: 10000}", "'model__n_jobs' is not a setting"),
        ("{model__random_state: 1}", "'model__random_state' is not a setting"),
        ("{model__warm_start: true}", "'model__warm_start' is not a setting"),
        ("{model__class_weight: balanced}", "'model__class_weight' is not a setting"),
        ("{model__min_samples_leaf: true}", "must be a number (a whole number from 1 to 10,000,000 or a number above"),
        ("{model__min_samples_leaf: .nan}", "got nan"),
        ("{model__C: .inf}", "'model__C' (inverse penalty strength) must be a number above 0 up to 1e+12, got inf"),
        ("{model__C: -1}", "got -1"),
        ("{model__alpha: 0.001, model__l1_ratio: 1.5}", "'model__l1_ratio' (the penalty's L1 share)"),
        ("{model__n_neighbors: 1" + "0" * 400 + "}", "got a huge number"),
        ("{model__max_depth: 3.0}", "'model__max_depth' (depth of a tree) must be a whole number from 1 to 10,000"),
        ("{model__min_samples_leaf: /etc/passwd}", "got '/etc/passwd' (str)"),
        ("{model__min_samples_leaf: null}", "got None (NoneType)"),
        ("{model__min_samples_leaf: {a: 1}}", "got {'a': 1} (dict)"),
        ("{model__min_samples_leaf: 0.6}", "a number above 0 up to 0.5, got 0.6"),
    ],
)  # fmt: skip
def test_every_variant_of_a_hostile_step_is_one_sentence_naming_it(step, needle):
    from privgate.errors import PolicyError
    from privgate.policy.loading import parse_policy

    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY.replace("CAPACITY", f"[{{model__min_samples_leaf: 2}}, {step}]"), "p.yaml")
    msg = str(info.value)
    assert "p.yaml: line 10: field 'remediation.capacity': capacity[1] (step 2): " in msg and needle in msg, msg


def test_the_settings_a_ladder_needs_still_pass():
    from privgate.policy.loading import parse_policy

    ladder = (
        "[{model__min_samples_leaf: 8}, {model__min_samples_leaf: 0.05, model__max_depth: 6}, {model__C: 0.1},"
        " {model__alpha: 0.01, model__l1_ratio: 0.5}, {model__n_estimators: 10, model__max_features: 0.5}]"
    )
    pol = parse_policy(POLICY.replace("CAPACITY", ladder), "p.yaml")
    assert pol.remediation.capacity[1] == {"model__min_samples_leaf": 0.05, "model__max_depth": 6}
    assert [len(s) for s in pol.remediation.capacity] == [1, 2, 1, 2, 2]


def test_a_costly_setting_may_be_lowered_from_the_models_own_never_raised():
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import Pipeline

    from privgate.dp.capacity import ladder
    from privgate.errors import PolicyError

    model = Pipeline([("model", RandomForestClassifier(n_estimators=25))])
    assert ladder(model, 600, [{"model__n_estimators": 10}], "p").steps == [{"model__n_estimators": 10}]
    with pytest.raises(PolicyError, match=r"capacity\[0\] \(step 1\): model__n_estimators=5,000 is above the model's "
                       r"own 25; .* would cost 200 times the model's own"):  # fmt: skip
        ladder(model, 600, [{"model__n_estimators": 5000}], "p")


def test_the_walks_estimated_time_is_refused_above_the_limit_with_the_estimate():
    from privgate.dp.capacity import MAX_LADDER_SECONDS, cost_problem, walked

    assert MAX_LADDER_SECONDS == 6 * 3600
    assert walked(32, "ladder") == 32 and walked(32, "bisect") == 7 and walked(2, "bisect") == 2
    # 20 steps after an audit of 25 minutes: 20 × 1500 s = 8.3 hours, over the six
    msg = cost_problem(20, "ladder", 1500.0)
    assert msg is not None and "20 step(s) are up to 20 fit(s) and audit(s)" in msg, msg
    assert "which took 25 minutes: about 8 hours" in msg and "up to 6 hours" in msg, msg
    assert "strategy: bisect (6 candidates)" in msg  # ⌈log2 21⌉ + 1
    assert cost_problem(20, "bisect", 1500.0) is None  # 6 × 1500 s = 2.5 hours
    assert cost_problem(32, "ladder", 600.0) is None  # 5.3 hours


def test_the_harden_run_refuses_a_walk_estimated_past_its_limit_after_the_original_audit(tables):
    from privgate import HardenSettings, RunOptions
    from privgate.dp.capacity_task import CapacityTask
    from privgate.dp.remediate import search
    from privgate.errors import PolicyError
    from privgate.policy.loading import parse_policy

    steps = "[{model__min_samples_leaf: 4}, {model__min_samples_leaf: 64}]"
    # decided on the point estimate: a search that could not decide its check at this audit size would stop first
    point = POLICY.replace("confidence: 0.95", "confidence: 0.95\ndecision: point")
    pol = parse_policy(point.replace("CAPACITY", steps))
    given = HardenSettings(model=str(tables / "rf.skops"), policy=pol, members=str(tables / "m.parquet"),
                           nonmembers=str(tables / "n.parquet"), output_model=str(tables / "never.skops"))  # fmt: skip
    task = CapacityTask.open(given, RunOptions(seed=0))
    task.max_seconds = 1e-6  # any audit takes longer than a microsecond
    with pytest.raises(PolicyError, match=r"the ladder's 2 step\(s\) are up to 2 fit\(s\).*name fewer steps"):
        search(task, options=RunOptions(seed=0))
    assert task.original_seconds > 0  # the search told the task how long the original's audit took
