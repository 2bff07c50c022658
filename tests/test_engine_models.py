"""Stackable models beyond MLPs: convolutions, BatchNorm, LayerNorm, dropout and embeddings, K at a time.

The sequential path (``recipe.train`` per model) is the reference: the same
seeds must give the same models up to float rounding — parameters, BatchNorm
running statistics and eval outputs — and, with dropout, the same masks.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from privgate import Recipe, train_model
from privgate.errors import RecipeError
from privgate.training.dropout import DropoutPlan
from privgate.training.engine import train_ensemble, train_models
from privgate.training.plan import dropout_seed, model_seeds, paired_masks
from privgate.training.trained import TrainSettings


class TokenModel(nn.Module):
    """Embeddings: a row is 5 token ids (stored as floats, as audit data are), averaged, LayerNorm, dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.norm = nn.LayerNorm(8)
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.drop(self.norm(self.emb(x.long()).mean(1))))


class FunctionalDropout(nn.Module):
    """Draws its own random numbers in forward (F.dropout): not stackable per model."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.dropout(self.a(x).relu(), 0.2, self.training))


def cnn(bias: bool = False) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=bias),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Dropout2d(0.25),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(36, 3),
    )


def bn_mlp(bias: bool = False) -> nn.Module:
    return nn.Sequential(nn.Linear(6, 12, bias=bias), nn.BatchNorm1d(12), nn.ReLU(), nn.Dropout(0.3), nn.Linear(12, 3))


def ln_mlp(bias: bool = True) -> nn.Module:
    return nn.Sequential(nn.Linear(6, 12), nn.LayerNorm(12), nn.GELU(), nn.Linear(12, 3))


RNG = np.random.default_rng(0)
Y = RNG.integers(0, 3, 90)
INPUTS = {
    "cnn-batchnorm2d-dropout2d": (cnn, RNG.normal(size=(90, 1, 6, 6)).astype(np.float32)),
    "mlp-batchnorm1d-dropout": (bn_mlp, RNG.normal(size=(90, 6)).astype(np.float32)),
    "mlp-layernorm-gelu": (ln_mlp, RNG.normal(size=(90, 6)).astype(np.float32)),
    "embedding-layernorm-dropout": (lambda bias=True: TokenModel(), RNG.integers(0, 20, (90, 5)).astype(np.float32)),
}


def _uneven_plan() -> tuple[np.ndarray, list[int]]:
    """Three models on 45, 45 and 53 rows: last batches of 13, 13 and 5 rows, run as two groups."""
    masks = paired_masks(90, 3, seed=1)
    masks[2] = True
    masks[2, :37] = False
    return masks, model_seeds(1, 3)


def _max_diff(a: list[dict], b: list[dict]) -> float:
    return max(float((sa[k].double() - sb[k].double()).abs().max()) for sa, sb in zip(a, b) for k in sa)


@pytest.mark.parametrize("kernel", ["auto", "vmap"])
@pytest.mark.parametrize("name", list(INPUTS))
@pytest.mark.parametrize(
    "optimiser",
    [{"optimizer": "adam"}, {"optimizer": "sgd", "momentum": 0.9, "weight_decay": 1e-3}],
    ids=["adam", "sgd-momentum-l2"],
)
def test_vectorised_models_equal_recipe_train(name, optimiser, kernel):
    """Parameters, BatchNorm running statistics and eval outputs: the sequential numbers up to float rounding.

    With Adam the layers before BatchNorm have no bias: BatchNorm removes the
    mean, so such a bias has a gradient of exactly zero in exact arithmetic and
    of rounding noise in floats, which Adam (dividing by its root mean square)
    turns into steps of size lr in either path. SGD has no such amplification
    and trains the biases too.
    """
    factory, x = INPUTS[name]
    bias = optimiser["optimizer"] == "sgd"
    recipe = Recipe(lambda: factory(bias=bias), epochs=3, batch_size=16, lr=1e-2, name=name, **optimiser)
    masks, seeds = _uneven_plan()
    vec = train_models(recipe, x, Y, masks, seeds, kernel=kernel)
    # auto: the grouped kernel for nn.Sequential stacks; embeddings and custom forwards go through vmap
    used = "vmap" if kernel == "vmap" or name.startswith("embedding") else "grouped"
    assert (vec.mode, vec.kernel, vec.notes) == ("vectorised", used, [])
    ref = [train_model(recipe, x[m], Y[m], seed=s) for m, s in zip(masks, seeds)]
    ref_states = [r.state_dict() for r in ref]
    assert set(vec.states[0]) == set(ref_states[0])  # running_mean/var and num_batches_tracked included
    assert _max_diff(vec.states, ref_states) < 1e-5
    if "batchnorm" in name:
        stats = [k for k in ref_states[0] if "running" in k or "num_batches" in k]
        assert stats and all(
            int(s[k]) == int(r[k]) for s, r in zip(vec.states, ref_states) for k in stats if "num" in k
        )
        assert int(vec.states[2][stats[-1]]) == 3 * 4  # 53 rows: 4 batches per epoch, its own count
    net = recipe.build()
    xt = torch.as_tensor(x)
    for state, model in zip(vec.states, ref):
        net.load_state_dict(state)
        with torch.no_grad():
            torch.testing.assert_close(net.eval()(xt), model.eval()(xt), rtol=1e-4, atol=1e-5)


def test_dropout_with_p_zero_trains_the_model_without_it():
    drop0 = Recipe(lambda: nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Dropout(0.0), nn.Linear(12, 3)), epochs=2)
    plain = dataclasses.replace(
        drop0, model_factory=lambda: nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    )
    x = INPUTS["mlp-layernorm-gelu"][1]
    masks, seeds = _uneven_plan()
    a = train_models(drop0, x, Y, masks, seeds, kernel="vmap").states
    b = [train_model(plain, x[m], Y[m], seed=s).state_dict() for m, s in zip(masks, seeds)]
    renamed = [{k.replace("3.", "2.") if k.startswith("3.") else k: v for k, v in s.items()} for s in a]
    assert _max_diff(renamed, b) < 1e-6


def test_a_dropout_model_does_not_depend_on_the_models_trained_beside_it():
    """Model k's masks come from its own seed: trained in a group of 4, alone, or by recipe.train — the same model."""
    factory, x = INPUTS["cnn-batchnorm2d-dropout2d"]
    recipe = Recipe(factory, epochs=2, batch_size=16, lr=1e-2)
    masks, seeds = paired_masks(90, 4, seed=5), model_seeds(5, 4)
    group = train_models(recipe, x, Y, masks, seeds).states
    alone = train_models(recipe, x, Y, masks[2:3], seeds[2:3], kernel="vmap").states
    assert _max_diff(group[2:3], alone) < 1e-6
    other_seed = train_models(recipe, x, Y, masks[2:3], [seeds[2] + 1]).states
    assert _max_diff(alone, other_seed) > 1e-3  # another seed: other masks (and init), another model


