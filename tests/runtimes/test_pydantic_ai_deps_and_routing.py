"""pydantic-ai as its documentation writes it (issue 33, reproduction 6, and item 2): `deps` made by the agent file's
factory from the conversation's state, in chat and under test; a tool's exception ending the run as an Error naming
the tool (a ModelRetry still a retry); every tool call of every agent in the run — one a tool delegates to included —
through the seam. Side effects are counted in marker files and at a listener."""

from __future__ import annotations

import pytest
import yaml

from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Conversation
from agenthost.services import conversation_send
from agenthost.turns import ConversationError
from agenthost.validation import agent_problems
from cases.files import agent_file, files_apply
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult
from runs.services import run_create, run_execute
from tests.runtimes.conftest import markers

# What these tests answer hangs on the team's code in processes of its own, not on the database
# engine: the PostgreSQL pass runs them, once.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.production_engine]

SHOP = '''
import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pydantic_ai import Agent, ModelRetry, RunContext

MARKERS = Path(os.environ["SHOP_MARKERS"])


@dataclass
class Deps:
    customer_id: str
    tier: str


def make_deps(state: dict) -> Deps:
    return Deps(customer_id=state.get("customer_id", "anonymous"), tier=state.get("tier", "basic"))


def happen(what: str, **details: str) -> None:
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"{what}-{len(list(MARKERS.iterdir()))}").write_text(json.dumps(details))
    request = urllib.request.Request(os.environ["SHOP_LISTENER"] + "/" + what, data=json.dumps(details).encode(),
                                     method="POST")
    urllib.request.urlopen(request, timeout=10).read()


agent = Agent("openai:gpt-4o-mini", defer_model_check=True, deps_type=Deps,
              instructions="You are the shop's assistant.")


@agent.tool
def whoami(ctx: RunContext[Deps]) -> str:
    """Say who the customer is."""
    return f"{ctx.deps.customer_id} ({ctx.deps.tier})"


@agent.tool
def refund(ctx: RunContext[Deps], order_id: str) -> str:
    """Refund an order."""
    happen("refund", order_id=order_id, customer=ctx.deps.customer_id)
    return "refunded"


@agent.tool_plain
def flaky(order_id: str) -> str:
    """Look an order up in the flaky system."""
    raise ConnectionError(f"the order system is down for {order_id}")


@agent.tool_plain
def picky(order_id: str) -> str:
    """Look an order up; needs the long form of its number."""
    if not order_id.startswith("ORD-"):
        raise ModelRetry("use the long form, ORD-<number>")
    return f"{order_id}: shipped"


# An agent a tool delegates to, the way pydantic-ai's documentation writes agent delegation.
clerk = Agent("openai:gpt-4o-mini", defer_model_check=True, deps_type=Deps, name="clerk",
              instructions="You file refunds.")


@clerk.tool
def file_refund(ctx: RunContext[Deps], order_id: str) -> str:
    """File a refund for an order."""
    happen("file", order_id=order_id)
    return "filed"


@agent.tool
async def ask_clerk(ctx: RunContext[Deps], order_id: str) -> str:
    """Ask the clerk to file a refund."""
    result = await clerk.run(f"File a refund for {order_id}.", deps=ctx.deps, usage=ctx.usage)
    return result.output
'''


def _called(request: ModelRequest) -> list[str]:
    return [call["function"]["name"] for message in request.chat_messages() if message["role"] == "assistant"
            for call in message.get("tool_calls") or []]


def _calling(tool: str, arguments: dict) -> callable:
    """The model: calls `tool` once, then says what its last tool answer was."""
    def answer(request: ModelRequest) -> Answer | str:
        if tool not in _called(request):
            return Answer(tool_calls=[Call(tool, arguments)])
        return f"Answer: {request.chat_messages()[-1]['content']}"
    return answer


def _agent(package: str) -> Agent:
    return Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{package}.bot:agent",
                                deps=f"{package}.bot:make_deps", provider="scripted", model="scripted")


def _case(agent: Agent, *, state: dict, mocks: dict[str, str], expects: str, suite: str = "shop") -> Suite:
    suite = Suite.objects.create(name=suite, agent=agent)
    case = Case.objects.create(suite=suite, name="acts", initial_state=state)
    Turn.objects.create(case=case, position=0, user_message="Please help.")
    for position, (name, result) in enumerate(mocks.items()):
        Mock.objects.create(case=case, position=position, function_name=name, result=result)
    Assertion.objects.create(case=case, position=0, type="outputContains", params={"text": expects})
    return suite


