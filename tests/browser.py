"""Headless Chromium driven over the DevTools protocol, for tests that look at a page as a person would.

Chromium is started with ``--remote-debugging-pipe``: it reads DevTools
commands (JSON, each ended by a NUL byte) on file descriptor 3 and answers on
4. :meth:`Browser.render` opens one page, in a browser context of its own, at
a given viewport (a phone is ``mobile=True`` at 390 × 844), waits for it to
load, collects every console message, uncaught exception and browser log
entry (a file that failed to load is an ``error`` entry there), evaluates
JavaScript in the page, and takes a screenshot.
Nothing but the standard library; CI installs Chromium (``.ci/run``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    for name in NAMES:
        path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if path:
            return path
    return None


@dataclass
class Page:
    """What the browser saw: messages, evaluated values, the screenshot (PNG bytes)."""

    console: list[dict[str, Any]] = field(default_factory=list)  # {"source", "level", "text"}
    values: dict[str, Any] = field(default_factory=dict)
    screenshot: bytes = b""

    @property
    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, failed loads: anything a clean page never logs."""
        return [
            f"{m['source']}/{m['level']}: {m['text']}"
            for m in self.console
            if m["level"] in ("error", "warning", "assert")
        ]


class _Pipe:
    def __init__(self, exe: str, profile: str) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # the child reads commands on fd 3 and writes answers on fd 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        cmd = [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--mute-audio",
            f"--user-data-dir={profile}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            pass_fds=(3, 4) if os.name == "posix" else (),
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float = 60
    ) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            for reply in self._read(deadline):
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
                self.events.append(reply)

    def _read(self, deadline: float) -> list[dict[str, Any]]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("Chromium did not answer in time")
        ready, _, _ = select.select([self._from_child], [], [], left)
        if not ready:
            raise TimeoutError("Chromium did not answer in time")
        chunk = os.read(self._from_child, 1 << 20)
        if not chunk:
            raise RuntimeError(f"Chromium exited (code {self.proc.poll()})")
        self._buf += chunk
        *messages, self._buf = self._buf.split(b"\0")
        return [json.loads(m) for m in messages if m]

    def wait_for(self, method: str, session: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method and e.get("sessionId") == session for e in self.events):
            self.events += self._read(deadline)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)


class Browser:
    """One headless Chromium for many pages: each :meth:`render` opens its page in a browser context of its own
    (Chromium's incognito-like profile: no cookie, storage or cache shared with another page), closed after."""

    def __init__(self, exe: str | None = None) -> None:
        exe = exe or find_chromium()
        if exe is None:
            raise FileNotFoundError("Chromium is not installed")
        self._profile = tempfile.TemporaryDirectory(prefix="privgate-chromium-")
        self._pipe = _Pipe(exe, self._profile.name)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pipe.close()
        self._profile.cleanup()

    def render(
        self,
        url: str,
        *,
        width: int,
        height: int,
        mobile: bool = False,
        evaluate: dict[str, str] | None = None,
        full_page: bool = True,
    ) -> Page:
        """Open ``url`` at ``width`` × ``height`` CSS pixels, evaluate ``evaluate`` expressions, screenshot it."""
        pipe = self._pipe
        pipe.events = []
        context = pipe.send("Target.createBrowserContext")["browserContextId"]
        try:
            target = pipe.send("Target.createTarget", {"url": "about:blank", "browserContextId": context})["targetId"]
            session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                pipe.send(f"{domain}.enable", session=session)
            pipe.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
                session=session,
            )
            pipe.send("Page.navigate", {"url": url}, session=session)
            pipe.wait_for("Page.loadEventFired", session)
            page = Page()
            for name, expr in (evaluate or {}).items():
                res = pipe.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=session)
                if "exceptionDetails" in res:
                    raise RuntimeError(f"evaluating {name}: {res['exceptionDetails'].get('text')}")
                page.values[name] = res["result"].get("value")
            shot = pipe.send(
                "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": full_page}, session=session
            )
            page.screenshot = base64.b64decode(shot["data"])
            page.console = _messages([e for e in pipe.events if e.get("sessionId") == session])
            return page
        finally:
            pipe.send("Target.disposeBrowserContext", {"browserContextId": context})


def _messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Console calls, uncaught exceptions and browser log entries among a page's DevTools events."""
    console: list[dict[str, Any]] = []
    for e in events:
        p = e.get("params", {})
        if e.get("method") == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            console.append({"source": "console", "level": p.get("type"), "text": text})
        elif e.get("method") == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            text = d.get("exception", {}).get("description") or d.get("text")
            console.append({"source": "exception", "level": "error", "text": text})
        elif e.get("method") == "Log.entryAdded":
            entry = p.get("entry", {})
            text = f"{entry.get('text')} {entry.get('url', '')}".strip()
            console.append({"source": entry.get("source"), "level": entry.get("level"), "text": text})
    return console
