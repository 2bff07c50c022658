"""pytest11 entry point of privgate: options, fixtures, the ``privacy`` marker, a terminal summary.

Thin by design (like pytest-cov): every audit goes through
:mod:`privgate.assertions`, i.e. privgate's public ``check``; this module
only wires it into pytest.

* ``--privgate-policy NAME|FILE`` / ini ``privgate_policy``: the policy behind the
  ``privgate_policy`` fixture (ini paths are relative to the ini file).
* ``--privgate-report DIR`` / ini ``privgate_report_dir``: write every audit's
  JSON report there (``privgate report render`` turns them into HTML, SARIF...).
* ``--privgate-on-inconclusive fail|skip`` / ini ``privgate_on_inconclusive``:
  what an undecidable check does to a test (default: fail).
* ``--privgate-budget SECONDS`` / ini ``privgate_budget_s``: a time budget for the
  attacks of every audit whose call gives none (``budget_s=``): the attacks that
  do not fit are not run, named in the test's message and in the summary.
* Under pytest-xdist each worker sends its audits to the controller through
  ``workeroutput``; the controller prints the one summary.
* Threads: the audits run with the CLI's default — ``$OMP_NUM_THREADS``, else
  the cores this process may use — except in a pytest-xdist worker
  (``$PYTEST_XDIST_WORKER``), which gets one thread: the workers already share
  the cores (:func:`session_threads`). ``$PRIVGATE_THREADS`` sets it for every
  audit of the session.

Importing this module imports neither privgate's engine nor torch: a test
session that never audits pays nothing for the plugin.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from privgate import assertions

if TYPE_CHECKING:
    from privgate.policy import Policy
    from privgate.report.model import Report

PLUGIN_NAME = "privgate-session"
PRIVACY_MARKER = (
    "privacy: a privacy test (membership inference, model inversion, a privgate policy); "
    "select with -m privacy, leave out with -m 'not privacy'"
)
#: Fixtures whose tests are privacy tests (marked ``privacy`` automatically).
FIXTURES = ("privgate_audit", "privgate_policy")
_WORKER_KEY = "privgate_records"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("privgate", "privacy gate (privgate)")
    group.addoption(
        "--privgate-policy",
        dest="privgate_policy",
        metavar="NAME|FILE",
        default=None,
        help="policy for the privgate_policy fixture: a built-in name (internal, strict, ...) or a YAML file.",
    )
    group.addoption(
        "--privgate-report",
        dest="privgate_report",
        metavar="DIR",
        default=None,
        help="write the JSON report of every privacy audit of the session into DIR.",
    )
    group.addoption(
        "--privgate-on-inconclusive",
        dest="privgate_on_inconclusive",
        choices=("fail", "skip"),
        default=None,
        help="what a check the audit data cannot decide does to its test: fail (default) or skip.",
    )
    group.addoption(
        "--privgate-budget",
        dest="privgate_budget",
        metavar="SECONDS",
        default=None,
        help="time budget for each audit's attacks (those that do not fit are not run, and named).",
    )
    parser.addini("privgate_budget_s", "time budget in seconds for each privacy audit's attacks.", default=None)
    parser.addini(
        "privgate_policy",
        "policy for the privgate_policy fixture (built-in name or file, relative to the ini file).",
        default=None,
    )
    parser.addini(
        "privgate_report_dir",
        "folder for the JSON report of every privacy audit (relative to the ini file).",
        default=None,
    )
    parser.addini(
        "privgate_on_inconclusive",
        "fail (default) or skip: what an inconclusive privacy check does to its test.",
        default=None,
    )


def session_threads(config: pytest.Config) -> dict[str, Any]:
    """``threads`` and ``threads_reason`` for every audit of the session (see the module docstring)."""
    import os

    from privgate.threads import default_threads, threads_problem

    given = os.environ.get("PRIVGATE_THREADS", "").strip()
    if given:
        n = int(given) if given.isdigit() else 0
        problem = threads_problem(n)
        if problem:
            raise pytest.UsageError(f"$PRIVGATE_THREADS: {problem}.")
        return {"threads": n, "threads_reason": f"$PRIVGATE_THREADS={n}"}
    worker = os.environ.get("PYTEST_XDIST_WORKER") or getattr(config, "workerinput", {}).get("workerid")
    if worker:
        return {"threads": 1, "threads_reason": f"one thread per pytest-xdist worker ({worker})"}
    n, reason = default_threads(os.environ.get("OMP_NUM_THREADS"))
    return {"threads": n, "threads_reason": reason}


def _ini_base(config: pytest.Config) -> Path:
    return Path(config.inipath).parent if config.inipath else Path(config.rootpath)


def _setting(config: pytest.Config, option: str, ini: str) -> tuple[str | None, Path]:
    """(value, folder it is relative to): the command line wins over the ini file."""
    value = config.getoption(option)
    if value:
        return str(value), Path(config.invocation_params.dir)
    value = config.getini(ini)
    return (str(value), _ini_base(config)) if value else (None, _ini_base(config))


def _seconds(value: str) -> float:
    """A time budget as given (``--privgate-budget``, ``privgate_budget_s``): a positive number of seconds."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise pytest.UsageError(f"privgate budget: expected a positive number of seconds, got {value!r}")
    return seconds


