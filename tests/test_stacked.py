"""The closed-form MLP kernel: which models it takes, gradients equal autograd's, training equals recipe.train."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap

from privgate import Recipe, train_model
from privgate.training import mlp as stacked
from privgate.training.engine import train_models
from privgate.training.plan import model_seeds, paired_masks


def _mlp(act: nn.Module | None, bias: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(5, 7, bias=bias)]
    if act is not None:
        layers.append(act)
    layers += [nn.Linear(7, 6), nn.Identity(), nn.Dropout(0.0), nn.Tanh(), nn.Linear(6, 3, bias=bias)]
    return nn.Sequential(*layers)


@pytest.mark.parametrize(
    "act",
    [nn.Tanh(), nn.ReLU(), nn.Sigmoid(), nn.LeakyReLU(0.1), None],
    ids=["tanh", "relu", "sigmoid", "leaky", "linear"],
)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_gradients_equal_autograd(act, bias):
    """Per model, with padded rows of weight 0 and a short batch weighted 1/len: the same gradient as autograd."""
    torch.manual_seed(0)
    k, b = 4, 8
    nets = [_mlp(act, bias) for _ in range(k)]
    the_plan, why = stacked.plan(nets[0])
    assert the_plan is not None, why
    params, _ = stack_module_state(nets)
    names = list(params)
    p = [params[n].detach().clone() for n in names]
    x, y = torch.randn(30, 5), torch.randint(0, 3, (30,))
    idx = torch.randint(0, 30, (k, b))
    w = torch.full((k, b), 1.0 / b)
    w[1, 5:] = 0.0
    w[1, :5] = 1.0 / 5  # a short last batch, padded
    w[3] = 0.0  # an idle model

    kernel = stacked.StackedMLP(the_plan, names, k, b, x, y)
    mine = [t.clone() for t in kernel.unpack(kernel.grads(kernel.pack(p), idx, w))]

    base = nets[0]

    def loss(theta, xb, yb, wb):  # noqa: ANN001, ANN202
        out = functional_call(base, dict(zip(names, theta)), (xb,))
        return (nn.functional.cross_entropy(out, yb, reduction="none") * wb).sum()

    ref = vmap(grad(loss))(p, x[idx], y[idx], w)
    for n, a, r in zip(names, mine, ref):
        assert a.shape == r.shape, n
        torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-6, msg=n)
    assert all(float(t[3].abs().max()) == 0.0 for t in mine)  # weight 0 everywhere: no gradient


@pytest.mark.parametrize(
    "model, reason",
    [
        (nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten(), nn.Linear(4, 2)), "not supported"),
        (nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)), "buffers"),
        (nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2)), "Dropout"),
        (nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2)), "GELU"),
        (nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2), nn.LogSoftmax(-1)), "LogSoftmax"),
        (nn.Sequential(nn.Linear(4, 2), nn.Softmax(-1)), "Softmax"),
        (nn.Sequential(nn.Linear(4, 2), nn.Sigmoid()), "last Linear"),
        (nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(-0.5), nn.Linear(8, 2)), "slope"),
        (nn.Sequential(nn.Flatten(start_dim=2), nn.Linear(4, 2)), "Flatten"),
        (nn.Linear(4, 2), "not a plain nn.Sequential"),
    ],
    ids=[
        "conv",
        "batchnorm",
        "dropout",
        "gelu",
        "logsoftmax",
        "softmax",
        "final-act",
        "leaky-neg",
        "flatten-dims",
        "bare",
    ],
)
def test_plan_declines_what_it_cannot_run(model, reason):
    the_plan, why = stacked.plan(model)
    assert the_plan is None and reason in why


def test_plan_declines_custom_forward_and_hooks():
    class Skip(nn.Sequential):
        def forward(self, x):  # noqa: ANN001, ANN201
            return super().forward(x) + x[:, :2]

    assert stacked.plan(Skip(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)))[0] is None
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    net[0].register_forward_hook(lambda m, i, o: o * 2)
    assert "hooks" in stacked.plan(net)[1]


def test_plan_reads_nested_sequentials_and_flatten():
    net = nn.Sequential(nn.Flatten(), nn.Sequential(nn.Linear(12, 8), nn.ReLU()), nn.Sequential(nn.Linear(8, 3)))
    the_plan, _ = stacked.plan(net)
    assert the_plan is not None and the_plan.flatten and the_plan.in_features == 12
    assert [(layer.weight, layer.activation) for layer in the_plan.layers] == [
        ("1.0.weight", "relu"),
        ("2.0.weight", None),
    ]


def _flat_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 10), nn.ReLU(), nn.Linear(10, 10), nn.Sigmoid(), nn.Linear(10, 3))


def test_mlp_kernel_trains_like_recipe_train_with_image_shaped_inputs():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(70, 3, 4)).astype(np.float32), rng.integers(0, 3, 70)
    recipe = Recipe(_flat_model, epochs=3, batch_size=16, lr=1e-2, name="flat")
    masks, seeds = paired_masks(len(x), 2, 0), model_seeds(0, 2)
    out = train_models(recipe, x, y, masks, seeds)
    assert (out.mode, out.kernel) == ("vectorised", "mlp")
    for state, m, s in zip(out.states, masks, seeds):
        ref = train_model(recipe, x[m], y[m], seed=s).state_dict()
        assert max(float((state[n] - ref[n]).abs().max()) for n in ref) < 1e-5


def _gelu_model() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 3))


def _patched_model() -> nn.Module:
    net = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    plain = net.forward
    net.forward = lambda x: plain(x) * 0.5  # an instance-level forward the plan cannot see
    return net


def _two_models(factory, name: str, **kw):  # noqa: ANN001, ANN202
    """Two models of a small recipe trained by the engine, with what recipe.train gives for each."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(60, 6)).astype(np.float32), rng.integers(0, 3, 60)
    recipe = Recipe(factory, epochs=2, batch_size=16, lr=1e-2, name=name)
    masks, seeds = paired_masks(len(x), 2, 0), model_seeds(0, 2)
    out = train_models(recipe, x, y, masks, seeds, **kw)
    refs = [train_model(recipe, x[m], y[m], seed=s).state_dict() for m, s in zip(masks, seeds)]
    gap = max(float((st[n] - ref[n]).abs().max()) for st, ref in zip(out.states, refs) for n in ref)
    return out, gap


