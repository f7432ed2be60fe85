"""The web process as the Procfile starts it: gunicorn over real HTTP, on the test database, with a local
OpenAI-compatible server playing the model.

A chat turn and an extraction run the whole model loop inside their request, so the web server must outlive a slow
model; throttles must count across every web process, not per process.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.hashers import make_password
from rest_framework.authtoken.models import Token

from agenthost.testing.openai_stub import OpenAIStub
from recording.segmenter import SYSTEM_PROMPT
from tests import workers
from tests.ports import free_port

BASE_DIR = Path(__file__).resolve().parent.parent
MODEL_DELAY_SECONDS = 45
STAFF_PASSWORD = "staff-password-123"


def procfile_web_command(port: int) -> list[str]:
    """The Procfile's web command, bound to 127.0.0.1:<port> instead of its production address."""
    line = next(line for line in (BASE_DIR / "Procfile").read_text().splitlines() if line.startswith("web:"))
    command = shlex.split(line.removeprefix("web:"))
    assert command[:2] == ["agenttest", "serve"], line
    # `python -m agenttest` is the `agenttest` command, and needs no install of the package in the virtualenv.
    command[:1] = [sys.executable, "-m", "agenttest"]
    binds = [index for index, word in enumerate(command) if word in ("--bind", "-b")]
    assert len(binds) == 1, line
    command[binds[0] + 1] = f"127.0.0.1:{port}"
    return command


