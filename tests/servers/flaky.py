"""A forwarding proxy on 127.0.0.1 that passes N requests to a real server, then vanishes (the server lost mid-run).

Usage: python flaky.py UPSTREAM_BASE_URL PORT N
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

UPSTREAM, PORT, LIMIT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
served = 0


class Forward(BaseHTTPRequestHandler):
    def _forward(self, body: bytes | None) -> None:
        global served
        if served >= LIMIT:
            os._exit(0)  # gone: the listening socket closes with the process
        served += 1
        req = urllib.request.Request(UPSTREAM + self.path, data=body, method=self.command)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, data = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._forward(None)

    def do_POST(self) -> None:  # noqa: N802
        self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def log_message(self, *args: object) -> None:
        pass


HTTPServer(("127.0.0.1", PORT), Forward).serve_forever()
