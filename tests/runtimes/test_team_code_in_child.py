"""Issue 33, reproduction 8: the team's code never runs in the web process. Through gunicorn as the Procfile starts
it: a chat turn of a runtime agent runs in a child process with a deadline, so an entry that aborts, exits or hangs
costs that turn an Error naming the entry, never a server worker, and one hanging import blocks no other agent."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from agenthost.models import Agent
from agenthost.testing.openai_stub import OpenAIStub
from tests.test_web_path import (
    BASE_DIR,
    STAFF_PASSWORD,
    free_port,
    procfile_web_command,
    server_env,
    signed_in,
    staff_create,
)
from tests.workers import WAIT_SECONDS

# What these tests answer hangs on the team's code in processes of its own, not on the database
# engine: the PostgreSQL pass runs them, once.
pytestmark = [pytest.mark.slow, pytest.mark.production_engine]

# A plain loop as a team writes it: asks its model once and answers what it said.
HEALTHY = """
def respond(messages, client, tools):
    completion = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    return completion.choices[0].message.content
"""
# Leaves the process the moment it is imported.
EXITS = """
import sys

sys.exit(3)


def respond(messages, client, tools):
    return "never"
"""
# Says it started importing, then waits (polling a file) until the test lets it go: as long as the test wants.
HANGS = """
import os
import time
from pathlib import Path

MARKERS = Path(os.environ["TEAM_MARKERS"])
(MARKERS / "import-started").touch()
while not (MARKERS / "release").exists():
    time.sleep(0.05)


def respond(messages, client, tools):
    return "Released at last."
"""
# Answers, and leaves a thread behind that never ends.
LEAVES_A_THREAD = """
import threading
import time


def respond(messages, client, tools):
    threading.Thread(target=lambda: time.sleep(10_000)).start()
    return "Done, with a thread left running."
