"""examples/langgraph-shop as a team runs it, in this process: its unchanged `create_agent` graph copied outside the
checkout, its files applied, its recordings replayed with the model endpoint a closed port, the unmocked cancel
blocked with no effect, chat running the shop's real tools, and a prompt edit in the graph's code making the replay
stale. (The same from the built wheel, and the desk's interrupt: tests/test_langgraph_example.py.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from django.core.management import call_command

from agenthost.llm.scripted import ScriptedProvider
from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start
from runs.models import CaseResult, Run
from tests.example_repo import copy_example
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "langgraph-shop"
CANCEL_REQUEST = "Please cancel order 1043, I ordered the wrong size."


class _Repo(type(Path())):  # type: ignore[misc]
    package: str


def _renamed(repo: Path, old: str, *, prompt_from: str = "", prompt_to: str = "") -> str:
    """The shop's package under a name of its own (an entry point is imported once per process, so each copy and
    each edit is a new module), its agent files pointed at it."""
    new = f"shop_{uuid.uuid4().hex[:8]}"
    (repo / old).rename(repo / new)
    graph = repo / new / "graph.py"
    graph.write_text(graph.read_text().replace(prompt_from, prompt_to))
    for agent_file in (repo / "agents").glob("*.yaml"):
        agent_file.write_text(agent_file.read_text().replace(f'"{old}.', f'"{new}.'))
    return new


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings) -> Path:
    repo = _Repo(tmp_path / "langgraph-shop")
    copy_example(EXAMPLE, repo, "var", "shop-data", "__pycache__")
    monkeypatch.chdir(repo)
    monkeypatch.syspath_prepend(str(repo))
    monkeypatch.setenv("SHOP_DATA", str(repo / "shop-data"))
    # ChatOpenAI builds its client at import, which the openai SDK refuses without a key: never used here.
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    # The example's providers.toml, its local endpoint a closed port: nothing is reachable in replay.
    settings.AGENTTEST_PROVIDERS = {
        "scripted": {"kind": "scripted", "script": str(repo / "script.json"), "models": [{"name": "shop-script"}]},
        "local": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "", "max_retries": 0,
                  "timeout": WAIT_SECONDS,
                  "models": [{"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.6, "label": ""}]},
    }
    ScriptedProvider.reset("scripted")
    repo.package = _renamed(repo, "shop")
    return repo


def _effects(repo: Path) -> list[str]:
    data = repo / "shop-data"
    return sorted(str(path.relative_to(data).parent) for path in data.rglob("*.txt")) if data.exists() else []


def _replay(repo: Path, suite: str, *, exits: int = 0) -> Run:
    """The suite replayed as CI replays it; `exits`: the exit code (1: a result failed, 2: one is an Error)."""
    code = 0
    try:
        call_command("run", str(repo), "--suite", suite, "--mode", "replay",
                     "--models", "scripted:shop-script,local:gpt-4o-mini")
    except SystemExit as exited:
        code = exited.code
    assert code == exits
    return Run.objects.filter(suite__name=suite).latest("pk")


def test_the_example_replays_offline_blocks_the_unmocked_cancel_and_goes_stale_on_a_prompt_edit(shop, capsys):
    call_command("apply", str(shop), verbosity=0)

    passed = _replay(shop, "shop")
    assert passed.status == "passed", capsys.readouterr().out
    assert CaseResult.objects.filter(run=passed, status="passed").count() == 4

    blocked = _replay(shop, "unmocked-effects", exits=1)
    results = list(CaseResult.objects.filter(run=blocked))
    assert [result.status for result in results] == ["failed", "failed"]
    assert all("cancel_order has no mock, so it was blocked" in result.reason for result in results)
    assert _effects(shop) == []

    _renamed(shop, shop.package, prompt_from="then confirm by email", prompt_to="then always confirm by email")
    stale = _replay(shop, "shop", exits=2)
    reasons = list(CaseResult.objects.filter(run=stale).values_list("reason", flat=True))
    assert len(reasons) == 4 and all(reason.startswith("stale recording") for reason in reasons)
    assert all("then always confirm by email" in reason for reason in reasons)


def test_chat_runs_the_shops_real_tools(shop):
    call_command("apply", str(shop), verbosity=0)
    Agent.objects.filter(name="shop").update(provider="scripted", model="shop-script")

    result = conversation_send(conversation=conversation_start(agent=Agent.objects.get(name="shop")),
                               text=CANCEL_REQUEST)

    assert result.output == "Order 1043 is cancelled, and we emailed you a confirmation."
    assert [(call.name, call.outcome) for call in result.tool_calls] == [
        ("cancel_order", "executed"), ("send_email", "executed"),
    ]
    assert _effects(shop) == ["cancelled", "outbox"], [(c.name, c.result) for c in result.tool_calls]
    assert result.nodes_visited == ["model", "tools", "model", "tools", "model"]
