"""Hostile live endpoints (issue 36): a server that misbehaves on purpose is one sentence and exit 2, never a hang.

A small server of our own (``tests/servers/hostile.py``, on 127.0.0.1 in daemon threads) answers as each model name
says: slowly (a byte every 0.2 s, of its headers or of its body), enormously (a declared 300 MB, 300 MB chunked, a gzip
bomb), echoing the credentials it was sent (in an error, in tensor names, in a datatype), with JSON nested 10^5 deep,
a shape of strings, NaN, Infinity, an FP16 overflow, or a redirect to another host. What a user sees runs the CLI in
its own process (``cases.run_cli``): exit 2, the sentence naming the endpoint and the limit or flag, the run returning
(never killed), the memory it took, no credential in stdout, stderr or the report, no numpy warning on stderr. The
other variants are in process (the error class the CLI turns into exit 2, and the message).
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from cases import run_cli
from servers.hostile import hostile

pytest.importorskip("httpcore")

TOKEN = "SECRETTOKEN123-must-not-leak"
BEARER = f"Authorization: Bearer {TOKEN}"
POLICY = textwrap.dedent(
    """
    name: served
    sensitivity: internal
    release: api
    confidence: 0.95
    attacks:
      loss: {}
    checks:
      - id: mia-accuracy
        attack: best
        metric: accuracy
        max: 0.6
    """
)
#: The longest a CLI run may take before the test calls it a hang (each run here ends in seconds).
HANG = 60


@pytest.fixture(scope="module")
def servers():
    """The hostile server, and a second one on another port that records whether a redirect brought the headers."""
    with hostile() as collector, hostile(collector.server_address[1]) as server:
        yield server, collector


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    rng = np.random.default_rng(0)
    for name in ("members", "nonmembers"):
        x = rng.normal(size=(60, 4))
        np.savez(d / f"{name}.npz", x=x, y=(x[:, 0] > 0).astype(int))
    (d / "policy.yaml").write_text(POLICY)
    return d


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    hung: bool
    peak_mb: float


def _check(d: Path, url: str, *args: str, out: str = "r.json") -> tuple[Run, dict | None]:
    """``privgate check URL`` in its own process (:func:`cases.run_cli`), as a user runs it: its exit, output, peak
    memory, and report."""
    (d / out).unlink(missing_ok=True)
    try:
        r = run_cli("check", url, "--policy", "policy.yaml", "--members", "members.npz", "--nonmembers",
                    "nonmembers.npz", "--json", out, "-q", *args, cwd=d, timeout=HANG)  # fmt: skip
    except subprocess.TimeoutExpired:
        return Run(-9, "", "", True, 0.0), None
    report = json.loads((d / out).read_text()) if (d / out).exists() else None
    return Run(r.returncode, r.stdout, r.stderr, False, r.peak_mb), report


@pytest.fixture(scope="module")
def echoed(servers, audit) -> Run:
    """A run against a server whose error repeats the token: refused at its first request (a baseline of cost)."""
    run, _ = _check(audit, f"{servers[0].base}/v2/models/echo", "--header", BEARER, out="echo.json")
    return run


def _refused(run: Run, sentence: str) -> None:
    """Exit 2 with one sentence holding ``sentence``: no traceback, no numpy warning, no hang."""
    assert not run.hung, f"the run did not return within {HANG} s"
    assert run.returncode == 2, run.stderr
    assert sentence in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and "Warning" not in run.stderr, run.stderr
    assert run.stderr.count("error:") == 1, run.stderr


def _within(seconds: float, fn, *args):
    """``fn(*args)`` in a thread; the test fails (instead of hanging) when it has not returned within ``seconds``."""
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(fn, *args).result(timeout=seconds)
    finally:
        pool.shutdown(wait=False)


def _load(url: str, **access):
    from privgate import Target
    from privgate.inputs.targets.endpoint import Access

    return Target.load(url, access=Access(**{"retries": 0, **access}))


def _refused_in_process(url: str, rows: int = 3, **access) -> str:
    """The sentence a hostile endpoint ends in (a TargetError: exit 2 at the CLI), with no warning on the way."""
    from privgate.errors import TargetError

    def attempt() -> str:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(TargetError) as refused:
                _load(url, **access).predict_proba(np.zeros((rows, 4)))
        assert not caught, [str(w.message) for w in caught]
        return str(refused.value)

    return _within(HANG, attempt)


# ---------------------------------------------------------------------------------------------- time (item 3)


def test_a_slow_endpoint_is_cut_at_the_timeout(servers, audit):
    """Headers at once, then a byte every 0.2 s (no read waits 0.5 s): each try ends at --endpoint-timeout."""
    server, _ = servers
    url = f"{server.base}/v2/models/slow-body"
    run, report = _check(audit, url, "--endpoint-timeout", "0.5")
    _refused(run, f"{url}: the endpoint failed 4 times (no complete answer within 0.5 s, the --endpoint-timeout).")
    assert report is None

    # the status line at once, then the headers a byte every 0.2 s: the same deadline
    slow = f"{server.base}/v2/models/slow-headers"
    said = _refused_in_process(slow, timeout=0.5)
    assert said == f"{slow}: the endpoint failed once (no complete answer within 0.5 s, the --endpoint-timeout)."


# ---------------------------------------------------------------------------------------------- size (item 11)


def _sent(server, path: str) -> int:
    """Bytes the server managed to send on ``path`` before the client hung up (waits for the handler to end)."""
    end = threading.Event()
    for _ in range(300):
        if path in server.sent:
            return server.sent[path]
        end.wait(0.1)
    raise AssertionError(f"the server is still sending {path}")


def test_oversized_answers_are_refused_before_they_are_read(servers, audit, echoed):
    server, _ = servers
    limit = "32 MiB (33,554,432 bytes), the most privgate reads of one answer"
    advice = "raise --endpoint-max-bytes (config 'endpoint_max_bytes') if the model's answers are that large"
    # a gzip bomb: 256 KB on the wire, 256 MiB once inflated; inflated no further than the limit
    bomb = f"{server.base}/v2/models/gzip-bomb"
    run, report = _check(audit, bomb)
    _refused(run, f"{bomb}: the server's answer is larger than {limit} (more than that once inflated); {advice}")
    assert report is None
    assert run.peak_mb < echoed.peak_mb + 120, (run.peak_mb, echoed.peak_mb)  # the limit's worth, not 256 MiB

    # 300 MB declared: refused on its Content-Length, the body never read (the server could send little of it)
    huge = f"{server.base}/v2/models/huge"
    said = _refused_in_process(huge)
    assert said.startswith(f"{huge}: the server's answer is larger than {limit} (it declares 300,000,000 bytes)")
    assert _sent(server, "/v2/models/huge") < 32 << 20
    # 300 MB in chunks, no length declared: counted as they arrive, the connection dropped at the limit
    chunked = f"{server.base}/v2/models/huge-chunked"
    assert "(more than that arrived)" in _refused_in_process(chunked)
    assert _sent(server, "/v2/models/huge-chunked") < 100_000_000

    # the limit is a setting: the config's endpoint_max_bytes, overridden by --endpoint-max-bytes
    (audit / "privgate.toml").write_text("endpoint_max_bytes = 1048576\n")
    try:
        ok = f"{server.base}/v2/models/ok"
        run, report = _check(audit, ok, "--endpoint-max-bytes", "2048", out="small.json")
    finally:
        (audit / "privgate.toml").unlink()
    _refused(run, f"{ok}: the server's answer is larger than 2 KiB (2,048 bytes), the most privgate reads")
    assert report is None


# ---------------------------------------------------------------------------------------------- credentials (item 5)


def test_credentials_a_server_echoes_never_show(servers, audit, echoed):
    server, _ = servers
    echo = f"{server.base}/v2/models/echo"
    _refused(echoed, f"{echo}: the server rejected the request (HTTP 400: bad token ***).")
    assert TOKEN not in echoed.stdout + echoed.stderr

    # tensor names that repeat the header: the run completes; neither console nor report carries the token
    names = f"{server.base}/v2/models/echo-names"
    run, report = _check(audit, names, "--header", BEARER, "--markdown", "names.md", out="names.json")
    assert run.returncode in (0, 1, 3) and report is not None, run.stderr
    section = report["target"]["endpoint"]
    assert section["input"]["name"] == "***" and section["output"] == "logits ***"
    for text in (run.stdout, run.stderr, (audit / "names.json").read_text(), (audit / "names.md").read_text()):
        assert TOKEN not in text

    # in process: a 503 retried (its last message quoted), a datatype, a key of another header, a URL's password
    assert TOKEN not in _refused_in_process(f"{server.base}/v2/models/echo-busy", headers=(("Authorization", TOKEN),))
    said = _refused_in_process(
        f"{server.base}/v2/models/echo-datatype", headers=(("Authorization", f"Bearer {TOKEN}"),)
    )
    assert TOKEN not in said and "'***'" in said
    said = _refused_in_process(echo, headers=(("X-Api-Key", TOKEN),))
    assert said.endswith("(HTTP 400: bad token).")  # X-Api-Key is not echoed; the sentence is whole
    userinfo = server.base.replace("http://", "http://alice:S3cret%21pass@") + "/v2/models/echo"
    said = _refused_in_process(userinfo)  # the password goes as Basic authorization; echoed raw and decoded
    assert said == f"{echo}: the server rejected the request (HTTP 400: bad token *** = ***)."


def test_a_redirect_is_not_followed_with_the_credentials(servers):
    server, collector = servers
    url = f"{server.base}/v2/models/redirect"
    said = _refused_in_process(url, headers=(("Authorization", f"Bearer {TOKEN}"),))
    assert said == (
        f"{url}: the server redirects (HTTP 307) to 'http://127.0.0.1:{collector.server_address[1]}/v2/models/"
        "collect'; privgate follows no redirect (the headers sent, credentials included, would go along): give the "
        "URL the model is served at."
    )
    assert "collect" not in collector.seen  # the other host was never asked


def test_a_header_value_cannot_inject_another_header():
    from privgate.errors import TargetError
    from privgate.inputs.targets.endpoint import Access, parse_header

    for bad in (lambda: parse_header(f"X-Key: {TOKEN}\r\nX-Other: 1"), lambda: Access(headers=(("X-Key", "a\nb"),))):
        with pytest.raises(TargetError, match="its value holds a line break, another control character") as refused:
            bad()
        assert TOKEN not in str(refused.value)


# ---------------------------------------------------------------------------------------------- malformed (item 7)


def test_malformed_metadata_and_answers_are_one_sentence(servers, audit):
    server, _ = servers
    nan = f"{server.base}/v2/models/nan"
    run, _ = _check(audit, nan, out="nan.json")  # was "a bug in the attack", exit 4, after numpy's warnings
    _refused(run, f"{nan}: the server's output 'probs' holds 2 value(s) that are not finite numbers (NaN or ±Infinity)")

    base = f"{server.base}/v2/models"
    expected = {  # each was an exit 4 (RecursionError, ValueError, KeyError, OverflowError) or a sentence blaming
        # the members file, or "a bug in the attack" after numpy's warnings
        "deep-metadata": "the server's answer is JSON nested too deeply to read.",
        "deep-answer": "the server's answer is JSON nested too deeply to read, sent 1 row(s) of shape (4,).",
        "deep-error": "the server rejected the request (HTTP 400 (its message: JSON nested too deeply to read)).",
        "bad-shape": "the model's metadata gives the input 'x' the shape ['-1', 'abc'], expected a list of integers",
        "bad-inputs": "the model's metadata has inputs {'x': 1}, expected a list of tensors.",
        "bad-output-shape": "the server's output 'probs' has the shape ['-1', 'abc'], expected integers.",
        "infinity": "the server's output 'probs' holds 2 value(s) that are not finite numbers (NaN or ±Infinity) in 1",
        "fp16-overflow": "the server's output 'probs' holds values beyond FP16's range (±65504), its datatype FP16.",
        "int-overflow": "the server's output 'probs' holds values outside INT8's range (-128..127), its datatype INT8.",
    }
    for mode, sentence in expected.items():
        assert _refused_in_process(f"{base}/{mode}").startswith(f"{base}/{mode}: {sentence}"), mode


def test_the_well_behaved_mode_audits(servers):
    """The hostile server's 'ok' model answers like a real one: the checks above fail for the reason they name."""
    target = _load(f"{servers[0].base}/v2/models/ok")
    p = target.predict_proba(np.array([[1.0, 0, 0, 0], [-1.0, 0, 0, 0]]))
    np.testing.assert_allclose(p, [[0.1, 0.9], [0.9, 0.1]])