def _run(suite: Suite, scripted_model) -> CaseResult:
    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key]).pk)
    return CaseResult.objects.get(run=run)


def _calls(result: CaseResult) -> list[tuple[str, str, str]]:
    return [(row["function_name"], row["agent"], row["outcome"])
            for row in result.transcript if row["role"] == "tool_result"]


def _chat(admin_client, agent: Agent, text: str, state: dict | None = None) -> list[dict]:
    started = admin_client.post("/api/conversations/", {"agent": str(agent.pk), "initial_state": state or {}},
                                content_type="application/json")
    assert started.status_code == 201, started.content
    conversation = started.json()["id"]
    # The turn as the chat's child process runs it (the scripted model answers in this process; the child itself is
    # tested with the local stub in test_team_code_in_child.py).
    conversation_send(conversation=Conversation.objects.get(pk=conversation), text=text)
    return admin_client.get(f"/api/conversations/{conversation}/messages/").json()["results"]


def test_it_gives_the_tools_the_deps_the_agent_files_factory_makes_from_the_state_in_chat(
    scripted_model, team_repo, admin_client, listener
):
    agent = _agent(team_repo(SHOP))
    scripted_model.respond_with(_calling("whoami", {}))

    messages = _chat(admin_client, agent, "Who am I?", {"customer_id": "C-42", "tier": "gold"})

    assert messages[-1]["content"] == "Answer: C-42 (gold)"


def test_it_gives_the_tools_the_deps_made_from_the_cases_initial_state_under_test(scripted_model, team_repo):
    agent = _agent(team_repo(SHOP))
    scripted_model.respond_with(_calling("whoami", {}))
    suite = _case(agent, state={"customer_id": "C-7", "tier": "silver"}, mocks={}, expects="C-7 (silver)")
    suite.extra_allowed_functions = ["whoami"]
    suite.save()
    Agent.objects.filter(pk=agent.pk).update(outside_effects={"whoami": False})

    result = _run(suite, scripted_model)

    assert result.status == "passed", result.reason
    assert _calls(result) == [("whoami", "shop", "allowed")]


def test_it_refuses_a_deps_factory_that_does_not_load_naming_the_field(scripted_model, team_repo):
    package = team_repo(SHOP)
    common = {"name": "shop", "instruction": "", "provider": "scripted", "model": "scripted", "functions": [],
              "rules": [], "sub_agents": [], "entry": f"{package}.bot:agent"}

    assert agent_problems(runtime="pydantic-ai", deps=f"{package}.bot:make_deps", **common) == {}
    assert "deps" in agent_problems(runtime="pydantic-ai", deps=f"{package}.bot:nowhere", **common)
    python = {**common, "entry": f"{package}.bot:make_deps"}
    assert "is for a pydantic-ai agent" in agent_problems(runtime="python", deps=f"{package}.bot:make_deps",
                                                          **python)["deps"][0]


def test_it_ends_the_run_as_an_error_naming_the_tool_whose_exception_pydantic_ai_would_raise(
    scripted_model, team_repo, admin_client
):
    agent = _agent(team_repo(SHOP))
    Agent.objects.filter(pk=agent.pk).update(outside_effects={"flaky": False})
    scripted_model.respond_with(_calling("flaky", {"order_id": "1042"}))
    suite = _case(agent, state={}, mocks={}, expects="Answer")
    suite.extra_allowed_functions = ["flaky"]
    suite.save()

    result = _run(suite, scripted_model)

    assert result.status == "error", result.reason
    assert "'flaky'" in result.reason and "ConnectionError" in result.reason
    assert "the order system is down for 1042" in result.reason
    # pydantic-ai alone raises there: the model is not asked again with the error as text.
    assert len(scripted_model.requests) == 1

    scripted_model.respond_with(_calling("flaky", {"order_id": "1042"}))
    chat = admin_client.post("/api/conversations/", {"agent": str(agent.pk)}, content_type="application/json")
    with pytest.raises(ConversationError, match="flaky"):
        conversation_send(conversation=Conversation.objects.get(pk=chat.json()["id"]), text="Where is 1042?")


