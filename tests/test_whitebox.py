"""White-box attacks (gradient MIA, model inversion) and attribute inference: numbers and behaviour.

Small models and few steps, so the whole file runs in well under a minute on one core.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.metrics import roc_auc_score
from torch import nn

from privgate import AuditData, Dataset, Recipe, RunOptions, Target, check_model, load_policy, train_model
from privgate.attacks import PLANNED, available_attacks, get_attack
from privgate.attacks.base import AttackContext, AttackSkipped
from privgate.attacks.gradient import gradient_features
from privgate.attacks.inversion import cosine_to, image_grid, ssim
from privgate.io.png import png_bytes
from privgate.policy import parse_policy
from privgate.stats.leakage import PairedGuesses, ReconstructionSimilarity, expected_max_of_subset, paired_advantage

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- fixtures


def _mlp(d: int = 64, k: int = 10, hidden: int = 128) -> nn.Module:
    return nn.Sequential(nn.Linear(d, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, k))


MEMO = Recipe(model_factory=_mlp, epochs=150, batch_size=64, lr=3e-3, name="digits-few-shot")
REGULARISED = dataclasses.replace(MEMO, weight_decay=0.1, name="digits-few-shot-wd")


@pytest.fixture(scope="module")
def digits():
    """5 training images per class (members), 40 unseen per class, 300 population images."""
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    x, y = x[order], y[order]
    mem = np.concatenate([np.flatnonzero(y == c)[:5] for c in range(10)])
    non = np.concatenate([np.flatnonzero(y == c)[5:45] for c in range(10)])
    rest = np.setdiff1d(np.arange(len(y)), np.r_[mem, non])[:300]
    return {"members": (x[mem], y[mem]), "nonmembers": (x[non], y[non]), "population": (x[rest], y[rest])}


@pytest.fixture(scope="module")
def models(digits):
    xm, ym = digits["members"]
    return {"memo": train_model(MEMO, xm, ym, seed=0), "reg": train_model(REGULARISED, xm, ym, seed=0)}


def _ctx(model, digits, **kw) -> tuple[AttackContext, np.ndarray]:
    (xm, ym), (xn, yn) = digits["members"], digits["nonmembers"]
    x, y = np.concatenate([xm, xn]), np.concatenate([ym, yn])
    m = np.r_[np.ones(len(ym), bool), np.zeros(len(yn), bool)]
    pop = Dataset(*digits["population"])
    target = model if isinstance(model, Target) else Target(model)
    return AttackContext(target=target, x=x, y=y, population=pop, **kw), m


# --------------------------------------------------------------------------- registry and policy


def test_whitebox_attacks_are_registered_and_leave_planned():
    names = available_attacks()
    assert {"gradient", "inversion", "attribute"} <= set(names)
    assert not {"gradient", "inversion", "attribute"} & set(PLANNED)
    assert names["gradient"].threat_model == "white-box"
    assert names["inversion"].threat_model == "white-box"
    assert names["attribute"].threat_model == "black-box"


def test_strict_policy_checks_gradient_and_inversion():
    pol = load_policy("strict")
    by_attack = {c.attack: c for c in pol.checks}
    assert by_attack["gradient"].metric.value == "auc" and by_attack["gradient"].max == 0.60
    assert by_attack["inversion"].metric.value == "similarity" and by_attack["inversion"].max == 0.05


def test_bad_attack_options_are_policy_errors():
    from privgate.errors import PolicyError

    base = (
        "name: p\nsensitivity: confidential\nrelease: model\nattacks:\n  {a}\nchecks:\n  - {{id: c, "
        "attack: loss, metric: auc, max: 0.9}}\n"
    )
    for bad in (
        "gradient: {mode: magic}",
        "inversion: {steps: 0}",
        "inversion: {measure: psnr}",
        "attribute: {sensitive_column: x}",
        "gradient: {nope: 1}",
    ):
        with pytest.raises(PolicyError):
            parse_policy(base.format(a=bad))


# --------------------------------------------------------------------------- gradient


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_vectorised_gradient_norms_equal_autograd_loop(models, digits):
    net = models["memo"]
    x, y = digits["nonmembers"][0][:7], digits["nonmembers"][1][:7]
    norms, loss, layers = gradient_features(net, x, y)
    assert layers == ["0", "2", "4"] and norms.shape == (7, 3)
    for i in range(7):
        net.zero_grad()
        out = net(torch.as_tensor(x[i : i + 1]))
        nn.functional.cross_entropy(out, torch.as_tensor(y[i : i + 1])).backward()
        want = [
            np.sqrt(sum(float(p.grad.pow(2).sum()) for n, p in net.named_parameters() if n.startswith(f"{layer}.")))
            for layer in layers
        ]
        np.testing.assert_allclose(norms[i], want, rtol=1e-4, atol=1e-7)
    # TorchScript modules cannot go through torch.func: the loop fallback gives the same numbers
    scripted = torch.jit.trace(net, torch.as_tensor(x[:1]))
    norms_ts, loss_ts, _ = gradient_features(scripted, x, y)
    np.testing.assert_allclose(norms_ts, norms, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(loss_ts, loss, rtol=1e-4, atol=1e-7)


def test_plain_mlp_gradient_norms_come_in_closed_form_without_per_example_gradients(models, digits, monkeypatch):
    """A plain MLP (Linear + Tanh/ReLU/LeakyReLU/Sigmoid) never reaches torch.func: its norms are ‖δᵢ‖·‖aᵢ‖."""
    import privgate.attacks.gradient as gradient

    x, y = digits["nonmembers"][0][:40], digits["nonmembers"][1][:40]
    looped = gradient._per_example_sq_norms_loop
    nets = {
        "tanh": models["memo"],
        "leaky": nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1, bias=False)),
        "sigmoid+relu": nn.Sequential(nn.Linear(64, 16), nn.Sigmoid(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 10)),
    }

    def no_vmap(*args, **kwargs):
        raise AssertionError("a plain MLP went through torch.func's per-example gradients")

    for name, net in nets.items():
        yy = (y % 2) if name == "leaky" else y  # one logit: binary labels
        monkeypatch.setattr(gradient, "_per_example_sq_norms_vmap", no_vmap)
        norms, loss, layers = gradient_features(net, x, yy)
        monkeypatch.undo()
        params = dict(net.named_parameters())
        sq, want_loss = looped(net, torch.as_tensor(x), torch.as_tensor(yy), list(params), "logits")
        want = np.sqrt(
            np.stack(
                [sq[:, [i for i, n in enumerate(params) if n.startswith(f"{la}.")]].sum(1).numpy() for la in layers],
                axis=1,
            )
        )
        np.testing.assert_allclose(norms, want, rtol=1e-4, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(loss, want_loss.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    # a module that is not a plain MLP (here BatchNorm) still goes through torch.func
    monkeypatch.setattr(gradient, "_per_example_sq_norms_vmap", no_vmap)
    bn = nn.Sequential(nn.Linear(64, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 10)).eval()
    with pytest.raises(AssertionError, match="torch.func"):
        gradient_features(bn, x, y)


def test_gradient_reference_models_train_at_once_and_come_from_the_cache_the_second_time(models, digits, tmp_path):
    """The classifier mode's reference models are the engine's (stacked, cached), not one training loop after another:
    a second audit with the same cache trains none, and scores every row exactly as the first."""
    run = RunOptions(cache_dir=tmp_path / "cache", cache_key=b"k" * 32)
    recipe = dataclasses.replace(MEMO, epochs=10)
    first, again = (
        get_attack("gradient")(n_reference=2).run(_ctx(models["memo"], digits, recipe=recipe, run=run)[0])
        for _ in range(2)
    )
    assert first.extras["mode"] == "classifier" and (first.models_trained, again.models_trained) == (2, 0)
    np.testing.assert_array_equal(first.scores, again.scores)
    assert first.extras["attack_model_weights"] == again.extras["attack_model_weights"]


def test_gradient_mia_separates_memorising_from_regularised(models, digits):
    aucs = {}
    for name, net in models.items():
        ctx, m = _ctx(net, digits)
        r = get_attack("gradient")(mode="norm").run(ctx)
        aucs[name] = roc_auc_score(m, r.scores)
    # members of the memorising few-shot model have far smaller gradients than unseen images
    assert aucs["memo"] > 0.75
    assert aucs["memo"] > aucs["reg"] + 0.05


def test_gradient_classifier_trains_reference_models(models, digits):
    ctx, m = _ctx(models["memo"], digits, recipe=dataclasses.replace(MEMO, epochs=40))
    r = get_attack("gradient")(mode="auto", n_reference=2).run(ctx)
    assert r.extras["mode"] == "classifier" and r.models_trained == 2
    assert set(r.extras["attack_model_weights"]) == {"0", "2", "4", "loss"}
    assert roc_auc_score(m, r.scores) > 0.7
    # without a recipe, auto falls back to the gradient norm and says so
    ctx2, _ = _ctx(models["memo"], digits)
    r2 = get_attack("gradient")(mode="auto").run(ctx2)
    assert r2.extras["mode"] == "norm" and r2.models_trained == 0 and r2.notes
    with pytest.raises(AttackSkipped, match="recipe"):
        get_attack("gradient")(mode="classifier").run(ctx2)


# --------------------------------------------------------------------------- inversion


def test_expected_max_of_subset_is_exact():
    v = np.array([0.3, -1.0, 2.0, 0.7, 0.1, 1.5])
    for k in range(1, len(v) + 1):
        brute = np.mean([max(c) for c in itertools.combinations(v, k)])
        assert expected_max_of_subset(v, k) == pytest.approx(brute, rel=1e-12)


def test_similarity_measure_gap_interval_and_sign_test():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(10), 30)
    membership = np.tile(np.r_[np.ones(10, bool), np.zeros(20, bool)], 10)
    # members 0.1 more similar than non-members in every class: every class gap is positive
    sim = rng.normal(0.5, 0.05, len(groups)) + 0.1 * membership
    est = ReconstructionSimilarity(sim, groups).estimate(membership, 0.95)
    assert est.details["classes"] == 10 and est.details["closer_to_member"] == 10
    assert est.details["sign_test_p"] == pytest.approx(0.5**10)
    assert 0.05 < est.lo < est.value < est.hi
    # pools are balanced: 20 non-members do not beat 10 members by having more draws
    null = ReconstructionSimilarity(rng.normal(0.5, 0.05, len(groups)), groups).estimate(membership, 0.95)
    assert null.lo < 0 < null.hi
    # too few classes with both kinds of example: unresolvable, never a number that looks decided
    few = ReconstructionSimilarity(sim[groups < 2], groups[groups < 2]).estimate(membership[groups < 2], 0.95)
    assert not few.resolvable and "at least 3" in few.reason


def test_ssim_and_cosine_known_values():
    a = np.random.default_rng(0).random((3, 8, 8))
    np.testing.assert_allclose(ssim(a, a, 1.0), 1.0)
    c1, c2 = 0.3 * np.ones((1, 8, 8)), 0.6 * np.ones((1, 8, 8))
    want = (2 * 0.3 * 0.6 + 1e-4) / (0.3**2 + 0.6**2 + 1e-4)  # constant images: only the luminance term is left
    assert ssim(c1, c2, 1.0)[0] == pytest.approx(want, rel=1e-9)
    assert ssim(a, 1 - a, 1.0).mean() < 0
    centre = np.zeros(4)
    np.testing.assert_allclose(
        cosine_to(np.array([[1.0, 0, 0, 0], [1, 1, 0, 0]]), np.array([[2.0, 0, 0, 0], [-1, -1, 0, 0]]), centre),
        [1.0, -1.0],
    )


def test_png_writer_round_trip():
    grid = image_grid(np.linspace(0, 1, 2 * 8 * 8).reshape(2, 8, 8), 0.0, 1.0, min_tile=16)
    assert grid.shape == (16, 16 * 2 + 2) and grid.dtype == np.uint8
    data = png_bytes(grid)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    assert (w, h) == (34, 16)
    idat_len = struct.unpack(">I", data[33:37])[0]
    raw = zlib.decompress(data[41 : 41 + idat_len])
    rows = np.frombuffer(raw, np.uint8).reshape(h, w + 1)
    assert (rows[:, 0] == 0).all()
    np.testing.assert_array_equal(rows[:, 1:], grid)


def test_inversion_reconstructions_are_closer_to_members_of_a_memorising_model(models, digits):
    est = {}
    for name, net in models.items():
        ctx, m = _ctx(net, digits, run=RunOptions(seed=0))
        r = get_attack("inversion")(steps=150).run(ctx)
        assert r.extras["image_shape"] == [8, 8] and r.extras["measure"] == "ssim" and r.extras["prior"] == "dae"
        assert len(r.extras["per_class"]) == 10 and r.notes  # the auto image-shape guess is reported
        est[name] = r.extras["estimates"]["similarity"].estimate(m, 0.95)
        if name == "memo":
            files = r.extras["artefacts"]
            assert set(files) == {"reconstructions.png", "reconstructions.csv"}
            assert len(files["reconstructions.csv"].decode().strip().splitlines()) == 11
            assert all(pc["confidence"] > 0.99 for pc in r.extras["per_class"])
    memo, reg = est["memo"], est["reg"]  # measured: 0.052 [0.013, 0.090] and 0.032 [-0.010, 0.073]
    assert memo.lo > 0, "the memorising model's reconstructions must be measurably closer to its training images"
    assert memo.details["closer_to_member"] >= 8 and memo.details["sign_test_p"] < 0.06
    assert reg.lo <= 0 < reg.hi, "the regularised model's gap is not distinguishable from zero"
    assert memo.value > reg.value + 0.01


def test_inversion_stops_on_confidence_target_and_patience(models, digits):
    from privgate.attacks.inversion_search import invert

    x = digits["population"][0]
    start = np.repeat(x.mean(axis=0, keepdims=True), 10, axis=0)
    quick = invert(models["memo"], np.arange(10), start, 0.0, 1.0, steps=200, confidence_target=0.9)
    assert set(quick.stop) == {"confidence target"} and (quick.confidence >= 0.9).all() and quick.steps.max() < 200
    grads = [None if p.grad is None else p.grad.clone() for p in models["memo"].parameters()]
    capped = invert(models["memo"], np.arange(10), start, 0.0, 1.0, steps=5)
    assert set(capped.stop) <= {"max steps", "no improvement"} and capped.steps.max() <= 5
    assert (capped.recon >= 0).all() and (capped.recon <= 1).all()
    # the target is left as it was: no gradient accumulated into its parameters
    for before, p in zip(grads, models["memo"].parameters()):
        assert (before is None and p.grad is None) or torch.equal(before, p.grad)


def test_inversion_is_reproducible_for_a_seed(models, digits):
    runs = []
    for _ in range(2):
        ctx, _m = _ctx(models["reg"], digits, run=RunOptions(seed=7))
        runs.append(get_attack("inversion")(steps=20, restarts=2).run(ctx))
    np.testing.assert_array_equal(runs[0].scores, runs[1].scores)
    assert runs[0].extras["artefacts"] == runs[1].extras["artefacts"]
    assert len(runs[0].extras["per_class"]) == 20  # 10 classes x 2 restarts


# --------------------------------------------------------------------------- attribute inference


def _table(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "synthetic_attribute_data", ROOT / "examples" / "synthetic_attribute" / "data.py"
    )
    synthetic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synthetic)
    return synthetic.generate(n, seed)


@pytest.fixture(scope="module")
def table():
    x, y = _table(1500, seed=3)
    return {"members": (x[:400], y[:400]), "nonmembers": (x[400:800], y[400:800]), "population": (x[800:], y[800:])}


def _tab_model() -> nn.Module:
    return nn.Sequential(nn.Linear(9, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 2))


TAB_MEMO = Recipe(model_factory=_tab_model, epochs=200, batch_size=64, lr=3e-3)  # memorises the 400 members


@pytest.fixture(scope="module")
def tab_memo(table) -> nn.Module:
    """The memorising table model, trained once for the tests that attack it (they only read it)."""
    return train_model(TAB_MEMO, *table["members"], seed=0)


def test_paired_advantage_interval_is_exact_and_conservative():
    rng = np.random.default_rng(0)
    for pb, pc, n in ((0.10, 0.10, 200), (0.20, 0.05, 300), (0.02, 0.0, 150)):
        true = pb - pc
        hits = 0
        for _ in range(400):
            u = rng.random(n)
            b, c = int((u < pb).sum()), int(((u >= pb) & (u < pb + pc)).sum())
            _, lo, hi = paired_advantage(b, c, n, 0.95)
            hits += lo <= true <= hi
        assert hits / 400 >= 0.95
    value, lo, hi = paired_advantage(0, 0, 100, 0.95)
    assert value == 0 and -0.05 < lo < 0 < hi < 0.05
    # the measure counts only members for the value; non-members go to the details
    membership = np.r_[np.ones(4, bool), np.zeros(4, bool)]
    attack = np.array([1, 1, 1, 0, 1, 0, 0, 0], bool)
    baseline = np.array([0, 1, 0, 0, 1, 1, 0, 0], bool)
    est = PairedGuesses(attack, baseline).estimate(membership, 0.95)
    assert est.value == pytest.approx(0.5) and est.n_members == 4
    assert est.details["only_attack_right"] == 2 and est.details["only_baseline_right"] == 0
    assert est.details["advantage_nonmembers"] == pytest.approx(-0.25)
    assert est.details["member_nonmember_gap"] == pytest.approx(0.5)


def test_attribute_inference_finds_the_memorised_sensitive_column(table, tab_memo):
    xm, ym = table["members"]
    reg = train_model(dataclasses.replace(TAB_MEMO, epochs=20, weight_decay=0.01), xm, ym, seed=0)
    (xn, yn) = table["nonmembers"]
    x, y = np.concatenate([xm, xn]), np.concatenate([ym, yn])
    m = np.r_[np.ones(len(ym), bool), np.zeros(len(yn), bool)]
    out = {}
    for name, net in (("memo", tab_memo), ("reg", reg)):
        ctx = AttackContext(target=Target(net), x=x, y=y, population=Dataset(*table["population"]))
        r = get_attack("attribute")(sensitive_column=0).run(ctx)
        assert r.extras["baseline"] != "prior"  # the planted x1 → s dependency makes imputation beat the prior
        out[name] = r.extras["estimates"]["attribute_advantage"].estimate(m, 0.95)
    memo_e, reg_e = out["memo"], out["reg"]
    assert memo_e.lo > 0.03, "a memorising model must reveal members' sensitive values beyond the population baseline"
    assert memo_e.details["member_nonmember_gap"] > 0.08
    assert abs(memo_e.details["advantage_nonmembers"]) < 0.06  # the leak is about members, not the population
    assert memo_e.value > reg_e.value + 0.03


def test_attribute_attack_skips_with_a_reason(table):
    xm, ym = table["members"]
    ctx = AttackContext(target=Target(_tab_model()), x=xm, y=ym, population=Dataset(*table["population"]))
    with pytest.raises(AttackSkipped, match="sensitive_column"):
        get_attack("attribute")().run(ctx)
    with pytest.raises(AttackSkipped, match="distinct values"):
        get_attack("attribute")(sensitive_column=3).run(ctx)
    with pytest.raises(AttackSkipped, match="population"):
        get_attack("attribute")(sensitive_column=0).run(dataclasses.replace(ctx, population=None))


# --------------------------------------------------------------------------- through the gate


WHITEBOX_POLICY = """
name: wb
sensitivity: strictly_confidential
release: model
attacks:
  gradient: {mode: norm}
  inversion: {steps: 60}