def test_dropout_masks_follow_their_law_independently_per_model():
    """keep ~ Bernoulli(1 − p), scaled by 1/(1 − p); independent across models; Dropout2d: one draw per channel."""
    p = 0.3
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Dropout2d(p), nn.Flatten(), nn.Dropout(p), nn.Linear(16, 2))
    seeds = [dropout_seed(s) for s in range(16)]
    plan = DropoutPlan(net, torch.zeros(2, 1, 4, 4), seeds)
    masks = plan.masks(list(range(16)), 64, torch.device("cpu"))
    channel, element = masks["1.mask"], masks["3.mask"]
    assert channel.shape == (16, 64, 4, 1, 1) and element.shape == (16, 64, 16)
    for m in (channel, element):
        assert torch.unique(m).tolist() == pytest.approx([0.0, 1 / (1 - p)])
    keep = (element > 0).double()
    n = keep.numel()  # 16 384 draws: the kept fraction is within 4 standard errors of 1 − p
    assert abs(float(keep.mean()) - (1 - p)) < 4 * np.sqrt(p * (1 - p) / n)
    # independence across models: two models agree on a position with probability p² + (1 − p)² = 0.58
    agree = float((keep[0] == keep[1]).double().mean())
    assert abs(agree - (p**2 + (1 - p) ** 2)) < 4 * np.sqrt(0.58 * 0.42 / keep[0].numel())
    again = DropoutPlan(net, torch.zeros(2, 1, 4, 4), seeds).masks([3], 64, torch.device("cpu"))
    assert torch.equal(again["3.mask"][0], element[3])  # a model's masks depend on its own seed only


def test_recipe_train_with_dropout_is_deterministic_and_leaves_the_global_generator_alone():
    factory, x = INPUTS["mlp-batchnorm1d-dropout"]
    recipe = Recipe(factory, epochs=2, batch_size=16)
    before = torch.random.get_rng_state()
    a = train_model(recipe, x, Y, seed=3).state_dict()
    assert torch.equal(torch.random.get_rng_state(), before)
    b = train_model(recipe, x, Y, seed=3).state_dict()
    assert _max_diff([a], [b]) == 0.0