"""
REPLY = "Hello from the stub model."


def _team_package(root: Path, name: str, source: str) -> str:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "bot.py").write_text(textwrap.dedent(source))
    return f"{name}.bot"


@contextmanager
def _served(tmp_path: Path, **extra_env: str) -> Iterator[tuple[httpx.Client, Path, Path]]:
    """gunicorn with the team's repository on its import path and the stub as model `stub:gpt-4o-mini`; yields a
    signed-in staff client, the team's repository and the server's log."""
    team = tmp_path / "team"
    markers = tmp_path / "markers"
    team.mkdir()
    markers.mkdir()
    with OpenAIStub(strict_content=False) as stub:
        stub.respond_with(lambda body: REPLY)
        providers = tmp_path / "providers.toml"
        providers.write_text(
            f'[providers.stub]\nkind = "openai"\nbase_url = "{stub.base_url}"\ntimeout = 30\nmax_retries = 0\n\n'
            '[[providers.stub.models]]\nname = "gpt-4o-mini"\n'
        )
        env = server_env(
            tmp_path, AGENTTEST_PROVIDERS_FILE=str(providers), PYTHONPATH=str(team), TEAM_MARKERS=str(markers),
            OPENAI_API_KEY="unused", **extra_env,
        )
        log = tmp_path / "gunicorn.log"
        with _web_server(env, log) as base_url, signed_in(base_url, "staff", STAFF_PASSWORD) as client:
            yield client, team, log


@contextmanager
def _web_server(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """The Procfile's gunicorn until the block ends; yields its base URL once it answers (a start-up a loaded machine
    may take long over: the wait is a safety net, no verdict)."""
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            procfile_web_command(port), cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        until = time.monotonic() + 180
        while True:
            assert process.poll() is None, f"gunicorn exited\n{log_path.read_text(errors='replace')[-4000:]}"
            try:
                if httpx.get(f"{base_url}/accounts/login/", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < until, f"gunicorn never answered\n{log_path.read_text(errors='replace')}"
            time.sleep(0.2)
        yield base_url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def _agent(name: str, runtime: str, entry: str) -> Agent:
    # Straight into the database, as an agent saved before its module changed: the save's own check is tested apart.
    return Agent.objects.create(name=name, runtime=runtime, entry=entry, provider="stub", model="gpt-4o-mini")


def _chat(client: httpx.Client, agent: str, text: str = "Hi") -> httpx.Response:
    conversation = client.post("/api/conversations/", json={"agent": agent})
    assert conversation.status_code == 201, conversation.text
    return client.post(f"/api/conversations/{conversation.json()['id']}/messages/", json={"text": text})


def _booted_workers(log: Path) -> int:
    return len(re.findall(r"Booting worker", log.read_text(errors="replace")))


def test_it_answers_an_aborting_entry_with_an_error_naming_it_and_keeps_serving(
    transactional_db, django_user_model, tmp_path
):
    staff_create(django_user_model)
    with _served(tmp_path) as (client, team, log):
        healthy = _team_package(team, "healthy_shop", HEALTHY)
        # os.abort takes no argument: as an Agents SDK factory it passes the save's check, and aborts when called.
        created = client.post("/api/agents/", json={
            "name": "aborter", "runtime": "openai-agents", "entry": "os:abort", "provider": "stub",
            "model": "gpt-4o-mini",
        })
        assert created.status_code == 201, created.text
        _agent("shop", "python", f"{healthy}:respond")
        workers = _booted_workers(log)

        aborted = _chat(client, "aborter")
        answered = _chat(client, "shop")
        booted_after = _booted_workers(log)

    assert aborted.status_code == 422, aborted.text
    assert aborted.json()["code"] == "agent_code_error"
    assert "os:abort" in aborted.json()["detail"] and "SIGABRT" in aborted.json()["detail"], aborted.json()
    assert answered.status_code == 200, answered.text
    assert answered.json()["output"] == REPLY
    # No worker died and was replaced.
    assert booted_after == workers, log.read_text(errors="replace")


def test_it_answers_an_entry_that_exits_at_import_with_an_error_naming_it(
    transactional_db, django_user_model, tmp_path
):
    staff_create(django_user_model)
    with _served(tmp_path) as (client, team, log):
        exits = _team_package(team, "exiting_shop", EXITS)
        healthy = _team_package(team, "healthy_shop", HEALTHY)
        _agent("quitter", "python", f"{exits}:respond")
        _agent("shop", "python", f"{healthy}:respond")
        workers = _booted_workers(log)

        exited = _chat(client, "quitter", "Where is my order?")
        conversation = exited.json()["partial"]["conversation_id"]
        transcript = client.get(f"/api/conversations/{conversation}/messages/").json()["results"]
        answered = _chat(client, "shop")
        booted_after = _booted_workers(log)

    assert exited.status_code == 422, exited.text
    assert f"{exits}:respond" in exited.json()["detail"] and "SystemExit" in exited.json()["detail"], exited.json()
    # The turn is written as far as it got, as any failed turn: the user's message.
    assert [(m["role"], m["content"]) for m in transcript] == [("user", "Where is my order?")]
    assert answered.status_code == 200 and answered.json()["output"] == REPLY, answered.text
    assert booted_after == workers, log.read_text(errors="replace")


def test_it_answers_another_agents_chat_while_an_entry_import_hangs(transactional_db, django_user_model, tmp_path):
    staff_create(django_user_model)
    markers = tmp_path / "markers"
    with _served(tmp_path) as (client, team, _log), ThreadPoolExecutor(1) as pool:
        hangs = _team_package(team, "hanging_shop", HANGS)
        healthy = _team_package(team, "healthy_shop", HEALTHY)
        _agent("hanger", "python", f"{hangs}:respond")
        _agent("shop", "python", f"{healthy}:respond")

        hanging = pool.submit(_chat, client, "hanger")
        # Safety net only: the import starts when its child does.
        until = time.monotonic() + WAIT_SECONDS
        while not (markers / "import-started").exists():
            assert time.monotonic() < until and not hanging.done(), "the hanging entry's import never started"
            time.sleep(0.05)
        answered = _chat(client, "shop")
        # The import cannot have finished: it waits for the release, which comes only now.
        still_hanging = not hanging.done()
        (markers / "release").touch()
        released = hanging.result()

    assert answered.status_code == 200 and answered.json()["output"] == REPLY, answered.text
    assert still_hanging
    assert released.status_code == 200 and released.json()["output"] == "Released at last.", released.text


def test_it_ends_a_turn_whose_import_never_returns_at_its_deadline(transactional_db, django_user_model, tmp_path):
    staff_create(django_user_model)
    with _served(tmp_path, AGENTTEST_REQUEST_TIMEOUT="8") as (client, team, log):
        hangs = _team_package(team, "hanging_shop", HANGS)
        _agent("hanger", "python", f"{hangs}:respond")

        hung = _chat(client, "hanger")
        conversation = hung.json()["partial"]["conversation_id"]
        again = client.post(f"/api/conversations/{conversation}/messages/", json={"text": "Hello?"})

    assert hung.status_code == 422, hung.text
    assert f"{hangs}:respond" in hung.json()["detail"] and "deadline" in hung.json()["detail"], hung.json()
    # The claim was given back with the failure: the next send is not refused as a concurrent turn.
    assert again.status_code == 422 and again.json()["code"] == "agent_code_error", again.text
    assert "WORKER TIMEOUT" not in log.read_text(errors="replace")


def test_it_answers_a_turn_that_leaves_a_thread_running(transactional_db, django_user_model, tmp_path):
    staff_create(django_user_model)
    with _served(tmp_path) as (client, team, _log):
        threads = _team_package(team, "threaded_shop", LEAVES_A_THREAD)
        _agent("threader", "python", f"{threads}:respond")

        answered = _chat(client, "threader")

    assert answered.status_code == 200, answered.text
    assert answered.json()["output"] == "Done, with a thread left running."
