"""Real MCP servers for the MCP tests: the SDK-written order server (order_server.py) over stdio and over
streamable HTTP on a free local port, and the PyPI reference server `mcp-server-time` over stdio. Everything is
local; every server's tools leave marker files when really called, and the order server one when it starts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenthost.mcp import client
from common.mcp_config import normalise
from tests.ports import free_port
from tests.workers import WAIT_SECONDS

ORDER_SERVER = Path(__file__).with_name("order_server.py")


class Markers:
    def __init__(self, root: Path) -> None:
        self.root = root

    def called(self, tool: str = "") -> list[Path]:
        return sorted(self.root.glob(f"called-{tool}-*" if tool else "called-*"))

    def listed(self) -> list[Path]:
        return sorted(self.root.glob("listed-*"))

    def started(self) -> list[Path]:
        return sorted(self.root.glob("started-*"))

    def clear(self) -> None:
        for path in self.root.iterdir():
            path.unlink()

    @property
    def listing_file(self) -> Path:
        """What the running order server lists on top of its own tools (order_server.py, $MCP_LISTING_FILE); kept
        beside the markers' directory, so clearing the markers leaves it."""
        return self.root.with_name("listing.json")

    def list(
        self, *, annotations: dict[str, Any] | None = None, extra: list[dict[str, Any]] | None = None,
        status: str = "shipped",
    ) -> None:
        """Change what the order server lists from its next tools/list on, and the status its lookup_order answers
        from its next call on, without restarting it."""
        self.listing_file.write_text(
            json.dumps({"annotations": annotations or {}, "extra": extra or [], "status": status})
        )


@pytest.fixture
def markers(tmp_path: Path) -> Markers:
    root = tmp_path / "markers"
    root.mkdir()
    return Markers(root)


def order_server_spec(markers: Markers, *, variant: str = "1", call_timeout: float = 5.0) -> dict[str, Any]:
    return normalise({
        "transport": "stdio", "command": sys.executable, "args": [str(ORDER_SERVER), "stdio"],
        "env": {"MCP_MARKER_DIR": str(markers.root), "MCP_ORDERS_VARIANT": variant,
                "MCP_LISTING_FILE": str(markers.listing_file)},
        "connect_timeout": 20, "call_timeout": call_timeout,
    })


@pytest.fixture
def mcp_servers(settings: Any, markers: Markers) -> Iterator[dict[str, dict[str, Any]]]:
    """`orders` (stdio, the SDK-written server) and `time` (mcp-server-time from PyPI, stdio) configured; every
    session stopped afterwards."""
    servers = {
        "orders": order_server_spec(markers),
        "time": normalise({
            "command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
            "connect_timeout": 30, "call_timeout": 10,
        }),
    }
    settings.AGENTTEST_MCP_SERVERS = servers
    yield servers
    client.shutdown()


class HttpOrderServer:
    """The order server's HTTP process on one port; `restart()` stops it and starts a new one on the same port."""

    def __init__(self, markers: Markers) -> None:
        self.markers = markers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        """What every process of this server wrote, one after the other: a test that fails on it can say why."""
        return self.markers.root.with_name(f"http-{self.port}.log")

    def said(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def start(self) -> None:
        with self.log.open("a") as log:
            log.write(f"--- started at {time.time():.3f}\n")
            self.process = subprocess.Popen(
                [sys.executable, str(ORDER_SERVER), "http", str(self.port)],
                env={**os.environ, "MCP_MARKER_DIR": str(self.markers.root),
                     "MCP_LISTING_FILE": str(self.markers.listing_file)},
                stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError("the HTTP order server did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
            with self.log.open("a") as log:
                log.write(f"--- killed at {time.time():.3f}\n")


@pytest.fixture
def http_server(markers: Markers) -> Iterator[HttpOrderServer]:
    server = HttpOrderServer(markers)
    server.start()
    yield server
    client.shutdown()
    server.stop()


@pytest.fixture
def http_order_server(settings: Any, http_server: HttpOrderServer, mcp_servers: dict[str, Any]) -> Iterator[str]:
    """The order server over streamable HTTP on a free loopback port, configured as `remote`, with a header taken
    from an environment variable."""
    url = http_server.url
    settings.AGENTTEST_MCP_SERVERS = {
        **mcp_servers,
        "remote": normalise({"transport": "http", "url": url, "headers_from": {"X-Team": "MCP_TEST_TEAM"},
                             "connect_timeout": 20, "call_timeout": 5}),
    }
    yield url
