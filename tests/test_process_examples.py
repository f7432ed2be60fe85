"""The two process-agent examples of issue 39 as a team runs them, from the built wheel outside the checkout
(tests/example_repo.py: the two models, the stub, the refused network): examples/acp-agent, a Python program speaking
the Agent Client Protocol, and examples/node-agents-sdk-shop, a TypeScript agent on @openai/agents built with npm and
spoken to over JSON lines.

For each, the whole "Done when" of issue 39 in three agenttest commands: one shell records both suites on both
models (the scripted provider and the local stub) — the mocked suite passes, the unmocked side-effecting tool is
blocked and its case Failed, and nothing happened — then chats with the agent, whose real tools run; a replay with
the stub stopped and every connection refused is green; a changed instruction in the agent's own source makes it
stale, naming what changed.

The side effects counted: the ACP agent's note, which its client writes (`fs/write_text_file`) in the conversation's
own directory and then reads back with `cat`; the Node agent's refund, which `shop_refund_order` POSTs to
SHOP_WEBHOOK_URL — a listener here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.example_repo import (
    EXAMPLES,
    MODELS,
    REFUSED,
    agenttest,
    copy_example,
    local_stub,
    node_build_share,
    node_example_build,
    npm,
    point_local_at,
    recorded_requests,
    results,
    shell,
)
from tests.package_env import PackageEnv, package_env_fixture  # noqa: F401  (the fixture)
from tests.runtimes.conftest import Listener

pytestmark = [pytest.mark.slow, pytest.mark.installed]

NOTE = "Order 1042: shipped, arrives Friday."
REFUND = {"order_id": "1042", "reason": "arrived damaged"}

# One shell on the repository's own database (./var), so that what the record run did is still on disk to count
# (`agenttest run` itself would use a scratch var directory, removed at its exit), and one command fewer: the record
# run, then the files its cases left in conversation directories, then the chat (on the agent file's scripted model)
# with `chat_env` set for it alone, so that a side effect can say which of the two made it.
RECORD_THEN_CHAT = """
import json
import os
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start

try:
    call_command("run", ".", suite={suites!r}, models={models!r}, mode="record", results="recorded.json")
    recorded = 0
except SystemExit as stopped:
    recorded = stopped.code
conversations = Path(settings.VAR_DIR, "conversations")
written = sorted(str(path.relative_to(conversations)) for path in conversations.rglob("*") if path.is_file())
os.environ.update({chat_env!r})
conversation = conversation_start(agent=Agent.objects.get(name={agent!r}))
result = conversation_send(conversation=conversation, text={text!r})
print(json.dumps({{
    "recorded": recorded, "written_under_test": written, "conversation": conversation.pk, "output": result.output,
    "calls": [[call.name, call.outcome] for call in result.tool_calls if call.outcome != "reported"],
}}))
"""


@dataclass(frozen=True)
class Example:
    """What differs between the two examples' stories: the agent and its two suites (one case each, `unmocked`
    leaving the side-effecting tool unmocked), the request the chat sends and the scripted answer to it, and the
    instruction in the agent's own source with what it becomes and where the stale replay finds it."""

    name: str
    models: str
    agent: str
    suite: str
    case: str
    unmocked_suite: str
    unmocked_case: str
    blocked: str
    request: str
    answer: str
    source: str
    instruction: str
    changed: str
    differs_at: str


ACP = Example(
    name="acp-agent", models="scripted:notes-script,local:gpt-4o-mini", agent="notes",
    suite="notes", case="Note is written", unmocked_suite="notes-unmocked", unmocked_case="Unmocked write is blocked",
    blocked="fs_write_text_file", request="Write the shipping note for order 1042.",
    answer="The shipping note for order 1042 is written: it says the order arrives Friday.",
    source="agent.py", instruction="then say in one sentence what you did.",
    changed="then say in two sentences what you did.", differs_at="messages[0].content",
)
NODE = Example(
    name="node-agents-sdk-shop", models=MODELS, agent="shop", suite="shop", case="Refund is confirmed",
    unmocked_suite="shop-unmocked", unmocked_case="Unmocked refund is blocked",
    blocked="shop_refund_order", request="Please refund order 1042, it arrived damaged.",
    answer="Order 1042 is refunded: 39.90 EUR are on their way back to your card.",
    # The SDK calls the Responses API, its instructions a field of the request.
    source="src/agent.ts", instruction="then tell the customer in one sentence what you did.",
    changed="then tell the customer in two sentences what you did.", differs_at="settings.instructions",
)


def copied(example: Example, tmp_path: Path) -> Path:
    """The example as a clone holds it (nothing built, no lock file), its local model pointed at a refused port."""
    repo = tmp_path / example.name
    copy_example(EXAMPLES / example.name, repo, "__pycache__", "var", "node_modules", "dist", "package-lock.json")
    point_local_at(repo, f"{REFUSED}/v1")
    return repo



