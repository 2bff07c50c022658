"""The closed-form MLP kernel: which models it takes, gradients equal autograd's, training equals recipe.train."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap

from privgate import stacked
from privgate.ensemble import model_seeds, paired_masks, train_models
from privgate.recipe import Recipe


def _mlp(act: nn.Module | None, bias: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(5, 7, bias=bias)]
    if act is not None:
        layers.append(act)
    layers += [nn.Linear(7, 6), nn.Identity(), nn.Dropout(0.0), nn.Tanh(), nn.Linear(6, 3, bias=bias)]
    return nn.Sequential(*layers)


@pytest.mark.parametrize(
    "act", [nn.Tanh(), nn.ReLU(), nn.Sigmoid(), nn.LeakyReLU(0.1), None], ids=["tanh", "relu", "sigmoid", "leaky", "linear"]
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
    ids=["conv", "batchnorm", "dropout", "gelu", "logsoftmax", "softmax", "final-act", "leaky-neg", "flatten-dims", "bare"],
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
    assert [(layer.weight, layer.activation) for layer in the_plan.layers] == [("1.0.weight", "relu"), ("2.0.weight", None)]


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
        ref = recipe.train(x[m], y[m], seed=s).state_dict()
        assert max(float((state[n] - ref[n]).abs().max()) for n in ref) < 1e-5


def _gelu_model() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 3))


def _patched_model() -> nn.Module:
    net = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    plain = net.forward
    net.forward = lambda x: plain(x) * 0.5  # an instance-level forward the plan cannot see
    return net


def test_auto_uses_vmap_when_the_mlp_kernel_does_not_fit():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(60, 6)).astype(np.float32), rng.integers(0, 3, 60)
    recipe = Recipe(_gelu_model, epochs=2, batch_size=16, lr=1e-2, name="gelu")
    masks, seeds = paired_masks(len(x), 2, 0), model_seeds(0, 2)
    out = train_models(recipe, x, y, masks, seeds)
    assert (out.mode, out.kernel, out.notes) == ("vectorised", "vmap", [])
    ref = recipe.train(x[masks[0]], y[masks[0]], seed=seeds[0]).state_dict()
    assert max(float((out.states[0][n] - ref[n]).abs().max()) for n in ref) < 1e-5
    forced = train_models(recipe, x, y, masks, seeds, kernel="mlp")  # forcing the kernel: sequential, and says why
    assert forced.mode == "sequential" and "MLP kernel cannot train this model" in forced.notes[0]


def test_a_forward_patched_on_the_instance_is_trained_one_model_at_a_time():
    """Neither kernel can see an instance-level forward: both notice, and recipe.train does the work."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(60, 6)).astype(np.float32), rng.integers(0, 3, 60)
    recipe = Recipe(_patched_model, epochs=2, batch_size=16, lr=1e-2, name="patched")
    masks, seeds = paired_masks(len(x), 2, 0), model_seeds(0, 2)
    out = train_models(recipe, x, y, masks, seeds)
    assert out.mode == "sequential" and "patched on the instance" in out.notes[0]
    ref = recipe.train(x[masks[1]], y[masks[1]], seed=seeds[1]).state_dict()
    assert max(float((out.states[1][n] - ref[n]).abs().max()) for n in ref) == 0.0
