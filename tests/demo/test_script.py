"""`bash scripts/demo` as a new user runs it (issue 16, item 11): it serves on `PORT`, refuses a taken port before it
installs or starts anything, prints no raw email while setting up, its worker logs no duplicate delivery when it
takes the demo run, a missing page is the project's 404 page (the demo runs with DEBUG on), and the favicon that
every admin page asks for exists."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.test_web_path import free_port, signed_in
from tests.workers import WAIT_SECONDS

BASE_DIR = Path(__file__).resolve().parents[2]
DEMO = ["bash", str(BASE_DIR / "scripts" / "demo")]
ADMIN_PASSWORD = "demo-admin-password-1"

pytestmark = pytest.mark.own_database


def demo_env(var_dir: Path, port: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AGENTTEST_", "CELERY_", "DJANGO_"))}
    env.pop("DATABASE_URL", None)
    env.update(
        PORT=port, AGENTTEST_VAR_DIR=str(var_dir), AGENTTEST_ADMIN_PASSWORD=ADMIN_PASSWORD, OPENAI_API_KEY="",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def listener() -> Iterator[int]:
    """A port something else is listening on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_it_refuses_a_port_in_use_before_installing_or_starting_anything(tmp_path, listener):
    # Nothing installed or started shows it refused first; how long that took depends on the machine (issue 40).
    finished = subprocess.run(DEMO, env=demo_env(tmp_path, str(listener)), capture_output=True, text=True,
                              timeout=WAIT_SECONDS)

    assert finished.returncode == 1
    assert finished.stderr.strip() == (
        f"scripts/demo: port {listener} is already in use on 127.0.0.1 (another server is listening there); stop it "
        "or choose another port, e.g. PORT=8001 bash scripts/demo"
    )
    assert finished.stdout == "", "nothing was installed, migrated or started"
    assert not (tmp_path / "worker.log").exists() and not (tmp_path / "agenttest.sqlite3").exists()


@pytest.mark.parametrize("port", ["http", "0", "65536", "80 81", "-1"])
def test_it_refuses_a_port_that_is_not_a_port_number(tmp_path, port):
    finished = subprocess.run(DEMO, env=demo_env(tmp_path, port), capture_output=True, text=True, timeout=WAIT_SECONDS)

    assert finished.returncode == 2
    assert finished.stderr.strip() == f"scripts/demo: PORT must be a port number from 1 to 65535, got '{port}'"
    assert finished.stdout == ""


def test_it_serves_the_demo_on_port_with_a_clean_setup_and_worker_log(tmp_path):
    port = free_port()
    output = tmp_path / "demo.out"
    with open(output, "wb") as out:
        process = subprocess.Popen(
            DEMO, cwd=BASE_DIR, env=demo_env(tmp_path, str(port)), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 420
        while True:
            assert process.poll() is None, f"scripts/demo exited\n{output.read_text(errors='replace')[-4000:]}"
            try:
                if httpx.get(f"{base_url}/accounts/login/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the demo never answered\n{output.read_text(errors='replace')}"
            time.sleep(0.5)

        setup = output.read_text(errors="replace")
        assert f"open http://127.0.0.1:{port} and log in as admin" in setup
        assert "Content-Type:" not in setup and "Kind regards" not in setup, "no raw email in the setup output"
        assert (
            "The demo's email to ana@example.com ('Order 1043 is now cancelled') was held in memory, not sent."
            in setup
        )

        favicon = httpx.get(f"{base_url}/favicon.ico")
        assert (favicon.status_code, favicon.headers["content-type"]) == (200, "image/svg+xml")
        assert favicon.content.startswith(b"<svg")

        with signed_in(base_url, "admin", ADMIN_PASSWORD) as client:
            for missing in ("/runs/999999/", "/runs/1/results/999999/", "/no-such-page/"):
                page = client.get(missing)
                assert page.status_code == 404, missing
                assert "Page not found" in page.text and f"There is nothing at <code>{missing}</code>" in page.text
                assert "Using the URLconf" not in page.text and "DEBUG = True" not in page.text, missing
            assert client.get("/api/runs/999999/").headers["content-type"] == "application/json"

            deadline = time.monotonic() + 180
            while client.get("/api/runs/1/").json()["status"] in ("pending", "running"):
                assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text(errors="replace")
                time.sleep(1)
        # The worker re-sends the Pending demo run at start in case its message was lost: the copy that comes second
        # finds it taken, and that is routine, not a line in the log.
        log_path = tmp_path / "worker.log"
        resent = "at worker start: pending runs [1] queued again in case their message was lost"
        deadline = time.monotonic() + WAIT_SECONDS
        def tasks_done() -> bool:
            text = log_path.read_text(errors="replace")
            return text.count(" succeeded in ") >= (2 if resent in text else 1)

        while not tasks_done():
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.5)
        time.sleep(1)
        worker_log = log_path.read_text(errors="replace")
        assert worker_log.count(" received") == worker_log.count(" succeeded in "), worker_log
        for noise in ("duplicate delivery", "nothing to do", "not pending", "set to Error", "Traceback"):
            assert noise not in worker_log, worker_log
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
