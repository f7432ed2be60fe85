"""examples/langgraph-shop as a team runs it: its unchanged LangGraph code — the `create_agent` shop assistant and the
front desk's custom `StateGraph` (a router node, a refunds subgraph, a human approval by `interrupt`) — copied outside
the checkout, on the built wheel with its `langgraph` extra (tests/example_repo.py says how, and what the scenario
proves)."""

from __future__ import annotations

import pytest

from tests.example_repo import (
    LOCAL,
    MODELS,
    SCRIPTED,
    agenttest,
    example_copy,
    local_stub,
    markers,
    results,
    shell,
    shop_scenario,
)
from tests.package_env import package_env_fixture  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.installed]

# ChatOpenAI builds its OpenAI client when shop/graph.py is imported, which the openai SDK refuses without a key, an
# empty one included. agenttest never sends a call with it: a placeholder is enough.
PLACEHOLDER_KEY = {"OPENAI_API_KEY": "unused"}
REFUND = "Refund waits for approval"
REFUND_REQUEST = "Please refund order 1042, it arrived broken."
QUESTION = "Refund order 1042 (shipped)? Answer yes or no."
REFUNDED = "Order 1042 is refunded: the money is on its way back to you."


def test_it_chats_records_blocks_replays_and_resumes_the_teams_langgraph_graphs_at_their_interrupt(
    package_env, tmp_path
):
    repo = example_copy("langgraph-shop", tmp_path)

    shop_scenario(
        package_env, repo, env=PLACEHOLDER_KEY, instruction="then confirm by email with send_email.",
        changed="then always confirm by email with send_email.", shown="then always confirm",
        more_cases=(REFUND,),
    )

    # The refund case, replayed offline: its first turn ends on the graph's interrupt, asking; its second answers it,
    # and the graph resumes where it waited (the case's assertions say so turn by turn).
    replayed = agenttest(package_env, repo, "run", ".", "--suite", "desk", "--models", MODELS, "--mode", "replay",
                         "--results", "desk.json", env=PLACEHOLDER_KEY)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert {key: result["status"] for key, result in results(repo / "desk.json").items()} == {
        (REFUND, SCRIPTED): "passed", (REFUND, LOCAL): "passed",
    }
    assert markers(repo) == []

    # In chat, as the web process sends each turn: in a process of its own, so the answer reaches a graph the turn
    # before left waiting in another process. The refund really happens, once approved.
    with local_stub(package_env, repo):
        talked = shell(package_env, repo, f"""
            import json
            from django.core.management import call_command
            from agenthost.models import Agent
            from agenthost.services import conversation_send, conversation_start
            call_command("migrate", verbosity=0)
            call_command("apply", ".", verbosity=0)
            conversation = conversation_start(agent=Agent.objects.get(name="desk"))
            turns = [conversation_send(conversation=conversation, text=text, team_code_in_child=True)
                     for text in ({REFUND_REQUEST!r}, "yes")]
            print(json.dumps([[turn.output, turn.nodes_visited, [[call.name, call.outcome] for call in turn.tool_calls]]
                              for turn in turns]))
        """, PLACEHOLDER_KEY)
    asked, answered = talked
    # The router's Command(goto="refunds") is recorded as routing.
    assert asked == [QUESTION, ["triage", "refunds", "refunds/look_up", "refunds/approve"],
                     [["goto_refunds", "routed"], ["find_order", "executed"]]], talked
    assert answered == [REFUNDED, ["refunds", "refunds/approve", "refunds/refund", "refunds/reply"],
                        [["refund_order", "executed"]]], talked
    assert markers(repo) == ["refunds"]
