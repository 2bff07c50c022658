"""``--mlflow`` and ``--mlflow-model``: where ``privgate check`` logs its verdict in MLflow."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def mlflow_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The two MLflow flags of ``check`` (``mlflow_log``, ``mlflow_model``)."""
    f = click.option(
        "--mlflow-model",
        "mlflow_model",
        metavar="NAME:VERSION",
        help="Also set the tag privgate.verdict on this registered model version, for a promotion rule "
        "(implies --mlflow).",
    )(f)
    return click.option(
        "--mlflow",
        "mlflow_log",
        is_flag=True,
        help="Log the verdict, every check's value and interval, the attack table and the reports to the active "
        "MLflow run (one is started when none is; MLflow reads MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME, "
        "MLFLOW_RUN_ID). Needs privgate[mlflow].",
    )(f)
