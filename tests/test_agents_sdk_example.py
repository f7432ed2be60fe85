"""examples/agents-sdk-shop as a team runs it: its unchanged OpenAI Agents SDK code copied outside the checkout, with
only the built wheel (and the `openai-agents` extra) installed. The two models are the scripted provider (in-process)
and the local OpenAI-compatible stub, run as `python -m agenthost.testing.openai_stub`.

The shop's `cancel_order` and `send_email` write files under `shop-data/` — the markers that show a real effect."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.package_env import PackageEnv, package_env_fixture  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.installed]

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "agents-sdk-shop"
# Every connection to another machine goes to a proxy that refuses it; in replay the model endpoint itself is a
# closed port. Only the local stub (chat, live, record) is reachable.
REFUSED = "http://127.0.0.1:9"
EXAMPLE_URL = "http://127.0.0.1:8001/v1"
MODELS = "scripted:shop-script,local:gpt-4o-mini"
INSTRUCTION = "Hand cancellations to the orders agent."


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Stub:
    """The stub as a team starts it, serving the example's script, in a process of the installed virtualenv."""

    def __init__(self, package_env: PackageEnv, repo: Path) -> None:
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process = subprocess.Popen(
            [str(package_env.python), "-m", "agenthost.testing.openai_stub", "--port", str(self.port),
             "--script", "script.json", "--lenient-content"],
            cwd=repo, env=package_env.environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.process.poll() is None, self.process.stdout.read()
                time.sleep(0.1)
        raise AssertionError(f"the OpenAI stub did not listen on port {self.port}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    copy = tmp_path / "agents-sdk-shop"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__", "shop-data"))
    return copy


@pytest.fixture
def stub(package_env: PackageEnv, repo: Path) -> Iterator[Stub]:
    running = Stub(package_env, repo)
    _point_local_at(repo, running.base_url)
    try:
        yield running
    finally:
        running.stop()
        _point_local_at(repo, f"{REFUSED}/v1")


def _point_local_at(repo: Path, url: str) -> None:
    providers = repo / "providers.toml"
    text = providers.read_text()
    current = next(line for line in text.splitlines() if line.startswith("base_url = "))
    providers.write_text(text.replace(current, f'base_url = "{url}"'))


def _markers(repo: Path) -> list[str]:
    data = repo / "shop-data"
    return sorted(str(path.relative_to(data)).split("/")[0] for path in data.rglob("*.txt")) if data.exists() else []


def _agenttest(package_env: PackageEnv, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "AGENTTEST_PROVIDERS_FILE": "providers.toml", "AGENTTEST_DEBUG": "1",
        "HTTP_PROXY": REFUSED, "HTTPS_PROXY": REFUSED, "ALL_PROXY": REFUSED, "NO_PROXY": "127.0.0.1,localhost",
    }
    return package_env.run_in_venv(["agenttest", *args], cwd=repo, env=env)


def _shell(package_env: PackageEnv, repo: Path, code: str) -> object:
    """Runs `code` in `agenttest shell` on the repository's own database (./var); returns what it prints as JSON."""
    done = _agenttest(package_env, repo, "shell", "-c", textwrap.dedent(code))
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _results(path: Path) -> dict[tuple[str, str], dict]:
    return {(item["case"], item["model"]): item for item in json.loads(path.read_text())["results"]}


def test_it_runs_the_teams_real_tools_in_chat_and_names_the_agent_of_each_call(package_env, repo, stub):
    prepared = _agenttest(package_env, repo, "migrate", "-v0")
    assert prepared.returncode == 0, prepared.stderr
    applied = _agenttest(package_env, repo, "apply", ".")
    assert applied.returncode == 0, applied.stdout + applied.stderr

    chat = _shell(package_env, repo, """
        import json
        from agenthost.models import Agent
        from agenthost.services import conversation_send, conversation_start
        result = conversation_send(conversation=conversation_start(agent=Agent.objects.get(name="shop")),
                                   text="Please cancel order 1043, I ordered the wrong size.")
        print(json.dumps({"output": result.output, "chain": result.agent_chain,
                          "calls": [[call.name, call.agent, call.outcome] for call in result.tool_calls]}))
    """)

    assert chat["output"] == "Order 1043 is cancelled, and we emailed you a confirmation."
    # In chat the shop's own functions ran, through the SDK's invocation: the order was cancelled and the email sent.
    assert _markers(repo) == ["cancelled", "outbox"]
    assert chat["calls"] == [
        ["transfer_to_orders_agent", "Triage agent", "routed"],
        ["cancel_order", "Orders agent", "executed"],
        ["send_email", "Orders agent", "executed"],
    ]
    assert chat["chain"] == ["shop", "Orders agent"]


def test_it_mocks_the_suite_on_two_models_and_blocks_the_unmocked_cancel(package_env, repo, stub):
    done = _agenttest(package_env, repo, "run", ".", "--models", MODELS, "--results", "results.json")

    assert done.returncode == 1, done.stdout + done.stderr
    results = _results(repo / "results.json")
    assert sorted(results) == sorted(
        (case, model)
        for case in ("Status is looked up", "Cancellation is handed over and confirmed", "Unmocked cancel is blocked")
        for model in MODELS.split(",")
    )
    for (case, model), result in results.items():
        if case == "Unmocked cancel is blocked":
            assert result["status"] == "failed", (model, result)
            assert result["reason"].startswith("cancel_order has no mock, so it was blocked"), result["reason"]
        else:
            assert result["status"] == "passed", (case, model, result["reason"])
    # Nothing the shop's tools do happened: every call was mocked or blocked, none ran.
    assert _markers(repo) == []