def server_env(var_dir: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AGENTTEST_", "CELERY_"))}
    env.update(
        DATABASE_URL=workers.test_database_url(),
        AGENTTEST_DEBUG="1",
        AGENTTEST_VAR_DIR=str(var_dir),
        OPENAI_API_KEY="",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@contextmanager
def procfile_web_server(env: dict[str, str], log_path: Path, *, ready_within: float = 30) -> Iterator[str]:
    """Serves until the block ends; yields the base URL once the server answers (a hang if not in `ready_within`)."""
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            procfile_web_command(port), cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_within
        while True:
            assert process.poll() is None, f"gunicorn exited\n{log_path.read_text(errors='replace')[-4000:]}"
            try:
                if httpx.get(f"{base_url}/accounts/login/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"gunicorn never answered\n{log_path.read_text(errors='replace')}"
            time.sleep(0.2)
        yield base_url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


@contextmanager
def signed_in(base_url: str, username: str, password: str) -> Iterator[httpx.Client]:
    """A client logged in through the login form, sending the CSRF token the session needs."""
    with httpx.Client(base_url=base_url, timeout=3 * MODEL_DELAY_SECONDS) as client:
        page = client.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        answer = client.post(
            "/accounts/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": token}
        )
        assert answer.status_code == 302, answer.text
        client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
        yield client


class SlowModel:
    """The stub's answers: at once while the conversation is set up, then MODEL_DELAY_SECONDS per call."""

    def __init__(self) -> None:
        self.slow = threading.Event()

    def __call__(self, body: dict) -> str:
        if self.slow.is_set():
            time.sleep(MODEL_DELAY_SECONDS)
        messages = body["messages"]
        if messages[0].get("content") == SYSTEM_PROMPT:
            turns = json.loads(messages[-1]["content"])["turns"]
            return json.dumps({"segments": [{"name": "Say hello", "firstTurn": 0, "lastTurn": len(turns) - 1}]})
        return "Hello, how can I help?"


@pytest.mark.parametrize("limit", [5, 120, 300])
def test_it_gives_the_procfile_web_server_the_request_timeout_and_threads(tmp_path, limit):
    printed = subprocess.run(
        [*procfile_web_command(free_port()), "--print-config"], cwd=BASE_DIR, capture_output=True, text=True,
        # Only a guard against a hang: a loaded machine took over 60 s to import and print the configuration.
        env=server_env(tmp_path, AGENTTEST_REQUEST_TIMEOUT=str(limit)), timeout=240,
    )
    assert printed.returncode == 0, printed.stderr
    config = dict(re.findall(r"^(\w+)\s+= (.*)$", printed.stdout, re.MULTILINE))
    # Past the limit, so a request that uses all of it is answered, not cut off with its worker.
    assert int(config["timeout"]) > limit and int(config["graceful_timeout"]) > limit
    assert config["worker_class"] == "gthread" and int(config["threads"]) > 1


def staff_create(django_user_model):
    # The web processes are gunicorn's, checking passwords with production's hashers, not the tests' fast one.
    return django_user_model.objects.create(
        username="staff", is_staff=True, password=make_password(STAFF_PASSWORD, hasher="pbkdf2_sha256")
    )


@pytest.mark.slow
def test_it_completes_a_chat_turn_and_an_extraction_on_a_model_slower_than_gunicorns_default_timeout(
    transactional_db, django_user_model, tmp_path
):
    staff_create(django_user_model)
    model = SlowModel()
    with OpenAIStub(models=("slow-model",)) as stub:
        stub.respond_with(model)
        providers = tmp_path / "providers.toml"
        providers.write_text(
            f'[providers.stub]\nkind = "openai"\nbase_url = "{stub.base_url}"\ntimeout = 60\nmax_retries = 0\n\n'
            '[[providers.stub.models]]\nname = "slow-model"\n'
        )
        log_path = tmp_path / "gunicorn.log"
        env = server_env(tmp_path, AGENTTEST_PROVIDERS_FILE=str(providers))
        with procfile_web_server(env, log_path) as base_url, signed_in(base_url, "staff", STAFF_PASSWORD) as client:
            agent = client.post("/api/agents/", json={
                "name": "greeter", "instruction": "Greet the user.", "provider": "stub", "model": "slow-model",
            })
            assert agent.status_code == 201, agent.text
            conversation = client.post("/api/conversations/", json={"agent": "greeter"})
            assert conversation.status_code == 201, conversation.text
            messages = f"/api/conversations/{conversation.json()['id']}/messages/"
            for text in ("Hi there", "Can you hear me?"):
                assert client.post(messages, json={"text": text}).status_code == 200

            model.slow.set()
            started = time.monotonic()
            with ThreadPoolExecutor(2) as pool:
                turn = pool.submit(client.post, messages, json={"text": "Still there?"})
                extraction = pool.submit(client.post, "/api/extractions/", json={
                    "conversation": conversation.json()["id"], "extraction_model": "stub:slow-model",
                })
                turn, extraction = turn.result(), extraction.result()
            elapsed = time.monotonic() - started

    assert turn.status_code == 200, turn.text
    assert turn.json()["output"] == "Hello, how can I help?"
    assert extraction.status_code == 201, extraction.text
    assert [case["name"] for case in extraction.json()["cases"]] == ["Say hello"]
    # Side by side, not one after the other: a long request holds a thread, not the whole server.
    assert elapsed < 2 * MODEL_DELAY_SECONDS, elapsed
    log = log_path.read_text(errors="replace")
    assert "WORKER TIMEOUT" not in log, log


@pytest.mark.parametrize("cache_url", ["", workers.REDIS_URL], ids=["default-database-cache", "redis"])
def test_it_counts_a_throttle_across_web_processes(transactional_db, django_user_model, tmp_path, cache_url):
    if cache_url:
        workers.flush_redis_queue(cache_url)
    staff = staff_create(django_user_model)
    token = Token.objects.create(user=staff).key
    env = server_env(tmp_path, AGENTTEST_THROTTLE_RECORDING="4/hour")
    if cache_url:
        env["AGENTTEST_CACHE_URL"] = cache_url
    with (
        procfile_web_server(env, tmp_path / "first.log") as first,
        procfile_web_server(env, tmp_path / "second.log") as second,
    ):
        statuses = [
            httpx.post(
                f"{base_url}/api/recordings/", json={"conversation": 999_999},
                headers={"Authorization": f"Token {token}"}, timeout=30,
            ).status_code
            for base_url in (first, second, first, second, first)
        ]
    # Four requests are within the rate wherever they land; the fifth is over it although its process saw only two.
    assert statuses == [400, 400, 400, 400, 429]