def test_it_keeps_a_model_retry_a_retry_prompt_as_pydantic_ai_does(scripted_model, team_repo):
    agent = _agent(team_repo(SHOP))
    Agent.objects.filter(pk=agent.pk).update(outside_effects={"picky": False})

    def answer(request: ModelRequest) -> Answer | str:
        tried = _called(request)
        if not tried:
            return Answer(tool_calls=[Call("picky", {"order_id": "1042"})])
        if len(tried) == 1:
            return Answer(tool_calls=[Call("picky", {"order_id": "ORD-1042"})])
        return f"Answer: {request.chat_messages()[-1]['content']}"

    scripted_model.respond_with(answer)
    suite = _case(agent, state={}, mocks={}, expects="ORD-1042: shipped")
    suite.extra_allowed_functions = ["picky"]
    suite.save()

    result = _run(suite, scripted_model)

    assert result.status == "passed", result.reason
    assert "use the long form" in scripted_model.requests[1].chat_messages()[-1]["content"]


def test_it_routes_the_tools_of_an_agent_a_tool_delegates_to_by_that_agents_name(
    scripted_model, team_repo, tmp_path, listener
):
    agent = _agent(team_repo(SHOP))
    Agent.objects.filter(pk=agent.pk).update(outside_effects={"ask_clerk": False})

    def answer(request: ModelRequest) -> Answer | str:
        if request.chat_messages()[0]["content"] == "You file refunds.":
            if "file_refund" not in _called(request):
                return Answer(tool_calls=[Call("file_refund", {"order_id": "1042"})])
            return f"Clerk: {request.chat_messages()[-1]['content']}"
        if "ask_clerk" not in _called(request):
            return Answer(tool_calls=[Call("ask_clerk", {"order_id": "1042"})])
        return f"Answer: {request.chat_messages()[-1]['content']}"

    scripted_model.respond_with(answer)
    mocked = _case(agent, state={}, mocks={"file_refund": "filed (mock)"}, expects="Clerk: filed (mock)")
    mocked.extra_allowed_functions = ["ask_clerk"]
    mocked.save()

    result = _run(mocked, scripted_model)

    assert result.status == "passed", result.reason
    assert _calls(result) == [("file_refund", "clerk", "mocked"), ("ask_clerk", "shop", "allowed")]
    assert markers(tmp_path) == [] and listener.received == []

    unmocked = _case(agent, state={}, mocks={}, expects="Clerk: filed", suite="unmocked")
    unmocked.extra_allowed_functions = ["ask_clerk"]
    unmocked.save()
    blocked = _run(unmocked, scripted_model)

    assert blocked.status in ("failed", "error"), blocked.reason
    assert ("file_refund", "clerk", "blocked") in _calls(blocked)
    assert markers(tmp_path) == [] and listener.received == []


@pytest.mark.parametrize(
    ("deps", "fragment"),
    [
        ("{package}.bot:nowhere", "has no attribute"),
        ("no_such_shop_module.deps:make", "failed to import: ModuleNotFoundError"),
        ("{package}.bot:MARKERS", "must be a function taking the conversation's state"),
    ],
)
def test_it_answers_a_bad_deps_factory_with_a_400_naming_the_field_and_stores_nothing(
    admin_client_api, scripted_model, team_repo, deps, fragment
):
    package = team_repo(SHOP)
    response = admin_client_api.post("/api/agents/", {
        "name": "shop", "provider": "scripted", "model": "scripted", "runtime": "pydantic-ai",
        "entry": f"{package}.bot:agent", "deps": deps.format(package=package),
    }, format="json")

    assert response.status_code == 400
    assert fragment in " ".join(str(message) for message in response.data["deps"]), response.data
    assert not Agent.objects.filter(name="shop").exists()


def test_it_applies_and_exports_an_agent_file_naming_a_deps_factory(
    scripted_model, team_repo, tmp_path, admin_client_api
):
    package = team_repo(SHOP)
    (tmp_path / "files" / "agents").mkdir(parents=True)
    document = {"name": "shop", "runtime": "pydantic-ai", "entry": f"{package}.bot:agent",
                "deps": f"{package}.bot:make_deps", "model": "scripted:scripted"}
    (tmp_path / "files" / "agents" / "shop.yaml").write_text(yaml.safe_dump(document))

    files_apply(directory=tmp_path / "files")

    agent = Agent.objects.get(name="shop")
    assert agent.deps == f"{package}.bot:make_deps"
    assert agent_file(agent, "") == document
    assert admin_client_api.get(f"/api/agents/{agent.pk}/").data["deps"] == f"{package}.bot:make_deps"
