"""White-box membership inference from per-example gradients (Nasr, Shokri & Houmansadr 2019, arXiv 1812.00910).

Members have smaller loss gradients. Per audit example the attack computes the per-layer norms
gₗ = ‖∇_{θₗ} ℓ‖₂ and their total: in closed form for a plain MLP (ghost norms), else vectorised with
``torch.func`` (a loop where it cannot transform the module).
``mode``: ``norm`` scores −‖∇_θ ℓ‖₂ (weights only); ``classifier`` is a logistic regression over (log gₗ, log ℓ)
trained on ``n_reference`` reference models fitted on population halves; ``auto`` (default) is ``classifier`` when
a recipe and ``2 × MIN_REFERENCE`` population rows are available, else ``norm``. Details:
``docs/whitebox.md``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate import outputs
from privgate.attacks.base import Attack, AttackContext, AttackResult, AttackSkipped
from privgate.device import device_of
from privgate.errors import shown
from privgate.threads import native_threads

if TYPE_CHECKING:
    # torch is imported when the attack runs, so validating a policy does not load it
    import torch
    from torch import nn

    from privgate.attacks.budget import CostFacts
    from privgate.training.mlp import Plan

#: Fewest population rows per reference-model half for the classifier mode.
MIN_REFERENCE = 20
_FLOATS_PER_BATCH = 32_000_000  # ~128 MiB of per-example gradients per vmap batch
_TINY = 1e-12


def _layer_of(param_name: str) -> str:
    return param_name.rsplit(".", 1)[0] if "." in param_name else param_name


def _layers(module: nn.Module) -> OrderedDict[str, list[str]]:
    groups: OrderedDict[str, list[str]] = OrderedDict()
    for name, p in module.named_parameters():
        if p.requires_grad:
            groups.setdefault(_layer_of(name), []).append(name)
    return groups


def _per_example_sq_norms_vmap(
    module: nn.Module, x: torch.Tensor, y: torch.Tensor, names: list[str], kind: outputs.Kind
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch
    from torch.func import functional_call, grad_and_value, vmap

    params = {k: v.detach() for k, v in module.named_parameters() if k in set(names)}
    buffers = {k: v.detach() for k, v in module.named_buffers()}

    def loss_of(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(module, (p, buffers), (xi.unsqueeze(0),))
        if isinstance(out, (tuple, list)):
            out = out[0]
        return outputs.nll(out, yi.unsqueeze(0), kind)

    grads, loss = vmap(grad_and_value(loss_of), in_dims=(None, 0, 0))(params, x, y)
    sq = torch.stack([grads[k].reshape(len(x), -1).pow(2).sum(dim=1) for k in names], dim=1)
    return sq, loss


def _per_example_sq_norms_ghost(
    module: nn.Module, mlp: Plan, x: torch.Tensor, y: torch.Tensor, names: list[str], kind: outputs.Kind
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same squared norms for a plain MLP (:func:`privgate.training.mlp.plan`), no per-example gradient made.

    Row i's weight gradient of a Linear layer is the outer product ``δᵢ aᵢᵀ`` of its output gradient and its
    input, so ``‖·‖² = ‖δᵢ‖² ‖aᵢ‖²`` and the bias's is ``‖δᵢ‖²`` (the "ghost norm": Goodfellow 2015, arXiv
    1510.01799); one backward pass of the summed loss gives every row's δ, as rows do not interact.
    """
    import torch
    from torch.nn import functional as F

    acts = {"tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid}
    h = x.reshape(len(x), -1) if mlp.flatten else x
    inputs, pre = [], []
    with torch.enable_grad():
        for layer in mlp.layers:
            w = module.get_parameter(layer.weight).detach()
            b = module.get_parameter(layer.bias).detach() if layer.bias else None
            inputs.append(h.detach())
            z = F.linear(h, w, b)
            if not z.requires_grad:  # the first layer: its input is data
                z.requires_grad_()
            pre.append(z)
            if layer.activation == "leaky_relu":
                h = F.leaky_relu(z, layer.slope)
            else:
                h = acts[layer.activation](z) if layer.activation else z
        loss = outputs.nll(h, y, kind, reduction="none")
        deltas = torch.autograd.grad(loss.sum(), pre)
    sq: dict[str, torch.Tensor] = {}
    for layer, a, d in zip(mlp.layers, inputs, deltas):
        d2 = d.pow(2).sum(dim=1)
        sq[layer.weight] = d2 * a.pow(2).sum(dim=1)
        if layer.bias:
            sq[layer.bias] = d2
    return torch.stack([sq[k] for k in names], dim=1), loss.detach()


def _per_example_sq_norms_loop(
    module: nn.Module, x: torch.Tensor, y: torch.Tensor, names: list[str], kind: outputs.Kind
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    params = dict(module.named_parameters())
    chosen = [params[k] for k in names]
    copies = [k for k, p in zip(names, chosen) if not p.is_leaf]
    if copies:  # a gradient read off a copy of a parameter is not the model's (privgate.inputs.target.to_device)
        raise RuntimeError(f"parameter(s) {', '.join(copies[:3])} of the model are not leaf tensors")
    rows, losses = [], []
    for i in range(len(x)):
        out = module(x[i : i + 1])
        if isinstance(out, (tuple, list)):
            out = out[0]
        loss = outputs.nll(out, y[i : i + 1], kind)
        gs = torch.autograd.grad(loss, chosen, allow_unused=True)
        rows.append(torch.stack([g.pow(2).sum() if g is not None else torch.zeros((), device=x.device) for g in gs]))
        losses.append(loss.detach())
    return torch.stack(rows), torch.stack(losses)


def gradient_features(
    module: nn.Module, x: np.ndarray, y: np.ndarray, kind: outputs.Kind = outputs.LOGITS
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per-example per-layer gradient norms and losses of ``module`` on (x, y).

    The loss is the negative log-likelihood of the label under the outputs read
    as ``kind`` (:mod:`privgate.outputs`): cross-entropy of logits,
    BCE-with-logits of one logit, NLL of probabilities.

    Returns:
        (norms [n, L] — ‖∇ℓ‖₂ per layer, losses [n], layer names). The total
        norm is ``sqrt((norms ** 2).sum(axis=1))``.
    """
    import torch

    from privgate.training.mlp import plan

    groups = _layers(module)
    names = [n for members in groups.values() for n in members]
    if not names:
        raise AttackSkipped("the model has no trainable parameters, so there are no gradients to attack")
    n_params = sum(p.numel() for k, p in module.named_parameters() if k in set(names))
    batch = int(max(1, min(512, _FLOATS_PER_BATCH // max(n_params, 1))))
    was_training = module.training
    module.eval()
    device = device_of(module)  # the target's device (privgate.device): the rows go there
    # a plain MLP has its norms in closed form; TorchScript cannot go through torch.func, nor can modules with
    # autograd hooks (e.g. left by Opacus)
    mlp = None if isinstance(module, torch.jit.ScriptModule) else plan(module)[0]
    looped = isinstance(module, torch.jit.ScriptModule)
    sq_parts, loss_parts = [], []
    try:
        for start in range(0, len(x), batch):
            xb = torch.as_tensor(np.asarray(x[start : start + batch]), dtype=torch.float32).to(device)
            yb = torch.as_tensor(np.asarray(y[start : start + batch]), dtype=torch.long).to(device)
            if mlp is not None:
                sq, loss = _per_example_sq_norms_ghost(module, mlp, xb, yb, names, kind)
            elif not looped:
                try:
                    sq, loss = _per_example_sq_norms_vmap(module, xb, yb, names, kind)
                except RuntimeError:
                    looped = True
            if looped and mlp is None:
                sq, loss = _per_example_sq_norms_loop(module, xb, yb, names, kind)
            sq_parts.append(sq.detach().double().cpu())
            loss_parts.append(loss.detach().double().cpu())
    finally:
        module.train(was_training)
    sq_all = torch.cat(sq_parts).numpy()
    index = {n: i for i, n in enumerate(names)}
    per_layer = np.stack([sq_all[:, [index[n] for n in members]].sum(axis=1) for members in groups.values()], axis=1)
    return np.sqrt(per_layer), torch.cat(loss_parts).numpy(), list(groups)


def _features(norms: np.ndarray, loss: np.ndarray) -> np.ndarray:
    return np.column_stack([np.log(norms + _TINY), np.log(loss + _TINY)])


class GradientAttack(Attack):
    """Gradient-norm membership inference (Nasr, Shokri & Houmansadr 2019, arXiv 1812.00910).

    score = −‖∇_θ ℓ(x, y)‖₂ (mode ``norm``), or the log-odds of a logistic
    attack model over (log per-layer gradient norms, log loss) trained on
    reference models of the recipe (mode ``classifier``). See the module
    docstring.

    Options:
        mode: ``auto`` | ``norm`` | ``classifier``.
        n_reference: reference models for ``classifier`` (each on a random half of the population).
        class_dependent: one threshold per class (Song & Mittal 2021, arXiv 2003.10595).
    """

    name = "gradient"
    threat_model = "white-box"

    def __init__(self, mode: str = "auto", n_reference: int = 2, class_dependent: bool = False, **options: Any) -> None:
        super().__init__(**options)
        if mode not in ("auto", "norm", "classifier"):
            raise ValueError(f"option mode must be 'auto', 'norm' or 'classifier', got {shown(mode)}")
        if not isinstance(n_reference, int) or isinstance(n_reference, bool) or not 1 <= n_reference <= 16:
            raise ValueError(f"option n_reference must be an integer between 1 and 16, got {shown(n_reference)}")
        if not isinstance(class_dependent, bool):
            raise TypeError("option class_dependent must be true or false")
        self.options = {"mode": mode, "n_reference": n_reference, "class_dependent": class_dependent}

    def _can_train(self, ctx: AttackContext) -> bool:
        return ctx.recipe is not None and ctx.population is not None and len(ctx.population) >= 2 * MIN_REFERENCE

    def estimated_seconds(self, facts: CostFacts) -> float | None:
        from privgate.attacks.budget import GRADIENT_PASSES, trained_seconds

        gradients = facts.pass_s * GRADIENT_PASSES
        if self.options["mode"] == "norm" or facts.epochs == 0 or facts.population < 2 * MIN_REFERENCE:
            return gradients
        half = facts.population // 2  # classifier mode: reference models on population halves, their gradients too
        others = trained_seconds(facts, self.options["n_reference"], half)
        return gradients * (1 + self.options["n_reference"] * half / max(facts.rows, 1)) + others

    def run(self, ctx: AttackContext) -> AttackResult:
        start = time.perf_counter()
        module = ctx.target.module
        if module is None:  # the gate checks this first; kept for direct callers
            raise AttackSkipped("the target exposes no torch module, so its gradients cannot be computed")
        mode = self.options["mode"]
        notes: list[str] = []
        if mode == "auto":
            mode = "classifier" if self._can_train(ctx) else "norm"
            if mode == "norm":
                notes.append(
                    "mode auto: no recipe or too little population data for reference models; scored by the "
                    "gradient norm"
                )
        elif mode == "classifier" and not self._can_train(ctx):
            raise AttackSkipped(
                f"mode 'classifier' trains reference models and needs a recipe and at least "
                f"{2 * MIN_REFERENCE} population rows"
            )
        kind = ctx.target.outputs or outputs.LOGITS
        norms, loss, layers = gradient_features(module, ctx.x, ctx.y, kind)
        total = np.sqrt((norms**2).sum(axis=1))
        trained = 0
        extras: dict[str, Any] = {"layers": layers, "mode": mode}
        if mode == "norm":
            scores = -total
        else:
            clf, trained = self._fit_attack_model(ctx, kind)
            scores = clf.decision_function(_features(norms, loss))
            coef = clf[-1].coef_.ravel()
            extras["attack_model_weights"] = {name: round(float(w), 4) for name, w in zip([*layers, "loss"], coef)}
        extras["median_gradient_norm"] = round(float(np.median(total)), 6)
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=np.asarray(scores, dtype=float),
            seconds=time.perf_counter() - start,
            models_trained=trained,
            groups=np.asarray(ctx.y) if self.options["class_dependent"] else None,
            options=dict(self.options),
            notes=notes,
            extras=extras,
        )

    def _fit_attack_model(self, ctx: AttackContext, kind: outputs.Kind) -> tuple[Any, int]:
        """Train reference models on population halves and a logistic attack model on their features."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        from privgate.training.ensemble import TorchReader
        from privgate.training.references import trainer_for
        from privgate.training.trained import TrainSettings

        pop = ctx.population
        assert pop is not None and ctx.recipe is not None
        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, 0x6AD]))
        k = self.options["n_reference"]
        masks, seeds = np.zeros((k, len(pop)), dtype=bool), []
        for i in range(k):
            masks[i, rng.permutation(len(pop))[: len(pop) // 2]] = True
            seeds.append(int(rng.integers(2**31)))
        # trained at once and cached, as the other attacks' reference models (model i as train_model would train it
        # on its half with its seed, up to float rounding: privgate.training.engine)
        settings = TrainSettings(
            cache_dir=ctx.run.cache,
            cache_key=ctx.run.cache_key,
            threads=ctx.threads,
            engine=ctx.run.engine,
            device=ctx.device,
            progress=ctx.run.progress,
        )
        refs = trainer_for(ctx.recipe).train(ctx.recipe, ctx.target, pop.x, pop.y, masks, seeds, settings)
        if not isinstance(refs.reader, TorchReader):
            raise AttackSkipped("mode 'classifier' needs a recipe of torch models, whose gradients it reads")
        feats, labels = [], []
        for state, inside in zip(refs.models, masks):
            norms, loss, _ = gradient_features(refs.reader.module(state), pop.x, pop.y, kind)
            feats.append(_features(norms, loss))
            labels.append(inside)
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000))
        with native_threads(ctx.threads):
            clf.fit(np.concatenate(feats), np.concatenate(labels))
        return clf, refs.trained
