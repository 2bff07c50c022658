"""The served surface: what an API returns is all that attacks, reference models and sanity checks see.

Truths tested: the transform's arithmetic (top_k spreads the unreturned mass,
rounding to 0 reads as half the rounding unit, a label is a one-hot row); the
reference models answer through the same transform as the target; a black-box
attack is "not applicable" against an API that serves labels only, and a
policy that then cannot be decided is inconclusive (exit 3), never a pass; the
boundary-distance label-only attack (Choquette-Choo et al. 2021, arXiv
2007.14321; Li & Zhang 2021, arXiv 2007.15528) finds a memorising model and
gives an AUC interval containing 0.5 on a model that never saw its members.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from cases import run_cli, synthetic, train

import privgate
from privgate import PrivgateError, Recipe, Target, load_policy
from privgate.attacks import AttackContext
from privgate.attacks.reference import _identity, build_references
from privgate.inputs.surface import LABELS_ONLY, NO_WEIGHTS, Surface
from privgate.policy import parse_policy
from privgate.policy.loading import policy_json_schema

P = np.array([[0.70, 0.20, 0.0996, 0.0004], [0.05, 0.25, 0.60, 0.10]])


def _lp(p: np.ndarray) -> np.ndarray:
    return np.log(p)


# --------------------------------------------------------------------------- the transform


def test_top_k_spreads_the_unreturned_mass_uniformly_over_the_unseen_classes():
    out = np.exp(Surface("probabilities", top_k=2).log_proba(_lp(P)))
    # row 0 returns 0.70 and 0.20; the other 0.10 is shared by the two unseen classes
    assert out[0] == pytest.approx([0.70, 0.20, 0.05, 0.05])
    assert out[1] == pytest.approx([0.075, 0.25, 0.60, 0.075])
    assert out.sum(axis=1) == pytest.approx([1.0, 1.0])


def test_an_unseen_class_never_gets_more_than_the_smallest_returned_one():
    p = np.array([[0.30, 0.30, 0.20, 0.20]])  # top-1 returns 0.30; 0.70 over 3 classes would be 0.233 each
    out = np.exp(Surface("probabilities", top_k=1, decimals=1).log_proba(_lp(p)))
    q = np.array([0.3, 0.2333333, 0.2333333, 0.2333333])
    assert out[0] == pytest.approx(q / q.sum(), rel=1e-6)
    p = np.array([[0.90, 0.04, 0.03, 0.03]])
    out = np.exp(Surface("probabilities", top_k=1).log_proba(_lp(p)))
    assert out[0] == pytest.approx([0.9, 1 / 30, 1 / 30, 1 / 30])


def test_rounding_to_zero_reads_as_half_the_rounding_unit_never_minus_infinity():
    out = Surface("probabilities", decimals=2).log_proba(_lp(P))
    assert np.isfinite(out).all()
    # row 0: 0.70, 0.20, 0.10, 0.00 -> 0.005 (half of 0.01), then renormalised
    q = np.array([0.70, 0.20, 0.10, 0.005])
    assert np.exp(out[0]) == pytest.approx(q / q.sum())
    # a loss of a class that rounds to 0 is -log(0.005 / 1.005), about 5.3 nats, not infinite
    assert -out[0, 3] == pytest.approx(-np.log(0.005 / 1.005))


def test_logits_are_served_normalised_so_top_k_reads_as_for_probabilities():
    lp = _lp(P[1:])
    assert Surface("logits", top_k=2).log_proba(lp) == pytest.approx(Surface("probabilities", top_k=2).log_proba(lp))
    rounded = np.exp(Surface("logits", decimals=1).log_proba(lp))[0]
    q = np.exp(np.round(lp[0], 1))
    assert rounded == pytest.approx(q / q.sum())


def test_a_label_is_a_one_hot_row_and_full_probabilities_are_untouched():
    out = Surface("label").log_proba(_lp(P))
    assert out.argmax(axis=1).tolist() == [0, 2]
    assert np.exp(out).sum(axis=1) == pytest.approx([1.0, 1.0])
    assert np.exp(out)[[0, 1], [0, 2]] == pytest.approx([1.0, 1.0])
    assert Surface().log_proba(_lp(P)) is not None and np.array_equal(Surface().log_proba(_lp(P)), _lp(P))


def test_the_target_answers_through_its_surface_and_counts_queries(case):
    target = Target.load(case.leaky_ts)
    x = np.load(case.members)["x"][:50]
    served = target.serving(Surface("probabilities", top_k=1, decimals=2))
    full = target.log_proba(x)
    assert served.log_proba(x) == pytest.approx(served.surface.log_proba(full))
    streamed = np.concatenate([lp for _, lp in served.log_proba_chunks(x)])
    assert streamed == pytest.approx(served.surface.log_proba(full))
    assert np.array_equal(served.predict(x), full.argmax(axis=1))
    assert served.queries.rows == 150 and target.surface is None
    facts = served.describe()["served"]
    assert facts["description"] == "top-1 probabilities rounded to 2 decimals" and facts["queries"] == 150
    assert "a value rounded to 0 reads as 0.005" in facts["reading"] and "outside the top 1" in facts["reading"]


# --------------------------------------------------------------------------- the policy


@pytest.mark.parametrize(
    ("serves", "needle"),
    [
        ("{top_k: 0}", "field 'serves.top_k': must be at least 1"),
        ("{decimals: 13}", "field 'serves.decimals': must be between 0 and 12"),
        ("{output: label, top_k: 2}", "an API that serves the label returns no scores"),
        ("{output: scores}", "serves.output"),
    ],
)
def test_a_bad_serves_block_is_one_sentence_at_its_field(tmp_path, serves, needle):
    p = tmp_path / "p.yaml"
    p.write_text(f"name: x\nsensitivity: public\nrelease: api\nserves: {serves}\n")
    with pytest.raises(PrivgateError) as err:
        load_policy(p)
    message = " ".join(str(err.value).split())
    assert needle in message and f"{p}: line 4" in message, message


def test_serves_with_a_released_model_is_refused_and_the_schema_documents_it(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("name: x\nsensitivity: public\nrelease: model\nserves: {output: label}\n")
    with pytest.raises(PrivgateError, match="whoever holds the weights computes any output"):
        load_policy(p)
    schema = json.loads(policy_json_schema())
    serves = schema["$defs"]["Serves"]["properties"]
    assert serves["output"]["enum"] == ["logits", "probabilities", "label"]
    assert serves["top_k"]["minimum"] == 1 and (serves["decimals"]["minimum"], serves["decimals"]["maximum"]) == (0, 12)


# --------------------------------------------------------------------------- reference models


def test_reference_models_answer_through_the_same_surface(case):
    data = np.load(case.members), np.load(case.nonmembers)
    x = np.concatenate([d["x"] for d in data])[:200]
    y = np.concatenate([d["y"] for d in data])[:200]
    recipe = Recipe(model_factory=lambda: torch.nn.Sequential(torch.nn.Linear(20, 8), torch.nn.Linear(8, 4)), epochs=5)
    target = Target.load(case.leaky_ts).serving(Surface("probabilities", top_k=1, decimals=2))
    target.detect_outputs(x[:50])
    ctx = AttackContext(target=Target(recipe.build()).serving(target.surface), x=x, y=y, recipe=recipe)
    refs = build_references(ctx, 2, attack="test")
    assert refs.surface == target.surface
    served = refs.per_row(_identity)
    model = dataclasses.replace(refs, surface=None).per_row(_identity)
    assert served == pytest.approx(target.surface.log_proba(model))
    # top-1 rounded: every row holds one returned value and one fill value for the 3 unseen classes
    assert {len(np.unique(np.round(row, 9))) for row in served.reshape(-1, 4)} <= {1, 2}


# --------------------------------------------------------------------------- what runs, what decides


def _label_policy(checks: str, attacks: str = "") -> str:
    return (
        "name: served-labels\nsensitivity: confidential\nrelease: api\nconfidence: 0.95\n"
        f"serves: {{output: label}}\n{attacks}checks:\n{checks}"
    )


def test_black_box_and_white_box_attacks_are_not_applicable_when_the_api_serves_labels(case):
    policy = parse_policy(
        _label_policy(
            "  - {id: by-loss, attack: loss, metric: auc, max: 0.9}\n"
            "  - {id: best, attack: best, metric: auc, max: 0.6}\n",
            "attacks: {loss: {}, gradient: {}, boundary: {queries: 16}}\n",
        )
    )
    rep = privgate.check(str(case.leaky_ts), policy, str(case.members), str(case.nonmembers), seed=0, cache_dir="off")
    by = {a.name: a for a in rep.attacks}
    assert by["loss"].status == "skipped" and by["loss"].reason == LABELS_ONLY
    assert by["gradient"].status == "skipped" and by["gradient"].reason == NO_WEIGHTS  # the weights are not served
    assert by["boundary"].status == "ran"
    checks = {c.id: c for c in rep.checks}
    assert checks["by-loss"].status == "inconclusive" and LABELS_ONLY in checks["by-loss"].reason
    assert checks["best"].chosen_attack == "boundary"
    assert checks["best"].status == "fail"  # the label alone proves the memorising model leaks
    served = rep.target["served"]
    assert served["output"] == "label" and served["queries"] >= 600 * 17


# --------------------------------------------------------------------------- the boundary attack


def _boundary_auc(model: torch.nn.Module, members, nonmembers, seed: int = 0):  # noqa: ANN001
    policy = parse_policy(
        "name: b\nsensitivity: public\nrelease: api\nserves: {output: label}\nconfidence: 0.95\n"
        "attacks: {boundary: {queries: 32}}\n"
    )
    rep = privgate.check(model, policy, members, nonmembers, seed=seed, cache_dir="off")
    (a,) = [a for a in rep.attacks if a.name == "boundary"]
    return a


def test_the_boundary_attack_finds_a_memorising_model_and_not_one_that_never_saw_its_members(case):
    members = tuple(np.load(case.members)[k] for k in ("x", "y"))
    nonmembers = tuple(np.load(case.nonmembers)[k] for k in ("x", "y"))
    leaky = _boundary_auc(Target.load(case.leaky_ts).model, members, nonmembers)
    assert leaky.auc_ci[0] > 0.6, leaky.auc_ci
    xo, yo = synthetic(300, seed=7, label_noise=0.8)  # trained on other rows of the same world
    blind = _boundary_auc(train(xo, yo, epochs=400), members, nonmembers)
    assert blind.auc_ci[0] <= 0.5 <= blind.auc_ci[1], blind.auc_ci


# --------------------------------------------------------------------------- the CLI


def test_the_cli_audits_what_the_policy_says_is_served_and_an_undecidable_policy_is_inconclusive(case, tmp_path):
    policy = tmp_path / "served.yaml"
    policy.write_text(_label_policy("  - {id: by-entropy, attack: entropy, metric: accuracy, max: 0.8}\n"))
    valid = run_cli("policy", "validate", str(policy))
    assert valid.returncode == 0 and "The API serves labels only." in valid.stdout, valid.stdout + valid.stderr
    out, md, html = tmp_path / "r.json", tmp_path / "r.md", tmp_path / "r.html"
    r = run_cli(
        "check", str(case.leaky_ts), "--policy", str(policy), "--members", str(case.members),
        "--nonmembers", str(case.nonmembers), "--json", str(out), "--markdown", str(md), "--html", str(html),
    )  # fmt: skip
    assert r.returncode == 3, r.stdout + r.stderr
    rep = json.loads(out.read_text())
    assert rep["verdict"] == "inconclusive"
    (check,) = rep["checks"]
    assert check["status"] == "inconclusive" and LABELS_ONLY in check["reason"]
    assert rep["target"]["served"]["description"] == "labels only"
    assert "served by the API: labels only" in md.read_text() and "served by the API: labels only" in html.read_text()
    assert "served by the API: labels only" in " ".join(r.stdout.split())


def test_a_policy_without_attacks_serving_labels_runs_the_label_only_family_and_extends_inherit_serves(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(_label_policy("  - {id: acc, attack: best, metric: accuracy, max: 0.7}\n"))
    policy = load_policy(base)
    assert policy.attacks_to_run() == {"correctness": {}, "label_only": {}, "boundary": {}}
    assert policy.uses_default_attacks()
    child = tmp_path / "child.yaml"
    child.write_text("name: child\nextends: base.yaml\nsensitivity: confidential\nrelease: api\nconfidence: 0.9\n")
    assert load_policy(child).served().output == "label"
    served = parse_policy("name: p\nsensitivity: public\nrelease: api\nserves: {top_k: 4}\n").served()
    assert Surface.of(served).log_proba(_lp(P)) == pytest.approx(_lp(P))  # top_k ≥ K classes returns every class