def process_scenario(
    package_env: PackageEnv, repo: Path, example: Example, *, env: dict[str, str] | None = None,
    chat_env: dict[str, str] | None = None, rebuild: bool = False,
) -> dict:
    """The story of the module docstring for `example` copied at `repo`; returns what the chat did (its conversation,
    answer and calls), for the example's own count of its side effects. `env` is every command's, `chat_env` added
    for the chat alone; `rebuild` runs `npm run build` after the source is changed."""
    committed = recorded_requests(repo)
    models = example.models.split(",")

    with local_stub(package_env, repo):
        talked = shell(package_env, repo, RECORD_THEN_CHAT.format(
            suites=[example.suite, example.unmocked_suite], models=example.models, chat_env=chat_env or {},
            agent=example.agent, text=example.request,
        ), env)

    # Both suites on both models, every call mocked but the side-effecting one the unmocked suite leaves out, which
    # was blocked: that case Failed naming it, and the record run (exit code 1) left nothing behind.
    outcomes = results(repo / "recorded.json")
    assert talked["recorded"] == 1, outcomes
    assert sorted(outcomes) == sorted((case, model) for case in (example.case, example.unmocked_case)
                                      for model in models)
    for (case, model), result in outcomes.items():
        if case == example.unmocked_case:
            assert result["status"] == "failed", (model, result)
            assert result["reason"].startswith(f"{example.blocked} has no mock, so it was blocked"), result["reason"]
        else:
            assert result["status"] == "passed", (case, model, result["reason"])
    assert talked["written_under_test"] == []
    # Recorded on a fresh stub (its tool call ids count from 1): what the agent sends today is what is committed,
    # request for request, on both models.
    assert recorded_requests(repo) == committed
    assert {name.rsplit(".", 2)[1] for name in committed} == {model.replace(":", "-") for model in models}
    assert talked["output"] == example.answer, talked

    # The stub is gone and the local model's address refused: the replay calls no model.
    replayed = agenttest(package_env, repo, "run", ".", "--models", example.models, "--mode", "replay",
                         "--results", "replayed.json", env=env)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert {key: item["status"] for key, item in results(repo / "replayed.json").items()} == {
        (example.case, model): "passed" for model in models
    }

    source = repo / example.source
    assert example.instruction in source.read_text(), f"{example.source} no longer holds {example.instruction!r}"
    source.write_text(source.read_text().replace(example.instruction, example.changed))
    if rebuild:
        npm(repo, "run", "build")
    stale = agenttest(package_env, repo, "run", ".", "--models", example.models, "--mode", "replay",
                      "--results", "stale.json", env=env)
    assert stale.returncode == 2, stale.stdout + stale.stderr
    outcomes = results(repo / "stale.json")
    assert sorted(outcomes) == sorted((example.case, model) for model in models)
    for result in outcomes.values():
        assert result["status"] == "error", result
        assert result["reason"].startswith("stale recording: the request at turn 0 step 0 differs"), result["reason"]
        assert f"First difference: {example.differs_at}" in result["reason"], result["reason"]
        assert "in two sentences what you did." in result["reason"].partition(" now '")[2], result["reason"]
    return talked


def test_it_chats_records_on_two_models_blocks_the_write_and_replays_the_acp_agent_from_the_wheel(
    package_env, tmp_path
):
    repo = copied(ACP, tmp_path)

    talked = process_scenario(package_env, repo, ACP)

    # In chat the client's requests ran: the MCP lookup, the write and the `cat` — whose output ("exit code 0:
    # Order 1042…") is what the script answers with the final sentence.
    assert talked["calls"] == [
        ["shop_find_order", "executed"], ["fs_write_text_file", "executed"], ["terminal_create", "executed"],
    ]
    conversations = repo / "var" / "conversations"
    assert sorted(path.relative_to(conversations) for path in conversations.rglob("*.txt")) == [
        Path(str(talked["conversation"]), "note-1042.txt"),
    ]
    assert (conversations / str(talked["conversation"]) / "note-1042.txt").read_text() == NOTE


def test_it_chats_records_on_two_models_blocks_the_refund_and_replays_the_node_agent_from_the_wheel(
    package_env, tmp_path
):
    repo = copied(NODE, tmp_path)
    node_build_share(node_example_build(tmp_path / "node-built"), repo)
    webhook = Listener()
    try:
        talked = process_scenario(
            package_env, repo, NODE, env={"SHOP_WEBHOOK_URL": f"{webhook.url}/under-test"},
            chat_env={"SHOP_WEBHOOK_URL": f"{webhook.url}/chat"}, rebuild=True,
        )
    finally:
        webhook.close()

    assert talked["calls"] == [["shop_find_order", "executed"], ["shop_refund_order", "executed"]]
    # The one refund posted is the chat's: none came from the record run or the replays.
    assert [(path, json.loads(body)) for path, body in webhook.received] == [("/chat", REFUND)]
    assert not (repo / "package-lock.json").exists()
