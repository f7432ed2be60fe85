"""The demo's server prints each log line once (issue 25, item 9): Django's own configuration gave the `django` logger a
console handler and let it propagate to the root's, so with DEBUG on every "Not Found: …" was printed twice."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.test_web_path import free_port
from tests.workers import WAIT_SECONDS

BASE_DIR = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.own_database


def test_it_prints_each_line_of_the_demo_server_once(tmp_path):
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AGENTTEST_", "CELERY_", "DJANGO_"))}
    env.pop("DATABASE_URL", None)
    # As scripts/demo serves it: the demo plugin on, DEBUG on, runserver.
    env.update(
        AGENTTEST_DEMO="1",
        AGENTTEST_DEBUG="1",
        AGENTTEST_VAR_DIR=str(tmp_path),
        OPENAI_API_KEY="",
        PYTHONUNBUFFERED="1",
    )
    output = tmp_path / "server.out"
    with open(output, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            assert server.poll() is None, output.read_text(errors="replace")
            try:
                missing = httpx.get(f"http://127.0.0.1:{port}/no-page-here/", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, output.read_text(errors="replace")
                time.sleep(0.3)
        assert missing.status_code == 404
        deadline = time.monotonic() + WAIT_SECONDS
        while '"GET /no-page-here/ HTTP/1.1" 404' not in output.read_text(errors="replace"):
            assert time.monotonic() < deadline, output.read_text(errors="replace")
            time.sleep(0.1)
    finally:
        server.terminate()
        server.wait(10)
    lines = output.read_text(errors="replace").splitlines()
    assert lines.count("Not Found: /no-page-here/") == 1, lines
    requests = [line for line in lines if '"GET /no-page-here/ HTTP/1.1" 404' in line]
    assert len(requests) == 1 and requests[0].startswith("["), "runserver's request line, once, with its time"