def test_random_draws_outside_dropout_layers_are_trained_one_at_a_time():
    recipe = Recipe(FunctionalDropout, epochs=2, batch_size=16, name="noisy")
    x = INPUTS["mlp-layernorm-gelu"][1]
    masks, seeds = _uneven_plan()
    out = train_models(recipe, x, Y, masks, seeds)
    assert (out.mode, out.kernel) == ("sequential", "loop")
    assert "draws random numbers in training outside nn.Dropout" in out.notes[0]
    assert _max_diff(out.states, train_models(recipe, x, Y, masks, seeds).states) == 0.0  # seeded, deterministic
    with pytest.raises(RecipeError, match="engine 'vectorised' cannot train this model: the model draws random"):
        train_ensemble(recipe, x, Y, masks, seeds, TrainSettings(engine="vectorised"))


def test_batchnorm_without_momentum_falls_back_with_a_reason():
    recipe = Recipe(
        lambda: nn.Sequential(nn.Linear(6, 8, bias=False), nn.BatchNorm1d(8, momentum=None), nn.Linear(8, 3)), epochs=1
    )
    x = INPUTS["mlp-layernorm-gelu"][1]
    out = train_models(recipe, x, Y, *_uneven_plan())
    assert out.mode == "sequential" and "vectorised engine failed on this model" in out.notes[0]


def test_cache_entries_are_shared_by_the_engines_when_they_train_the_same_model(tmp_path):
    """Plain recipes (dropout and BatchNorm included): a model trained vectorised is loaded by a sequential run."""
    factory, x = INPUTS["cnn-batchnorm2d-dropout2d"]
    recipe = Recipe(factory, epochs=2, batch_size=16, name="cnn")
    masks, seeds = paired_masks(90, 2, 0), model_seeds(0, 2)
    first = train_ensemble(recipe, x, Y, masks, seeds, TrainSettings(cache_dir=tmp_path, engine="vectorised"))
    assert (first.trained, first.mode, first.kernel) == (2, "vectorised", "grouped")
    second = train_ensemble(recipe, x, Y, masks, seeds, TrainSettings(cache_dir=tmp_path, engine="sequential"))
    assert (second.trained, second.cached) == (0, 2)
    fresh = train_ensemble(recipe, x, Y, masks, seeds, TrainSettings(engine="sequential"))
    assert _max_diff(second.models, fresh.models) < 1e-5  # what was loaded is what sequential training gives


def test_cache_entries_of_different_random_streams_are_kept_apart(tmp_path):
    """A DP-SGD recipe: the MLP kernel's noise and Opacus' differ beyond rounding, so neither loads the other's."""
    from privgate.dp.recipe import DPRecipe

    recipe = DPRecipe(
        lambda: nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)),
        epochs=1,
        batch_size=16,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        name="dp",
    )
    x = INPUTS["mlp-layernorm-gelu"][1]
    masks, seeds = paired_masks(90, 2, 0), model_seeds(0, 2)
    vec = train_ensemble(recipe, x, Y, masks, seeds, TrainSettings(cache_dir=tmp_path))
    assert (vec.trained, vec.kernel) == (2, "mlp-dp")
    seq = train_ensemble(recipe, x, Y, masks, seeds, TrainSettings(cache_dir=tmp_path, engine="sequential"))
    assert (seq.trained, seq.kernel) == (2, "loop")
    assert (
        train_ensemble(recipe, x, Y, masks, seeds, TrainSettings(cache_dir=tmp_path, engine="sequential")).trained == 0
    )
    assert train_ensemble(recipe, x, Y, masks, seeds, TrainSettings(cache_dir=tmp_path)).trained == 0


# --------------------------------------------------------------------------- the grouped kernel's layers

GROUPED = {
    "unflatten-conv1d-groupnorm-silu-maxpool1d": (
        lambda: nn.Sequential(
            nn.Unflatten(1, (2, 18)), nn.Conv1d(2, 4, 3), nn.GroupNorm(2, 4), nn.SiLU(), nn.MaxPool1d(2),
            nn.Flatten(), nn.Linear(32, 3),
        ),
        (36,),
    ),
    "conv-groups2-batchnorm-leakyrelu-adaptive-logsoftmax": (
        lambda: nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding="same", groups=2, bias=False),
            nn.BatchNorm2d(4, momentum=0.2), nn.LeakyReLU(0.1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(4, 3), nn.LogSoftmax(dim=1),
        ),
        (1, 6, 6),
    ),
    "batchnorm1d-flat-dropout-layernorm-tanh": (
        lambda: nn.Sequential(
            nn.Linear(6, 12, bias=False), nn.BatchNorm1d(12, affine=False), nn.Dropout(0.2), nn.LayerNorm(12),
            nn.Tanh(), nn.Linear(12, 3),
        ),
        (6,),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(GROUPED))
