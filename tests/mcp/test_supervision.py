"""Stdio server processes are supervised: stopped when the process that started them exits, and not orphaned when it
is killed outright (the server reads EOF on stdin and exits)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.mcp.conftest import Markers, order_server_spec
from tests.runtimes.programs import running
from tests.workers import WAIT_SECONDS

HOST = """
import json, os, sys, time
import django
os.environ["DJANGO_SETTINGS_MODULE"] = "agenttest.settings"
os.environ.setdefault("AGENTTEST_DEBUG", "1")
django.setup()
from django.conf import settings
settings.AGENTTEST_MCP_SERVERS = {"orders": json.loads(sys.argv[1])}
from agenthost.mcp.client import supervisor
print(supervisor().call("orders", "lookup_order", {"order_id": "1"}).text, flush=True)
if sys.argv[2] == "hold":
    time.sleep(120)
"""


def wait_dead(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not running(pid):
            return True
        time.sleep(0.1)
    return False


def host(markers: Markers, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOST, json.dumps(order_server_spec(markers)), mode],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "AGENTTEST_DEBUG": "1"},
    )


def server_pid(markers: Markers) -> int:
    [started] = markers.started()
    return int(started.name.split("-")[1])


def test_it_stops_its_servers_when_the_process_exits(markers):
    process = host(markers, "exit")
    out, _ = process.communicate(timeout=WAIT_SECONDS)
    assert json.loads(out.strip().splitlines()[-1])["status"] == "shipped"
    assert process.returncode == 0
    assert wait_dead(server_pid(markers), WAIT_SECONDS)


def test_it_leaves_no_orphan_when_the_process_is_killed(markers):
    process = host(markers, "hold")
    try:
        line = process.stdout.readline()
        assert json.loads(line)["status"] == "shipped"
        pid = server_pid(markers)
        assert running(pid)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    assert wait_dead(pid, WAIT_SECONDS)
