"""Tools routed at the Agents SDK's own invocation point (issue 33, item 2): every agent taking part in a run — a
hand-off appended at run time to a clone, an agent exposed as a tool and its inner agent — has each function tool
call go through the seam with the agent that made it. Side effects are counted in marker files and at a listener."""

from __future__ import annotations

import pytest

from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Conversation
from agenthost.runtimes.child import runtime_tool_declarations
from agenthost.services import conversation_send
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult
from runs.services import run_create, run_execute
from tests.runtimes.conftest import markers

pytestmark = pytest.mark.django_db(transaction=True)

# What a side-effecting tool of the team's does: a marker file, and a POST to the outside world.
EFFECTS = '''
import json
import os
import urllib.request
from pathlib import Path

MARKERS = Path(os.environ["SHOP_MARKERS"])


def happen(what: str, **details: str) -> None:
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"{what}-{len(list(MARKERS.iterdir()))}").write_text(json.dumps(details))
    request = urllib.request.Request(os.environ["SHOP_LISTENER"] + "/" + what, data=json.dumps(details).encode(),
                                     method="POST")
    urllib.request.urlopen(request, timeout=10).read()
'''

# Reproduction 1: dynamic instructions append, at run time, a hand-off to a clone of the desk given close_account.
RUN_TIME_HANDOFF = EFFECTS + '''
from agents import Agent, function_tool


@function_tool
def close_account(account_id: str) -> str:
    """Close the customer's account."""
    happen("close", account_id=account_id)
    return "closed"


desk = Agent(name="desk", instructions="You run the account desk.")


def front_instructions(context, agent) -> str:
    if not any(getattr(handoff, "name", "") == "closer" for handoff in agent.handoffs):
        agent.handoffs.append(desk.clone(name="closer", tools=[close_account]))
    return "You are the front desk. Hand account closures to the closer."


front = Agent(name="front", instructions=front_instructions)
'''

# Reproduction 3: an agent exposed as a tool; its inner tool is the team's, side-effecting, undeclared.
AGENT_AS_TOOL = EFFECTS + '''
from agents import Agent, function_tool


@function_tool
def refund(order_id: str) -> str:
    """Refund an order."""
    happen("refund", order_id=order_id)
    return "refunded for real"


expert = Agent(name="refund_expert", instructions="You refund orders.", tools=[refund])
front = Agent(
    name="front", instructions="Ask the refund expert about refunds.",
    tools=[expert.as_tool(tool_name="ask_refund_expert", tool_description="Ask the refund expert.")],
)
'''


def _called(request: ModelRequest) -> list[str]:
    return [call["function"]["name"] for message in request.chat_messages() if message["role"] == "assistant"
            for call in message.get("tool_calls") or []]


def _closing(request: ModelRequest) -> Answer | str:
    """front hands over to the closer; the closer closes the account and says what close_account said."""
    if request.metadata["agent"] == "front":
        return Answer(tool_calls=[Call("transfer_to_closer", {})])
    if "close_account" not in _called(request):
        return Answer(tool_calls=[Call("close_account", {"account_id": "A-7"})])
    return f"Your account: {request.chat_messages()[-1]['content']}"


def _refunding(request: ModelRequest) -> Answer | str:
    """front asks the expert; the expert calls refund and reports what it said; front passes it on."""
    last = request.chat_messages()[-1]
    if request.metadata["agent"] == "refund_expert":
        if last["role"] == "tool":
            return f"Expert: {last['content']}"
        return Answer(tool_calls=[Call("refund", {"order_id": "1042"})])
    if last["role"] == "tool":
        return f"Front: {last['content']}"
    return Answer(tool_calls=[Call("ask_refund_expert", {"input": "Refund order 1042."})])


def _case(agent: Agent, *, mocks: dict[str, str], allowed: list[str], expects: str) -> Suite:
    suite = Suite.objects.create(name="desk", agent=agent, extra_allowed_functions=allowed)
    case = Case.objects.create(suite=suite, name="acts")
    Turn.objects.create(case=case, position=0, user_message="Please act on my account.")
    for position, (name, result) in enumerate(mocks.items()):
        Mock.objects.create(case=case, position=position, function_name=name, result=result)
    Assertion.objects.create(case=case, position=0, type="outputContains", params={"text": expects})
    return suite