def test_grouped_kernel_layers_equal_recipe_train(name):
    factory, row = GROUPED[name]
    x = np.random.default_rng(2).normal(size=(90, *row)).astype(np.float32)
    recipe = Recipe(factory, epochs=2, batch_size=16, lr=1e-2, optimizer="sgd", momentum=0.9, name=name)
    masks, seeds = _uneven_plan()
    vec = train_models(recipe, x, Y, masks, seeds, kernel="grouped")
    assert (vec.mode, vec.kernel) == ("vectorised", "grouped")
    ref = [train_model(recipe, x[m], Y[m], seed=s).state_dict() for m, s in zip(masks, seeds)]
    assert _max_diff(vec.states, ref) < 1e-5


@pytest.mark.parametrize(
    "model, row, reason",
    [
        (lambda: TokenModel(), (5,), "not a plain nn.Sequential"),
        (lambda: nn.Sequential(nn.Embedding(20, 4), nn.Flatten(), nn.Linear(20, 3)), (5,), "Embedding"),
        (lambda: nn.Sequential(nn.Linear(6, 8, bias=False), nn.BatchNorm1d(8, momentum=None)), (6,), "momentum"),
        (lambda: nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect")), (1, 6, 6), "padding mode"),
        (lambda: nn.Sequential(nn.Flatten(), nn.Conv2d(1, 2, 3)), (1, 6, 6), "does not fit"),
        (lambda: nn.Sequential(nn.Linear(6, 3), nn.LayerNorm(3, elementwise_affine=True)), (1, 6), "unflattened"),
    ],
)
def test_grouped_kernel_declines_what_it_cannot_run(model, row, reason):
    from privgate.training import grouped

    layout, why = grouped.plan(model(), row)
    assert layout is None and reason in why


def _conv_relu_maxpool() -> nn.Module:
    """Issue 24's pattern, small: conv + BatchNorm + ReLU right before a max-pooling, then a linear layer.

    No bias before BatchNorm: its gradient is rounding noise, which Adam would turn into lr-sized steps.
    """
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 8 * 8, 3),
    )  # fmt: skip


def test_grouped_kernel_in_calls_of_fewer_models_trains_the_same_models(monkeypatch):
    """ReLU moved after the max-pooling, channels-last gradients, 2 of 8 models per call: recipe.train's models.

    One model's largest activation of a batch is 64 rows × 16·16·16 floats = 1 MiB, so the CPU default runs
    2 models per call (each call's backward pass right after its forward pass); with the limit raised, all 8
    at once — the same models either way, up to float rounding.
    """
    from privgate.training import grouped

    x = np.random.default_rng(3).normal(size=(90, 1, 16, 16)).astype(np.float32)
    recipe = Recipe(_conv_relu_maxpool, epochs=2, batch_size=64, lr=1e-2, optimizer="adam", name="conv-relu-pool")
    masks, seeds = paired_masks(90, 8, seed=2), model_seeds(2, 8)
    masks[7, :30] = False  # one model on fewer rows: a group of its own in the last step
    assert grouped.models_per_call(recipe.build(), torch.as_tensor(x[:1]), 64, 8, "cpu") == 2
    split = train_models(recipe, x, Y, masks, seeds, kernel="grouped")
    monkeypatch.setattr(grouped, "CALL_BYTES", 1 << 30)
    assert grouped.models_per_call(recipe.build(), torch.as_tensor(x[:1]), 64, 8, "cpu") == 8
    whole = train_models(recipe, x, Y, masks, seeds, kernel="grouped")
    assert (split.kernel, whole.kernel) == ("grouped", "grouped")
    # oneDNN's convolutions of 2 and of 8 groups round differently: the same models up to float rounding
    assert _max_diff(split.states, whole.states) < 1e-6
    ref = [train_model(recipe, x[m], Y[m], seed=s).state_dict() for m, s in zip(masks, seeds)]
    assert max(_max_diff(split.states, ref), _max_diff(whole.states, ref)) < 1e-5