def test_it_replays_offline_and_reports_a_changed_instruction_in_the_teams_code_stale(package_env, repo):
    # The committed recordings replay on the wheel with no model and no network.
    committed = _agenttest(package_env, repo, "run", ".", "--suite", "shop", "--models", MODELS, "--mode", "replay")
    assert committed.returncode == 0, committed.stdout + committed.stderr

    stub = Stub(package_env, repo)
    _point_local_at(repo, stub.base_url)
    try:
        recorded = _agenttest(package_env, repo, "run", ".", "--suite", "shop", "--models", MODELS,
                              "--mode", "record")
    finally:
        stub.stop()
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    _point_local_at(repo, f"{REFUSED}/v1")

    replayed = _agenttest(package_env, repo, "run", ".", "--suite", "shop", "--models", MODELS, "--mode", "replay",
                          "--results", "results.json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert {item["status"] for item in _results(repo / "results.json").values()} == {"passed"}

    code = repo / "shop" / "agents.py"
    assert INSTRUCTION in code.read_text()
    code.write_text(code.read_text().replace(INSTRUCTION, "Hand every cancellation to the orders agent."))
    stale = _agenttest(package_env, repo, "run", ".", "--suite", "shop", "--models", MODELS, "--mode", "replay",
                       "--results", "stale.json")

    assert stale.returncode == 2, stale.stdout + stale.stderr
    results = _results(repo / "stale.json")
    assert {item["status"] for item in results.values()} == {"error"}
    for result in results.values():
        assert result["reason"].startswith("stale recording: the request at turn 0 step 0 differs"), result["reason"]
        assert "First difference: messages[0].content" in result["reason"]
        assert "now '…u say anything about it. Hand every cancellation" in result["reason"]
    assert _markers(repo) == []


def test_it_replays_the_sdks_loop_step_by_step_with_as_many_model_calls_as_recorded(package_env, repo, stub):
    # The scripted provider logs every request it is sent: the framework's model calls while recording.
    providers = repo / "providers.toml"
    providers.write_text(providers.read_text().replace('script = "script.json"',
                                                       'script = "script.json"\nrequests_log = "requests.jsonl"'))
    for command in (["migrate", "-v0"], ["apply", "."]):
        done = _agenttest(package_env, repo, *command)
        assert done.returncode == 0, done.stdout + done.stderr
    recorded = _agenttest(package_env, repo, "run_suite", "shop", "--models", MODELS, "--mode", "record", "--inline")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    sent_to_scripted = len((repo / "requests.jsonl").read_text().splitlines())
    stub.stop()
    _point_local_at(repo, f"{REFUSED}/v1")

    replayed = _agenttest(package_env, repo, "run_suite", "shop", "--models", MODELS, "--mode", "replay", "--inline")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr

    runs = _shell(package_env, repo, """
        import json
        from runs.models import CaseResult
        print(json.dumps([
            {"mode": result.run.mode, "case": result.case_name, "model": result.model, "status": result.status,
             "model_calls": sum(1 for m in result.transcript if m["role"] == "assistant"),
             "calls": [[call["name"], call["agent"], call["outcome"]] for call in result.tool_calls],
             "results": [[m["function"], m["outcome"]] for m in result.transcript if m["role"] == "tool_result"]}
            for result in CaseResult.objects.select_related("run").order_by("run_id", "case_name", "model")
        ]))
    """)

    by_mode: dict[str, dict[tuple[str, str], dict]] = {}
    for result in runs:
        assert result["status"] == "passed", result
        by_mode.setdefault(result["mode"], {})[(result["case"], result["model"])] = result
    record, replay = by_mode["record"], by_mode["replay"]
    assert sorted(record) == sorted(replay) and len(record) == 4
    # Each of the SDK's model calls was recorded as one step and replayed as one: the loop ran again, step by step.
    assert {key: result["model_calls"] for key, result in replay.items()} == {
        key: result["model_calls"] for key, result in record.items()
    }
    on_scripted = sum(result["model_calls"] for (_, model), result in replay.items() if model.startswith("scripted"))
    assert on_scripted == sent_to_scripted == 2 + 4
    # The hand-off is in the transcript as routing, and the calls after it are the orders agent's, in the replay as
    # in the recording.
    for mode in (record, replay):
        cancellation = mode[("Cancellation is handed over and confirmed", "local:gpt-4o-mini")]
        assert cancellation["results"] == [
            ["transfer_to_orders_agent", "routed"], ["cancel_order", "mocked"], ["send_email", "mocked"],
        ]
        assert cancellation["calls"] == [
            ["cancel_order", "Orders agent", "mocked"], ["send_email", "Orders agent", "mocked"],
        ]
    assert _markers(repo) == []
