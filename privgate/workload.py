"""What a check of a classifier will compute on torch, estimated once its inputs are loaded; and ``auto``'s device.

:func:`decided` is where a check (:func:`privgate.gate.check_model`) and a hardening
(:func:`privgate.dp.remediate.remediate`) resolve their threads, then their device. For ``device="auto"``
with a CUDA GPU it gathers a :class:`privgate.device.Workload` (the model's size and FLOPs per row, the
reference models and epochs the policy will train, the white-box attacks' extra work, a hardening's
trainings) for :func:`privgate.device.choose_device`. No estimate is made where it cannot change the answer;
nothing here reads the audit rows' membership or changes a model. What is counted: docs/internals-core.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from privgate import device as _device
from privgate.device import Workload
from privgate.options import RunOptions

if TYPE_CHECKING:
    from torch import nn

    from privgate.inputs.data import AuditData
    from privgate.inputs.target import Target
    from privgate.policy import Policy

#: The kinds of target (:attr:`privgate.inputs.target.Target.kind`) whose work is estimated: classifiers on rows.
ROWS_KINDS = ("tabular", "sklearn")


def _served_attacks(policy: Policy) -> dict[str, dict[str, Any]]:
    """The policy's attacks that will run on its release's surface (as :func:`privgate.gate.run_attacks` skips)."""
    from privgate.attacks import available_attacks, threat_model_of
    from privgate.inputs.surface import surface_of

    registry, surface = available_attacks(), surface_of(policy)
    return {
        name: dict(options)
        for name, options in policy.attacks_to_run().items()
        if name in registry
        and (surface is None or registry[name].diagnostic or not surface.not_applicable(threat_model_of(name)))
    }


def _options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """An attack's options with its defaults (empty when they are invalid: the attack reports that itself)."""
    from privgate.attacks import available_attacks

    try:
        return dict(available_attacks()[name](**options).options)
    except Exception:  # noqa: BLE001 - invalid options are the attack's to report
        return {}


def probe(model: nn.Module, x: Any) -> tuple[float, int]:
    """(FLOPs of one row's forward pass, modules run) of ``model`` on the first rows of ``x``; (0, 0) if it cannot run.

    Counted by forward hooks: ``Linear`` 2·in·out per output row, a convolution
    2·(in channels / groups)·kernel size per output value; other layers cost
    launches, not FLOPs worth counting. A TorchScript module takes no hooks:
    2 FLOPs per parameter (exact for an MLP, low for a CNN).
    """
    import numpy as np
    import torch
    from torch import nn

    rows = np.asarray(x[:2])
    if isinstance(model, torch.jit.ScriptModule):
        leaves = sum(1 for m in model.modules() if not list(m.children()))
        return 2.0 * sum(p.numel() for p in model.parameters()), max(leaves, 1)
    flops, calls = [0.0], [0]

    def count(module: nn.Module, _inputs: Any, out: Any) -> None:
        calls[0] += 1
        if not isinstance(out, torch.Tensor):
            return
        if isinstance(module, nn.Linear):
            flops[0] += 2.0 * module.in_features * out.numel()
        elif isinstance(module, nn.modules.conv._ConvNd):
            k = math.prod(module.kernel_size)
            flops[0] += 2.0 * module.in_channels / module.groups * k * out.numel()

    hooks = [m.register_forward_hook(count) for m in model.modules() if not list(m.children())]
    try:
        xb = torch.as_tensor(rows, dtype=torch.float32).to(_device.device_of(model))
        with torch.no_grad():
            model(xb)
    except Exception:  # noqa: BLE001 - a model that cannot run is reported by the attacks, not here
        return 0.0, 0
    finally:
        for h in hooks:
            h.remove()
    return flops[0] / max(len(rows), 1), calls[0]