def test_auto_uses_the_grouped_kernel_when_the_mlp_kernel_does_not_fit():
    out, gap = _two_models(_gelu_model, "gelu")
    assert (out.mode, out.kernel, out.notes) == ("vectorised", "grouped", []) and gap < 1e-5
    general, gap = _two_models(_gelu_model, "gelu", kernel="vmap")
    assert (general.mode, general.kernel) == ("vectorised", "vmap") and gap < 1e-5
    forced, _ = _two_models(_gelu_model, "gelu", kernel="mlp")  # forcing the kernel: sequential, and says why
    assert forced.mode == "sequential" and "MLP kernel cannot train this model" in forced.notes[0]


def test_a_forward_patched_on_the_instance_is_trained_one_model_at_a_time():
    """Neither kernel can see an instance-level forward: both notice, and recipe.train does the work."""
    out, gap = _two_models(_patched_model, "patched")
    assert out.mode == "sequential" and "patched on the instance" in out.notes[0] and gap == 0.0


# --------------------------------------------------------------------------- DP-SGD on the kernel


def _per_example_clipped_sum(net: nn.Module, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, clip: float) -> dict:
    """The definition: every row's own gradient, clipped to ``clip`` as Opacus does, summed with weights ``w``."""
    names = [n for n, _ in net.named_parameters()]
    params = {n: t.detach() for n, t in net.named_parameters()}

    def loss(theta, xi, yi):  # noqa: ANN001, ANN202
        return nn.functional.cross_entropy(functional_call(net, theta, (xi[None],)), yi[None])

    per = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    norms = torch.sqrt(sum(per[n].reshape(len(x), -1).square().sum(1) for n in names))
    factor = (clip / (norms + 1e-6)).clamp(max=1.0) * w
    return {n: torch.einsum("b,b...->...", factor, per[n]) for n in names}


@pytest.mark.parametrize("clip", [1e3, 0.5, 0.01], ids=["unclipped", "some-clipped", "all-clipped"])
def test_clipped_gradient_equals_per_example_clipping(clip):
    torch.manual_seed(3)
    k, b = 3, 10
    nets = [nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 4)) for _ in range(k)]
    the_plan, _ = stacked.plan(nets[0])
    params, _ = stack_module_state(nets)
    names = list(params)
    p = [params[n].detach().clone() for n in names]
    x, y = torch.randn(40, 5) * 3, torch.randint(0, 4, (40,))
    idx = torch.randint(0, 40, (k, b))
    w = (torch.rand(k, b) < 0.7).float()  # drawn rows and padding
    scale = torch.tensor([1 / 7, 1 / 8, 1 / 9])
    kernel = stacked.StackedMLP(the_plan, names, k, b, x, y)
    mine = kernel.unpack(kernel.clipped_grads(kernel.pack(p), idx, w, clip, scale))
    for m, net in enumerate(nets):
        ref = _per_example_clipped_sum(net, x[idx[m]], y[idx[m]], w[m], clip)
        for j, n in enumerate(names):
            torch.testing.assert_close(mine[j][m], ref[n] * scale[m], rtol=1e-4, atol=1e-6, msg=f"model {m} {n}")