def _run(suite: Suite, scripted_model) -> CaseResult:
    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key]).pk)
    return CaseResult.objects.get(run=run)


def _calls(result: CaseResult) -> list[tuple[str, str, str]]:
    """Each call's answer on the transcript: the tool, the agent that made the call, how it was answered."""
    return [(row["function_name"], row["agent"], row["outcome"])
            for row in result.transcript if row["role"] == "tool_result"]


def test_it_blocks_the_unmocked_tool_of_a_handoff_appended_at_run_time_with_no_side_effect(
    scripted_model, team_repo, tmp_path, listener
):
    package = team_repo(RUN_TIME_HANDOFF)
    agent = Agent.objects.create(name="desk", runtime="openai-agents", entry=f"{package}.bot:front",
                                 provider="scripted", model="scripted")
    scripted_model.respond_with(_closing)

    result = _run(_case(agent, mocks={}, allowed=[], expects="closed"), scripted_model)

    assert markers(tmp_path) == [] and listener.received == []
    assert result.status in ("failed", "error"), result.reason
    assert ("close_account", "closer", "blocked") in _calls(result)


def test_it_answers_the_tool_of_a_handoff_appended_at_run_time_with_its_mock(
    scripted_model, team_repo, tmp_path, listener
):
    package = team_repo(RUN_TIME_HANDOFF)
    agent = Agent.objects.create(name="desk", runtime="openai-agents", entry=f"{package}.bot:front",
                                 provider="scripted", model="scripted")
    scripted_model.respond_with(_closing)

    result = _run(_case(agent, mocks={"close_account": "closed"}, allowed=[], expects="Your account: closed"),
                  scripted_model)

    assert result.status == "passed", result.reason
    assert _calls(result) == [("transfer_to_closer", "front", "routed"), ("close_account", "closer", "mocked")]
    assert markers(tmp_path) == [] and listener.received == []


def _expert_agent(package: str) -> Agent:
    # As the reproduction: the agent-as-tool declared effect-free in the agent file (and extra-allowed by the suite).
    return Agent.objects.create(
        name="desk", runtime="openai-agents", entry=f"{package}.bot:front", provider="scripted", model="scripted",
        outside_effects={"ask_refund_expert": False},
    )


def test_it_offers_the_inner_tool_of_an_agent_exposed_as_a_tool_for_cases_to_mock(team_repo, listener):
    agent = _expert_agent(team_repo(AGENT_AS_TOOL))

    declared = {declared["name"]: declared for declared in runtime_tool_declarations(agent)}

    assert set(declared) == {"ask_refund_expert", "refund"}
    assert declared["refund"]["parameters"]["properties"] == {"order_id": {"title": "Order Id", "type": "string"}}
    assert "outside_effects" not in declared["refund"], "undeclared: side-effecting"


def test_it_answers_the_inner_tool_of_an_agent_exposed_as_a_tool_by_its_mock_naming_the_inner_agent(
    scripted_model, team_repo, tmp_path, listener
):
    agent = _expert_agent(team_repo(AGENT_AS_TOOL))
    scripted_model.respond_with(_refunding)
    suite = _case(agent, mocks={"refund": "refund queued"}, allowed=["ask_refund_expert"],
                  expects="Front: Expert: refund queued")

    result = _run(suite, scripted_model)

    assert result.status == "passed", result.reason
    # The inner call is answered (by its mock) before the outer call it belongs to (allowed by the suite).
    assert _calls(result) == [("refund", "refund_expert", "mocked"), ("ask_refund_expert", "front", "allowed")]
    # The inner agent's model calls and answers are its own on the transcript.
    assert [(row["role"], row["agent"]) for row in result.transcript if row["role"] == "assistant"] == [
        ("assistant", "front"), ("assistant", "refund_expert"), ("assistant", "refund_expert"), ("assistant", "front"),
    ]
    assert markers(tmp_path) == [] and listener.received == []


