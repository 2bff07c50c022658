"""Executor flags of the commands that train many models: ``--executor``, ``--ray-address``, ``--models-per-task``,
``--devices``.

``--ray-address`` falls back to ``$RAY_ADDRESS`` (read here, in the CLI, and
passed down in :class:`~privgate.options.RunOptions`); giving it on the command
line without ``--executor`` means ``--executor ray``, while the variable alone
(set on every node of some clusters) changes nothing unless ``--executor ray``
is asked for. :func:`connect` joins the cluster before any work starts, so a
missing extra or a wrong address is exit 2 with one sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

EXECUTOR_HELP = (
    "Where independent tasks run: local (this process) or ray (Ray tasks: groups of reference models, DP-SGD "
    "clip-search runs, federated topologies, LDP cells; needs pip install 'privgate[ray]'). The same seed gives "
    "the same numbers on either. This flag, else the config's 'executor', else local."
)
ADDRESS_HELP = (
    "The Ray cluster for --executor ray: host:port of the head (`ray start --head` prints it), ray://host:port, "
    "or auto; none starts Ray on this machine. This flag (which implies --executor ray), else $RAY_ADDRESS, else "
    "the config's 'ray_address'."
)
MODELS_PER_TASK_HELP = (
    "Most reference models one task trains at once (vectorised together); K models are ceil(K / N) tasks. Part "
    "of the plan: local and ray runs with the same value give the same numbers. This flag, else the config's "
    "'models_per_task', else 16."
)

DEVICES_HELP = (
    "The GPUs reference-model groups spread over, one worker each, on a cuda run: all (the default: every GPU torch "
    "sees), N (the first N) or indices such as 0,2 or cuda:3; implies the GPU with --device auto, exit 2 with "
    "--device cpu or --executor ray (Ray assigns each task a GPU). Same numbers on one GPU or several. This flag, "
    "else the config's 'devices'."
)


def _devices(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--devices`` checked at the door (exit 2 with one sentence)."""
    if value is None:
        return None
    from privgate.device import parse_devices

    try:
        parse_devices(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def devices_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--devices`` (commands whose reference models can spread over several GPUs)."""
    return click.option("--devices", callback=_devices, metavar="all|N|0,2", help=DEVICES_HELP)(fn)


def executor_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--executor`` and ``--ray-address`` to a command."""
    fn = click.option("--ray-address", envvar="RAY_ADDRESS", show_envvar=True, help=ADDRESS_HELP)(fn)
    return click.option("--executor", type=click.Choice(["local", "ray"]), help=EXECUTOR_HELP)(fn)


def models_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--models-per-task`` (commands that train reference models)."""
    return click.option("--models-per-task", type=click.IntRange(min=1), help=MODELS_PER_TASK_HELP)(fn)


def executor_settings(
    executor: str | None,
    ray_address: str | None,
    models_per_task: int | None = None,
    config: Any = None,
    devices: str | None = None,
) -> dict[str, Any]:
    """``executor``, ``ray_address``, ``models_per_task`` and ``devices`` for :class:`~privgate.options.RunOptions`.

    Flags win over the config (``executor``, ``ray_address``, ``models_per_task``,
    ``devices`` keys); an address typed on the command line implies the Ray executor.
    """
    ctx = click.get_current_context(silent=True)
    typed = ctx is not None and ctx.get_parameter_source("ray_address") == click.core.ParameterSource.COMMANDLINE

    def cfg(key: str) -> Any:
        return config.get(key) if config is not None else None

    chosen = executor or ("ray" if typed and ray_address else None) or cfg("executor") or "local"
    settings: dict[str, Any] = {"executor": chosen, "ray_address": ray_address or cfg("ray_address")}
    per_task = models_per_task if models_per_task is not None else cfg("models_per_task")
    if per_task is not None:
        settings["models_per_task"] = per_task
    spread = devices if devices is not None else cfg("devices")
    if spread is not None:
        settings["devices"] = spread
    return settings


def connect(run: Any) -> None:
    """Join the run's executor now (Ray: import, probe the address, ``ray.init``), before any work starts.

    Raises:
        privgate.executors.ExecutorError: exit 2 with one sentence.
    """
    if run.executor != "local":
        from privgate.executors import executor_for

        executor_for(run)


__all__ = ["connect", "devices_option", "executor_options", "executor_settings", "models_option"]