def workload_of(
    target: Target, data: AuditData, policy: Policy, recipe: Any, run: RunOptions, *, hardening: bool = False
) -> Workload:
    """The facts of :class:`~privgate.device.Workload` for a check of ``target`` (``hardening``: and remediation)."""
    from privgate.attacks import available_attacks
    from privgate.attacks.sharing import planned_models
    from privgate.recipe import Recipe

    attacks = _served_attacks(policy)
    torch_recipe = recipe if isinstance(recipe, Recipe) else None  # a TreeRecipe trains boosted trees, not torch
    population = 0 if data.population is None else len(data.population)
    rows = len(data.members) + len(data.nonmembers)
    what = "this hardening" if hardening else "this check"
    models = planned_models(attacks, available_attacks(), population) if torch_recipe is not None else 0
    # the recipe's model, else the target's (a training function builds its own: privgate has no factory to call)
    model = torch_recipe.build(seed=0) if torch_recipe is not None and torch_recipe.model_factory else target.module
    if model is None:  # a scikit-learn, ONNX or boosted target with no torch recipe
        return Workload(parameters=0, flops_per_row=0.0, layers=0, rows=rows, population=population, what=what)
    flops, layers = probe(model, data.members.x)
    parameters = sum(p.numel() for p in model.parameters())
    if flops <= 0:  # it did not run on a probe row: count its parameters
        flops, layers = 2.0 * parameters, sum(1 for m in model.modules() if not list(m.children()))
    other_trainings, other_rows, steps = 0, 0, 0
    if target.white_box and "gradient" in attacks:
        o = _options("gradient", attacks["gradient"])
        if torch_recipe is not None and o.get("mode") in ("auto", "classifier") and population >= 40:
            other_trainings, other_rows = int(o.get("n_reference", 2)), population // 2
    if target.white_box and "inversion" in attacks:
        steps = int(_options("inversion", attacks["inversion"]).get("steps", 0) or 0)
    repeats = 1
    if hardening and torch_recipe is not None:
        candidates = len(policy.remediation.epsilons)
        repeats = 1 + candidates  # the original audit and one per candidate ε
        other_trainings += candidates
        other_rows = max(other_rows, len(data.members))
    return Workload(
        parameters=parameters,
        flops_per_row=flops,
        layers=max(layers, 1),
        rows=rows,
        population=population,
        models=models,
        stacked=run.engine != "sequential" and (torch_recipe is None or torch_recipe.vectorisable),
        group=run.models_per_task,
        epochs=torch_recipe.epochs if torch_recipe is not None else 1,
        batch_size=torch_recipe.batch_size if torch_recipe is not None else 64,
        other_trainings=other_trainings,
        other_rows=other_rows,
        optimisation_steps=steps,
        repeats=repeats,
        what=what,
    )


def decided(
    run: RunOptions, target: Target, data: AuditData, policy: Policy, recipe: Any, *, hardening: bool = False
) -> RunOptions:
    """``run`` resolved (:meth:`RunOptions.resolved`): ``auto`` decided on this check's estimated work.

    The work is estimated only where it can change the answer: ``auto``, not
    yet decided, on a machine whose torch sees a CUDA GPU, for a classifier on
    rows of features (:attr:`~privgate.inputs.target.Target.kind` ``tabular`` or ``sklearn``, whose work on
    torch is none: the CPU; a Hugging Face folder's work is not estimated: ``auto`` takes the GPU). Where work
    on torch is estimated, the machine's costs are measured or read from the cache (:mod:`privgate.calibration`).
    A check with nothing on torch (no torch module, no torch recipe) never imports torch to ask for a GPU.
    """
    from privgate.recipe import Recipe

    if run.device_requested is not None or run.device != "auto":
        return run.resolved()
    if target.kind not in ROWS_KINDS:  # a language model's work is not estimated
        return run.resolved()
    on_torch = target.module is not None or isinstance(recipe, Recipe)
    if on_torch and not _device.cuda_available():
        return run.resolved()
    work = workload_of(target, data, policy, recipe, run, hardening=hardening)
    if work.flops_per_row <= 0:  # nothing on torch: the CPU, with no probe
        return run.resolved(work)
    from privgate.calibration import machine_costs, probe_file

    threads = run.resolved_threads()[0]
    run.say("measuring this machine's CPU and GPU for --device auto")
    try:
        probe = machine_costs(threads, probe_file(run.cache_dir))
    except Exception as exc:  # noqa: BLE001 - a probe that fails decides on the documented constants
        return run.resolved(work, None, {"source": "constants", "probe_failed": f"{type(exc).__name__}: {exc}"[:300]})
    return run.resolved(work, probe.costs, probe.facts())


__all__ = ["decided", "probe", "workload_of"]