checks:
  - {id: bb, attack: loss, metric: auc, max: 1.0}
  - {id: grad, attack: gradient, metric: auc, max: 0.6}
  - {id: inv, attack: inversion, metric: similarity, max: 0.05}
"""


def test_gate_decides_similarity_and_saves_artefacts(models, digits, tmp_path):
    data = AuditData(Dataset(*digits["members"]), Dataset(*digits["nonmembers"]), Dataset(*digits["population"]))
    report = check_model(
        Target(models["memo"]), data, parse_policy(WHITEBOX_POLICY), artefacts_dir=str(tmp_path / "art")
    )
    checks = {c.id: c for c in report.checks}
    assert checks["grad"].status == "fail" and checks["grad"].value > 0.7
    inv = checks["inv"]
    assert inv.metric == "similarity" and inv.value is not None and inv.ci[0] <= inv.value <= inv.ci[1]
    assert inv.details["classes"] == 10 and len(inv.details["per_class"]) == 10
    summary = next(a for a in report.attacks if a.name == "inversion")
    paths = summary.extras["artefacts"]
    assert sorted(Path(p).name for p in paths) == ["reconstructions.csv", "reconstructions.png"]
    assert all(Path(p).parent == tmp_path / "art" / "inversion" and Path(p).is_file() for p in paths)
    assert summary.extras["metrics"]["similarity"]["value"] == pytest.approx(inv.value)
    text = report.to_json()
    assert "estimates" not in text and "\\x89PNG" not in text
    json.loads(text)
    # no directory: nothing is written, and the report says so by an empty list
    again = check_model(Target(models["memo"]), data, parse_policy(WHITEBOX_POLICY))
    assert next(a for a in again.attacks if a.name == "inversion").extras["artefacts"] == []


def test_whitebox_check_on_an_api_only_target_is_inconclusive(table):
    from sklearn.linear_model import LogisticRegression

    xm, ym = table["members"]
    clf = LogisticRegression(max_iter=500).fit(xm, ym)
    data = AuditData(Dataset(*table["members"]), Dataset(*table["nonmembers"]))
    report = check_model(Target(clf, fmt="sklearn"), data, parse_policy(WHITEBOX_POLICY))
    checks = {c.id: c for c in report.checks}
    assert checks["bb"].status == "pass"
    for cid in ("grad", "inv"):
        assert checks[cid].status == "inconclusive"
        assert "white-box" in checks[cid].reason and "without a torch module" in checks[cid].reason
    assert report.verdict == "inconclusive" and report.exit_code == 3
    assert {a.name: a.status for a in report.attacks}["gradient"] == "skipped"


def test_attribute_check_through_the_gate(table, tab_memo):
    policy = parse_policy(
        "name: a\nsensitivity: confidential\nrelease: api\nattacks:\n  attribute: {sensitive_column: 0}\n"
        "checks:\n  - {id: attr, attack: attribute, metric: attribute_advantage, max: 0.02}\n"
        "  - {id: best-attr, attack: best, metric: attribute_advantage, max: 0.02}\n"
        "  - {id: loss, attack: loss, metric: auc, max: 1.0}\n"
    )
    data = AuditData(Dataset(*table["members"]), Dataset(*table["nonmembers"]), Dataset(*table["population"]))
    report = check_model(Target(tab_memo), data, policy)
    checks = {c.id: c for c in report.checks}
    assert checks["attr"].status == "fail" and checks["attr"].ci[0] > 0.02
    # 'best' compares only attacks that measure the metric: the loss attack does not dilute it
    assert checks["best-attr"].status == "fail" and checks["best-attr"].chosen_attack == "attribute"
    assert report.verdict == "fail"


def test_cli_saves_reconstructions_next_to_the_json_report(tmp_path):
    from click.testing import CliRunner

    from privgate.cli import cli

    example = ROOT / "examples" / "synthetic_attribute"
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "name: p\nsensitivity: confidential\nrelease: model\nattacks:\n  inversion: {steps: 30, prior: none}\n"
        "checks:\n  - {id: inv, attack: inversion, metric: similarity, max: 0.5}\n"
    )
    out = tmp_path / "reports" / "r.json"
    result = CliRunner().invoke(
        cli, ["check", "--config", str(example / "privgate.toml"), "--policy", str(policy), "--json", str(out)]
    )
    assert result.exit_code in (0, 1, 3), result.output
    rep = json.loads(out.read_text())
    inv = next(a for a in rep["attacks"] if a["name"] == "inversion")
    assert inv["extras"]["image_shape"] is None and inv["extras"]["measure"] == "cosine"  # 9 columns: a table
    (csv_path,) = inv["extras"]["artefacts"]
    assert Path(csv_path) == tmp_path / "reports" / "r.artefacts" / "inversion" / "reconstructions.csv"
    lines = Path(csv_path).read_text().splitlines()
    assert lines[0].startswith("class,confidence,f0") and len(lines) == 3  # header + 2 classes
    assert f"artefacts: {tmp_path / 'reports' / 'r.artefacts'}" in result.output
    # a binary task has 2 classes: too few for an interval over classes, so the check says so instead of passing
    check = rep["checks"][0]
    assert check["status"] == "inconclusive" and "at least 3" in check["reason"] and "auc" in check["reason"]
    assert result.exit_code == 3
