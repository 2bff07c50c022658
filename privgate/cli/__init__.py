"""The ``privgate`` command line (click + rich): one group, one module per command.

Exit codes and error handling: :mod:`privgate.cli.guard`. No output may be an
input or another output (:mod:`privgate.io.guards`), and a run's outputs are
written together at its end (:mod:`privgate.io.staging`). Adding a command is
a module here and one ``cli.add_command`` line below.
"""

from __future__ import annotations

import contextlib
import sys

import click

from privgate import __version__
from privgate.cli.audit import audit
from privgate.cli.canaries import canaries
from privgate.cli.check import check, harden
from privgate.cli.diff import diff
from privgate.cli.fl import fl
from privgate.cli.guard import Environment
from privgate.cli.init import init_cmd
from privgate.cli.plan import plan
from privgate.cli.policy import policy
from privgate.cli.report import report


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="privgate")
# The environment variables the commands honour, read here once (hidden: they are not flags to type)
@click.option("--ci-env", "ci", envvar="CI", hidden=True, default=None)
@click.option("--columns-env", "columns", envvar="COLUMNS", hidden=True, default=None)
@click.option("--step-summary-env", "step_summary", envvar="GITHUB_STEP_SUMMARY", hidden=True, default=None)
@click.option("--debug-env", "debug", envvar="PRIVGATE_DEBUG", hidden=True, default=None)
@click.option("--omp-wait-policy-env", "omp_wait_policy", envvar="OMP_WAIT_POLICY", hidden=True, default=None)
@click.option("--omp-num-threads-env", "omp_num_threads", envvar="OMP_NUM_THREADS", hidden=True, default=None)
@click.option("--cache-key-env", "cache_key", envvar="PRIVGATE_CACHE_KEY", hidden=True, default=None)
@click.option("--xdg-cache-home-env", "xdg_cache_home", envvar="XDG_CACHE_HOME", hidden=True, default=None)
@click.option("--xdg-config-home-env", "xdg_config_home", envvar="XDG_CONFIG_HOME", hidden=True, default=None)
@click.pass_context
def cli(
    ctx: click.Context,
    ci: str | None,
    columns: str | None,
    step_summary: str | None,
    debug: str | None,
    omp_wait_policy: str | None,
    omp_num_threads: str | None,
    cache_key: str | None,
    xdg_cache_home: str | None,
    xdg_config_home: str | None,
) -> None:
    """privgate: a privacy gate for trained models.

    Runs membership-inference attacks against a model on known members and
    non-members, measures their success with confidence intervals and decides a
    policy: pass (0), fail (1), bad input (2), inconclusive (3), internal error (4);
    130 / 143 when stopped by Ctrl-C / SIGTERM (nothing half-written is left).
    """
    ctx.obj = Environment(
        ci=bool(ci),
        columns=bool(columns),
        step_summary=step_summary or None,
        debug=bool(debug),
        omp_wait_policy=omp_wait_policy or None,
        omp_num_threads=omp_num_threads or None,
        cache_key=cache_key or None,
        xdg_cache_home=xdg_cache_home or None,
        xdg_config_home=xdg_config_home or None,
    )


cli.add_command(check)
cli.add_command(plan)
cli.add_command(harden)
cli.add_command(report)
cli.add_command(diff)
cli.add_command(policy)
cli.add_command(init_cmd)
cli.add_command(fl)
cli.add_command(audit)
cli.add_command(canaries)


def main() -> None:
    """The ``privgate`` console script: exit 1 only for a verdict (a violated policy), never for a failure.

    Python exits 1 on an uncaught exception and click on ``Abort``; both would
    read as "the model leaks" in CI, so anything that escapes the commands'
    guard (:func:`privgate.cli.guard.guard`) ends in exit 4.
    """
    from privgate.cli.guard import EXIT_FAIL, EXIT_INTERNAL, VERDICT

    try:
        cli(prog_name="privgate")
    except SystemExit as exc:
        if exc.code == EXIT_FAIL and not VERDICT["given"]:
            raise SystemExit(EXIT_INTERNAL) from None
        raise
    except BaseException as exc:  # noqa: BLE001 — the last line of defence, outside any command
        with contextlib.suppress(BaseException):
            sys.stderr.write(f"internal error: {exc.__class__.__name__}\n")
        raise SystemExit(EXIT_INTERNAL) from None


__all__ = ["cli", "main"]