def _looks_like_path(spec: str) -> bool:
    return bool(Path(spec).suffix) or "/" in spec or "\\" in spec


class PrivgateSession:
    """Collects the audits of one pytest session (or one xdist worker) for the summary and the JSON files."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: list[dict[str, Any]] = []
        self.current: str | None = None
        self.is_worker = hasattr(config, "workerinput")
        report_dir, base = _setting(config, "privgate_report", "privgate_report_dir")
        self.report_dir = (base / report_dir).resolve() if report_dir else None
        mode, _ = _setting(config, "privgate_on_inconclusive", "privgate_on_inconclusive")
        if mode not in (None, "fail", "skip"):
            raise pytest.UsageError(f"privgate_on_inconclusive: expected 'fail' or 'skip', got {mode!r}")
        self._saved_settings = dict(assertions.settings)
        if mode:
            assertions.settings["on_inconclusive"] = mode
        budget, _ = _setting(config, "privgate_budget", "privgate_budget_s")
        if budget is not None:
            assertions.settings["budget_s"] = _seconds(budget)
        assertions.settings["run"] = session_threads(config)
        self._counts: dict[str, int] = {}

    # ------------------------------------------------------------------ recording

    def observe(self, report: Report, label: str) -> None:
        """An audit ran (called by :mod:`privgate.assertions`): keep its rows, write its JSON."""
        from privgate.report.labels import attack_label, interval, metric_label, over_budget_line
        from privgate.report.numbers import num

        nodeid = self.current or "<outside a test>"
        path = None
        if self.report_dir is not None:
            from privgate.io.atomic import write_atomic

            stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_") or "session"
            k = self._counts[stem] = self._counts.get(stem, 0) + 1
            path = write_atomic(self.report_dir / f"{stem}-{k}.json", report.to_json() + "\n")
        self.records.append(
            {
                "nodeid": nodeid,
                "label": label,
                "policy": report.policy.get("name"),
                "verdict": report.verdict,
                "report": str(path) if path else None,
                "over_budget": over_budget_line(report),
                "checks": [
                    {
                        "status": c.status,
                        "id": c.id,
                        "text": f"{attack_label(c)} {metric_label(c)} = "
                        f"{(num(c.value) + ' ' + interval(c.ci)).strip()} ≤ {c.threshold:g}"
                        f" (n = {c.n_members}/{c.n_nonmembers})",
                    }
                    for c in report.checks
                ],
            }
        )

    # ------------------------------------------------------------------ hooks

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        self.current = item.nodeid

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.current = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            if (
                any(f in getattr(item, "fixturenames", ()) for f in FIXTURES)
                and item.get_closest_marker("privacy") is None
            ):
                item.add_marker(pytest.mark.privacy)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            self.config.workeroutput[_WORKER_KEY] = json.dumps(self.records)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist controller: take the audits a worker ran."""
        data = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
        if data:
            self.records.extend(json.loads(data))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or not self.records:
            return
        tr = terminalreporter
        tr.section("privgate: privacy checks")
        colour = {"pass": {"green": True}, "fail": {"red": True, "bold": True}, "inconclusive": {"yellow": True}}
        counts = {"pass": 0, "fail": 0, "inconclusive": 0}
        for rec in sorted(self.records, key=lambda r: r["nodeid"]):
            tr.write_line(
                f"{rec['nodeid']} [{rec['label']}, policy {rec['policy']}]: {rec['verdict']}", **colour[rec["verdict"]]
            )
            for c in rec["checks"]:
                counts[c["status"]] += 1
                tr.write_line(f"  {c['status']:<12} {c['id']:<22} {c['text']}", **colour[c["status"]])
            if rec.get("over_budget"):
                tr.write_line(f"  {rec['over_budget']}", yellow=True)
        total = sum(counts.values())
        tr.write_line(
            f"{total} privacy checks in {len(self.records)} audits: {counts['pass']} pass, {counts['fail']} "
            f"fail, {counts['inconclusive']} inconclusive"
        )
        if self.report_dir is not None:
            tr.write_line(f"JSON reports: {self.report_dir}")

    def close(self) -> None:
        assertions.remove_observer(self.observe)
        assertions.settings.clear()
        assertions.settings.update(self._saved_settings)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", PRIVACY_MARKER)
    session = PrivgateSession(config)
    config.pluginmanager.register(session, PLUGIN_NAME)
    assertions.add_observer(session.observe)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if session is not None:
        session.close()
        config.pluginmanager.unregister(session, PLUGIN_NAME)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def privgate_policy(pytestconfig: pytest.Config) -> Policy:
    """The session's policy, from ``--privgate-policy`` or the ini key ``privgate_policy``."""
    from privgate import load_policy
    from privgate.errors import PrivgateError

    spec, base = _setting(pytestconfig, "privgate_policy", "privgate_policy")
    if spec is None:
        pytest.fail(
            "privgate_policy: no policy configured; pass --privgate-policy NAME|FILE or set privgate_policy "
            "in the pytest ini file.",
            pytrace=False,
        )
    if _looks_like_path(spec) and not Path(spec).is_absolute():
        spec = str(base / spec)
    try:
        return load_policy(spec)
    except PrivgateError as exc:
        pytest.fail(f"privgate_policy: {exc}", pytrace=False)


@pytest.fixture
def privgate_audit(request: pytest.FixtureRequest) -> Callable[..., Report]:
    """A factory: ``privgate_audit(model, members, nonmembers, *, policy=None, ...)`` gives a :class:`privgate.Report`.

    ``policy`` defaults to the ``privgate_policy`` fixture. The report is listed
    in the session summary (and written under ``--privgate-report``); the test
    decides what to assert on it.
    """

    def audit(
        model: Any,
        members: Any,
        nonmembers: Any,
        *,
        policy: Policy | str | None = None,
        population: Any = None,
        recipe: Any = None,
        seed: int = 0,
        trust_checkpoint: bool = False,
        drop_duplicates: bool = False,
    ) -> Report:
        pol = policy if policy is not None else request.getfixturevalue("privgate_policy")
        sources = {"population": population, "recipe": recipe, "seed": seed, "trust_checkpoint": trust_checkpoint}
        sources["drop_duplicates"] = drop_duplicates
        return assertions.run_check(model, pol, members, nonmembers, label="privgate_audit", **sources)

    return audit
