"""Models whose outputs are not [n, K] logits (privgate.outputs): one logit trained with BCE-with-logits,
and rows that already are probabilities (a final nn.Softmax); and a scikit-learn target given a torch recipe."""

from __future__ import annotations

import json
import textwrap

import inproc
import numpy as np
import pytest
import torch
from cases import run_cli
from scipy.special import expit
from sklearn.linear_model import LogisticRegression
from torch import nn

from privgate import AuditData, Dataset, Policy, Recipe, RunOptions, Target, check_model, outputs, stats, train_model
from privgate.attacks import AttackContext, get_attack
from privgate.attacks.gradient import gradient_features
from privgate.dp.clip import accuracy
from privgate.dpsgd.train import probe_private_training
from privgate.policy import parse_policy
from privgate.training.engine import train_models
from privgate.training.plan import model_seeds, paired_masks

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")

BINARY_RECIPE = textwrap.dedent(
    """
    from torch import nn
    from privgate.recipe import Recipe

    def make_model():
        return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))

    RECIPE = Recipe(model_factory=make_model, epochs=300, batch_size=1000, lr=3e-3, name="one-logit-mlp")
    """
)


def binary_data(n: int, seed: int, noise: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """A linear rule in 20-D with 30 % of the labels flipped: memorising the flips leaks membership."""
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(99).normal(size=20)
    x = rng.normal(size=(n, 20)).astype(np.float32)
    y = (x @ w > 0).astype(np.int64)
    return x, np.where(rng.random(n) < noise, 1 - y, y)


def bce_model(x: np.ndarray, y: np.ndarray, steps: int = 300) -> nn.Module:
    """A one-logit MLP trained as users train binary classifiers: BCEWithLogitsLoss on float labels."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss = nn.BCEWithLogitsLoss()
    for _ in range(steps):
        opt.zero_grad()
        loss(model(torch.from_numpy(x)).squeeze(1), torch.from_numpy(y).float()).backward()
        opt.step()
    return model.eval()


def policy(
    attacks: str, checks: str = "  - {id: a, attack: best, metric: auc, max: 0.99}", release: str = "api"
) -> Policy:
    sens = "strictly_confidential" if release == "model" else "confidential"
    return parse_policy(
        f"name: t\nsensitivity: {sens}\nrelease: {release}\nattacks: {{{attacks}}}\nchecks:\n{checks}\n"
    )


# --------------------------------------------------------------------------- reading outputs


def test_kinds_and_their_log_probabilities():
    z = np.array([-3.0, 0.0, 2.5, 40.0])
    assert outputs.kind_of(z) == outputs.kind_of(z[:, None]) == outputs.BINARY
    lp = outputs.log_proba(z[:, None], outputs.BINARY)
    np.testing.assert_allclose(np.exp(lp[:, 1]), expit(z), rtol=1e-12)
    np.testing.assert_allclose(lp[:, 0], np.log(expit(-z)), rtol=1e-12)
    assert lp[3, 0] == pytest.approx(-40.0, rel=1e-9)  # no saturation: log σ(−40), not log 0
    p = np.array([[0.2, 0.8], [1.0, 0.0], [0.5, 0.5]])
    assert outputs.kind_of(p) == outputs.PROBABILITIES
    np.testing.assert_allclose(outputs.log_proba(p, outputs.PROBABILITIES)[0], np.log([0.2, 0.8]))
    assert np.isfinite(outputs.log_proba(p, outputs.PROBABILITIES)).all()
    assert outputs.kind_of(np.array([[0.2, 0.8], [0.6, 0.5]])) == outputs.LOGITS  # one row off: logits
    assert outputs.kind_of(np.array([[-0.2, 1.2]])) == outputs.LOGITS
    assert outputs.kind_of(np.zeros((3, 2, 2))) is None
    # the training loss of one logit is BCE-with-logits, of probabilities the NLL of log p
    zt, yt = torch.tensor([[-1.0], [0.3], [2.0]]), torch.tensor([0, 1, 1])
    assert float(outputs.nll(zt, yt)) == pytest.approx(
        float(nn.functional.binary_cross_entropy_with_logits(zt[:, 0], yt.float())), rel=1e-6
    )
    logits = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    assert float(outputs.nll(torch.softmax(logits, 1), torch.tensor([2, 1]))) == pytest.approx(
        float(nn.functional.cross_entropy(logits, torch.tensor([2, 1]))), rel=1e-5
    )


def test_a_sigmoid_output_is_flagged():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 8), nn.Tanh(), nn.Linear(8, 1), nn.Sigmoid())
    (xm, ym), (xn, yn) = binary_data(100, 1), binary_data(100, 2)
    rep = check_model(Target(model), AuditData(Dataset(xm, ym), Dataset(xn, yn)), policy("loss: {}"))
    assert rep.target["outputs"]["kind"] == "binary-logit"
    assert any("as a final nn.Sigmoid's would" in w and "all 200 probed rows" in w for w in rep.warnings)


# --------------------------------------------------------------------------- one logit


def test_single_logit_model_fails_confidential_in_every_view(tmp_path):
    """A BCE-trained one-logit MLP that memorises flipped labels, audited with RMIA's reference models from a recipe."""
    (xm, ym), (xn, yn), (xp, yp) = binary_data(300, 1), binary_data(300, 2), binary_data(200, 3)
    torch.jit.save(torch.jit.script(bce_model(xm, ym)), str(tmp_path / "model.pt"))
    for name, (x, y) in (("members", (xm, ym)), ("nonmembers", (xn, yn)), ("population", (xp, yp))):
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    (tmp_path / "bin_recipe.py").write_text(BINARY_RECIPE)
    # in process (inproc: the CLI's report and console view, test_front_door.py); the exit-2 test below runs the CLI
    report = inproc.check(
        tmp_path / "model.pt", "confidential", tmp_path / "members.npz", tmp_path / "nonmembers.npz",
        population=str(tmp_path / "population.npz"), recipe="bin_recipe:RECIPE", search_dirs=(tmp_path,),
    )  # fmt: skip
    assert report.exit_code == 1, report.summary
    (tmp_path / "r.json").write_text(inproc.render(report, "json")["json"], encoding="utf-8")
    stdout = inproc.console(report)
    rep = json.loads((tmp_path / "r.json").read_text())
    status = {c["id"]: c["status"] for c in rep["checks"]}
    assert (
        rep["verdict"] == "fail" and status["mia-accuracy"] == status["mia-auc"] == "fail"
    )  # internal's 0.8 may stay unproven
    assert (
        rep["target"]["outputs"]["kind"] == "binary-logit" and "p(1) = sigmoid(z)" in rep["target"]["outputs"]["note"]
    )
    acc = rep["target"]["accuracy"]
    assert acc["classes"] == 2 and acc["members"]["value"] == 1.0 and 0.45 < acc["nonmembers"]["value"] < 0.65
    by = {a["name"]: a for a in rep["attacks"]}
    assert by["loss"]["auc"] > 0.7 and by["loss"]["auc_ci"][0] > 0.6
    rmia = by["rmia"]
    assert rmia["status"] == "ran" and rmia["models_trained"] == 4 and rmia["extras"]["kernel"] == "mlp"
    assert rmia["auc"] > 0.75 and rmia["auc_ci"][0] > 0.65
    # the members fit the model (no doubt about them); a memoriser at chance on its non-members is no better than
    # always predicting the majority label, and says so (issue 42 item 5)
    sanity = [w for w in rep["warnings"] if w.startswith("target sanity")]
    assert all("than always predicting" in w for w in sanity) and len(sanity) <= 1
    assert "one logit per row" in stdout


class SqueezedLogit(nn.Module):
    """A model returning ``[n]`` (one logit per row, squeezed), as many BCE training scripts write it."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


@pytest.mark.parametrize(
    "factory, kernel",
    [
        (lambda: nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1)), "mlp"),
        (lambda: nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1)), "vmap"),
        (SqueezedLogit, "vmap"),
    ],
    ids=["mlp", "vmap", "vmap-squeezed"],
)
def test_single_logit_reference_models_train_like_recipe_train_with_bce(factory, kernel):
    recipe = Recipe(factory, epochs=3, batch_size=16, lr=1e-2, name="one-logit")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(90, 6)).astype(np.float32), rng.integers(0, 2, 90)
    masks, seeds = paired_masks(len(x), 2, seed=1), model_seeds(1, 2)
    states, mode, notes, used = train_models(recipe, x, y, masks, seeds, kernel=kernel)
    assert (mode, used, notes) == ("vectorised", kernel, [])
    for state, m, s in zip(states, masks, seeds):
        ref = train_model(recipe, x[m], y[m], seed=s).state_dict()
        assert max(float((state[k] - ref[k]).abs().max()) for k in ref) < 1e-5
    # recipe.train is BCE-with-logits: the same steps by hand give the same model
    torch.manual_seed(int(seeds[0]))
    net = factory()
    opt, gen = torch.optim.Adam(net.parameters(), lr=1e-2), torch.Generator().manual_seed(int(seeds[0]))
    xt, yt = torch.from_numpy(x[masks[0]]), torch.from_numpy(y[masks[0]]).float()
    for _ in range(3):
        order = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), 16):
            opt.zero_grad()
            nn.functional.binary_cross_entropy_with_logits(
                net(xt[order[i : i + 16]]).reshape(-1), yt[order[i : i + 16]]
            ).backward()
            opt.step()
    assert max(float((states[0][k] - v).abs().max()) for k, v in net.state_dict().items()) < 1e-5


def test_single_logit_white_box_attacks_and_dp_training():
    (xm, ym), (xn, yn) = binary_data(150, 1), binary_data(150, 2)
    model = bce_model(xm, ym)
    x, y = np.concatenate([xm, xn]), np.concatenate([ym, yn])
    target = Target(model)
    target.detect_outputs(x)
    norms, loss, layers = gradient_features(model, x, y, target.outputs)
    with torch.no_grad():
        bce = nn.functional.binary_cross_entropy_with_logits(
            model(torch.from_numpy(x))[:, 0], torch.from_numpy(y).float(), reduction="none"
        )
    np.testing.assert_allclose(loss, bce.double().numpy(), rtol=1e-4, atol=1e-6)  # float32 rounding at tiny losses
    # the last layer's gradient in closed form: ∂ℓ/∂(w, b) = (σ(z) − y) · (h, 1)
    with torch.no_grad():
        h = model[:2](torch.from_numpy(x)).double()
        z = model(torch.from_numpy(x))[:, 0].double()
    last = (torch.sigmoid(z) - torch.from_numpy(y).double()).abs() * (h.square().sum(1) + 1).sqrt()
    assert layers == ["0", "2"]
    np.testing.assert_allclose(norms[:, 1], last.numpy(), rtol=1e-3, atol=1e-6)
    membership = np.r_[np.ones(150, bool), np.zeros(150, bool)]
    ctx = AttackContext(target=target, x=x, y=y, run=RunOptions(seed=0))
    grad = get_attack("gradient")(mode="norm").run(ctx)
    assert stats.auc(grad.scores[membership], grad.scores[~membership]).value > 0.7
    inv = get_attack("inversion")(steps=40, restarts=1, prior="none").run(ctx)
    recon = inv.extras["per_class"]
    assert [r["class"] for r in recon] == [0, 1] and min(r["confidence"] for r in recon) > 0.9
    # DP-SGD: Opacus computes per-example gradients of the BCE loss; utility counts z > 0 as class 1
    recipe = Recipe(lambda: nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1)), name="one-logit")
    assert probe_private_training(recipe, xm, ym) == []
    assert accuracy(model, xm, ym) == 1.0 and 0.4 < accuracy(model, xn, yn) < 0.7


# --------------------------------------------------------------------------- probabilities


def _classifier(softmax: bool) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 4)]
    return nn.Sequential(*layers, *([nn.Softmax(dim=1)] if softmax else []))


def test_softmax_model_is_read_as_probabilities_with_the_same_ranking():
    """A model ending in nn.Softmax scores exactly like the same weights without it; softmax twice would not."""
    from cases import synthetic

    (xm, ym), (xn, yn), (xp, yp) = synthetic(200, 1, 0.3), synthetic(200, 2, 0.3), synthetic(200, 3, 0.3)
    torch.manual_seed(0)
    plain = _classifier(False)
    opt = torch.optim.Adam(plain.parameters(), lr=1e-2)
    for _ in range(150):
        opt.zero_grad()
        nn.functional.cross_entropy(plain(torch.from_numpy(xm)), torch.from_numpy(ym)).backward()
        opt.step()
    soft = _classifier(True)
    soft.load_state_dict(plain.state_dict())
    with torch.no_grad():  # no float32 saturation: p_y < 1 − 1e-5 everywhere, so no ties appear
        assert float(soft(torch.from_numpy(np.concatenate([xm, xn]))).max()) < 1 - 1e-5
    data = AuditData(Dataset(xm, ym), Dataset(xn, yn), Dataset(xp, yp))
    attacks = "loss: {}, true_class_confidence: {}, confidence: {}, modified_entropy: {}, rmia: {models: 2}"

    def recipe(softmax: bool) -> Recipe:
        return Recipe(lambda: _classifier(softmax), epochs=40, batch_size=100, lr=1e-2, name=f"softmax={softmax}")

    reports = {
        s: check_model(Target(m.eval()), data, policy(attacks), recipe=recipe(s), seed=0, cache_dir="off")
        for s, m in ((False, plain), (True, soft))
    }
    auc = {s: {a.name: a.auc for a in rep.attacks} for s, rep in reports.items()}
    assert (
        auc[True]["loss"] == auc[False]["loss"]
        and auc[True]["true_class_confidence"] == auc[False]["true_class_confidence"]
    )
    assert auc[True]["confidence"] == pytest.approx(auc[False]["confidence"], abs=1e-3)
    assert auc[True]["modified_entropy"] == pytest.approx(auc[False]["modified_entropy"], abs=1e-3)
    assert auc[False]["loss"] > 0.6
    out = reports[True].target["outputs"]
    assert (
        out["kind"] == "probabilities"
        and out["probe_rows"] == 400
        and "instead of applying softmax a second time" in out["note"]
    )
    assert reports[False].target["outputs"] == {"kind": "logits", "probe_rows": 400, "note": None}
    assert reports[True].target["accuracy"] == reports[False].target["accuracy"]
    # reference models of the softmax recipe train on the NLL of their probabilities (the grouped kernel: a Softmax
    # layer is no MLP-kernel activation) and score alike
    rmia = {s: next(a for a in rep.attacks if a.name == "rmia") for s, rep in reports.items()}
    assert rmia[True].extras["kernel"] == "grouped" and rmia[False].extras["kernel"] == "mlp"
    assert rmia[True].auc == pytest.approx(rmia[False].auc, abs=0.02) and rmia[True].auc > 0.6
    # what reading the probabilities as logits (softmax twice) would have given: a blunter loss attack
    x, y, member = data.pooled()
    with torch.no_grad():
        twice = outputs.log_proba(soft(torch.from_numpy(x)).double().numpy(), outputs.LOGITS)[np.arange(len(y)), y]
    assert stats.auc(twice[member], twice[~member]).value != pytest.approx(auc[True]["loss"], abs=1e-6)


# --------------------------------------------------------------------------- scikit-learn target, torch recipe


def test_sklearn_target_with_a_torch_recipe_warns():
    from cases import make_model, synthetic  # the tiny torch MLP of the other tests

    (xm, ym), (xn, yn), (xp, yp) = synthetic(150, 1, 0.3), synthetic(150, 2, 0.3), synthetic(150, 3, 0.3)
    target = Target(LogisticRegression(max_iter=500).fit(xm, ym), fmt="sklearn")
    rep = check_model(
        target,
        AuditData(Dataset(xm, ym), Dataset(xn, yn), Dataset(xp, yp)),
        policy("loss: {}, rmia: {models: 2}"),
        recipe=Recipe(make_model, epochs=5, batch_size=64, name="tiny-mlp"),
        seed=0,
        cache_dir="off",
    )
    (w,) = [w for w in rep.warnings if w.startswith("recipe mismatch")]
    assert "LogisticRegression" in w and "'tiny-mlp'" in w and "not trained like the target" in w
    rmia = next(a for a in rep.attacks if a.name == "rmia")
    assert rmia.status == "ran" and w in rmia.notes
    assert "outputs" not in rep.target and rep.target["accuracy"]["members"]["n"] == 150


def test_outputs_of_another_shape_are_bad_input(tmp_path):
    """A model whose rows are [2, 3] grids, not logits: exit 2, one sentence naming the file, no traceback."""
    torch.jit.save(
        torch.jit.script(nn.Sequential(nn.Linear(20, 6), nn.Unflatten(1, (2, 3)))), str(tmp_path / "grid.pt")
    )
    (xm, ym), (xn, yn) = binary_data(50, 1), binary_data(50, 2)
    np.savez(tmp_path / "m.npz", x=xm, y=ym)
    np.savez(tmp_path / "n.npz", x=xn, y=yn)
    r = run_cli("check", "grid.pt", "--policy", "internal", "--members", "m.npz", "--nonmembers", "n.npz", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "grid.pt: the model returned shape (2, 2, 3)" in r.stderr and "one logit per row" in r.stderr
    assert "Traceback" not in r.stderr