def _dp_recipe(sigma: float, epochs: int = 3, factory=None):  # noqa: ANN001, ANN202
    from privgate.dp.recipe import DPRecipe

    return DPRecipe(
        factory or (lambda: nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))),
        epochs=epochs,
        batch_size=16,
        lr=1e-2,
        name="dp-tiny",
        noise_multiplier=sigma,
        max_grad_norm=0.5,
        steps_per_epoch=4,
    )


def test_dp_noise_and_poisson_sampling_follow_the_mechanism():
    """Poisson batches with rate q = 1/steps; noise of std σC / int(n q) per coordinate, per model."""
    from privgate.training.dp_step import dp_step

    recipe = _dp_recipe(sigma=2.0)
    dp = recipe.dp_sgd
    assert (dp.steps(90), dp.expected_batch(90)) == (4, 22) and (dp.steps(100), dp.expected_batch(100)) == (4, 25)
    nets = [recipe.build() for _ in range(2)]
    params, _ = stack_module_state(nets)
    names = list(params)
    kernel = stacked.StackedMLP(stacked.plan(nets[0])[0], names, 2, 1, torch.randn(190, 6), torch.randint(0, 3, (190,)))
    p = kernel.pack([params[n].detach().clone() for n in names])
    rows = [torch.arange(90), torch.arange(90, 190)]
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    grad_fn, schedule = dp_step(kernel, dp, rows, gens, [1, 2], p)
    drawn = np.zeros(190)
    batches = 0
    for _ in range(200):
        idx, w, active = schedule()
        assert idx.shape[:2] == (4, 2) and active.all()
        for s in range(4):
            for m in range(2):
                np.add.at(drawn, idx[s, m][w[s, m] > 0].numpy(), 1)
        batches += 4
    assert abs(drawn.mean() / batches - 0.25) < 0.01  # every row in a quarter of the batches
    assert set(np.unique(w.numpy())) <= {0.0, 1.0} and idx[0, 0][w[0, 0] > 0].max() < 90 <= idx[0, 1][w[0, 1] > 0].min()
    noise = grad_fn(p, torch.zeros_like(idx[0]), torch.zeros_like(w[0]))  # nothing drawn: the update is pure noise
    for m, expected in enumerate((2.0 * 0.5 / 22, 2.0 * 0.5 / 25)):
        flat = torch.cat([t[m].flatten() for t in noise])
        assert (
            abs(float(flat.std()) / expected - 1) < 0.05 and abs(float(flat.mean())) < 3 * expected / len(flat) ** 0.5
        )


def test_dp_recipe_reference_models_are_vectorised_and_train_like_opacus():
    rng = np.random.default_rng(4)
    centres = rng.normal(0, 2, (3, 6))
    y = rng.integers(0, 3, 240)
    x = (centres[y] + rng.normal(size=(240, 6))).astype(np.float32)
    recipe = _dp_recipe(sigma=0.8, epochs=6)
    masks, seeds = paired_masks(len(x), 4, 0), model_seeds(0, 4)
    vec = train_models(recipe, x, y, masks, seeds)
    seq = train_models(recipe, x, y, masks, seeds, vectorise=False)  # Opacus, one model at a time
    assert (vec.mode, vec.kernel, vec.notes) == ("vectorised", "mlp-dp", []) and seq.kernel == "loop"
    net = recipe.build()

    def accuracy(state: dict, rows: np.ndarray) -> float:
        net.load_state_dict(state)
        with torch.no_grad():
            return float((net(torch.as_tensor(x[rows])).argmax(1).numpy() == y[rows]).mean())

    a_vec = np.mean([accuracy(s, ~m) for s, m in zip(vec.states, masks)])
    a_seq = np.mean([accuracy(s, ~m) for s, m in zip(seq.states, masks)])
    assert a_vec > 0.6 and abs(a_vec - a_seq) < 0.05, (a_vec, a_seq)
    # a model depends on its own seed only (up to the rounding of products padded to another batch width)
    again = train_models(recipe, x, y, masks[:2], seeds[:2])
    assert max(float((a[n] - b[n]).abs().max()) for a, b in zip(again.states, vec.states[:2]) for n in a) < 1e-4


def test_dp_recipe_of_another_architecture_is_trained_one_model_at_a_time():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(60, 6)).astype(np.float32), rng.integers(0, 3, 60)
    recipe = _dp_recipe(sigma=1.0, epochs=1, factory=_gelu_model)
    out = train_models(recipe, x, y, paired_masks(len(x), 2, 0), model_seeds(0, 2))
    assert out.mode == "sequential" and "DP-SGD is vectorised for MLPs only" in out.notes[0] and "GELU" in out.notes[0]
