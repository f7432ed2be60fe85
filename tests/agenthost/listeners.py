"""A local HTTP listener on 127.0.0.1 that records every request reaching it: proof of what a tool really sent."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LocalServer:
    host_port: str
    received: list[Received] = field(default_factory=list)
    # (status, content type, body) per request path; anything else answers 200 with a small text body.
    responses: dict[str, tuple[int, str, bytes]] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://{self.host_port}"


@pytest.fixture
def local_server() -> Iterator[LocalServer]:
    server_state: LocalServer

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            server_state.received.append(Received(self.command, self.path, dict(self.headers.items()), body))
            if self.path in server_state.redirects:
                self.send_response(302)
                self.send_header("Location", server_state.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status, content_type, payload = server_state.responses.get(
                self.path, (200, "text/plain", b"hello from the local server")
            )
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keeps pytest output clean
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_state = LocalServer(host_port=f"127.0.0.1:{httpd.server_address[1]}")
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server_state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