def test_it_blocks_the_unmocked_inner_tool_of_an_agent_exposed_as_a_tool_with_no_side_effect(
    scripted_model, team_repo, tmp_path, listener
):
    agent = _expert_agent(team_repo(AGENT_AS_TOOL))
    scripted_model.respond_with(_refunding)
    suite = _case(agent, mocks={}, allowed=["ask_refund_expert"], expects="refunded")

    result = _run(suite, scripted_model)

    assert markers(tmp_path) == [] and listener.received == []
    assert result.status in ("failed", "error"), result.reason
    assert ("refund", "refund_expert", "blocked") in _calls(result)


def test_it_shows_the_inner_agents_call_in_chat_by_the_inner_agents_name(
    scripted_model, team_repo, tmp_path, listener, admin_client
):
    agent = _expert_agent(team_repo(AGENT_AS_TOOL))
    scripted_model.respond_with(_refunding)

    started = admin_client.post("/api/conversations/", {"agent": str(agent.pk)}, content_type="application/json")
    assert started.status_code == 201, started.content
    conversation = started.json()["id"]
    # The turn as the chat's child process runs it (the scripted model answers in this process; the child itself is
    # tested with the local stub in test_team_code_in_child.py).
    conversation_send(conversation=Conversation.objects.get(pk=conversation), text="Refund order 1042.")

    # In chat the team's refund runs for real, once, made by the inner agent.
    assert len(markers(tmp_path)) == 1 and [path for path, _ in listener.received] == ["/refund"]
    messages = admin_client.get(f"/api/conversations/{conversation}/messages/").json()["results"]
    assert [(m["role"], m["function_name"] or m["content"], m["agent"]) for m in messages] == [
        ("user", "Refund order 1042.", "desk"),
        ("assistant", "", "front"), ("tool_call", "ask_refund_expert", "front"),
        ("assistant", "", "refund_expert"), ("tool_call", "refund", "refund_expert"),
        ("tool_result", "refund", "refund_expert"),
        ("assistant", "Expert: refunded for real", "refund_expert"),
        ("tool_result", "ask_refund_expert", "front"),
        ("assistant", "Front: Expert: refunded for real", "front"),
    ]


# A tool's exception under the SDK's own rules: its default failure_error_function tells the model; a tool built with
# failure_error_function=None makes the run raise.
FAILING_TOOLS = '''
from agents import Agent, function_tool


def lookup(order_id: str) -> str:
    """Look an order up."""
    raise ConnectionError(f"the order system is down for {order_id}")


told = Agent(name="told", instructions="Look orders up.", tools=[function_tool(lookup)])
raising = Agent(name="raising", instructions="Look orders up.",
                tools=[function_tool(lookup, failure_error_function=None)])
'''


def _looking_up(request: ModelRequest) -> Answer | str:
    if "lookup" not in _called(request):
        return Answer(tool_calls=[Call("lookup", {"order_id": "1042"})])
    return f"Lookup said: {request.chat_messages()[-1]['content']}"


@pytest.mark.parametrize("attribute", ["told", "raising"])
def test_it_keeps_what_the_sdk_does_with_a_tools_exception(scripted_model, team_repo, attribute):
    package = team_repo(FAILING_TOOLS)
    agent = Agent.objects.create(name="desk", runtime="openai-agents", entry=f"{package}.bot:{attribute}",
                                 provider="scripted", model="scripted", outside_effects={"lookup": False})
    scripted_model.respond_with(_looking_up)

    result = _run(_case(agent, mocks={}, allowed=["lookup"], expects="Lookup said"), scripted_model)

    if attribute == "told":
        # The SDK alone hands the model its default error text and the run goes on.
        assert result.status == "passed", result.reason
        assert "An error occurred while running the tool" in scripted_model.requests[1].chat_messages()[-1]["content"]
    else:
        # The SDK alone raises: the case is an Error naming the tool and its exception; the model is not asked again.
        assert result.status == "error", result.reason
        assert "in its tool 'lookup'" in result.reason and "ConnectionError" in result.reason, result.reason
        assert len(scripted_model.requests) == 1
