"""The Responses API through the model layer (issue 33 item 5): an Agents SDK agent on its default model and a
pydantic-ai agent on `OpenAIResponsesModel` run under agenttest as they are — their `/responses` requests recorded
against the local stub, replayed key-free with the stub gone, stale when an instruction changes, their unmocked tools
blocked, a tool result the seam never produced refused."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass

import pytest
from agents import AsyncOpenAI, OpenAIResponsesModel, RunConfig, Runner
from pydantic_ai.models.openai import OpenAIResponsesModel as PydanticAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message
from agenthost.runtimes.entry import load_entry
from agenthost.services import conversation_send, conversation_start
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.runtimes.conftest import execute_suite, markers
from tests.runtimes.test_case_seal import TOOL_NAMES, TOOLS_BOT, _run
from tests.runtimes.test_case_seal import _agent as plain_agent
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

# `refund` has an effect outside the program (a marker file); `second_opinion` asks another agent of the team's,
# handing it a refund the team's code made itself — a tool result no mock, block or allowed run produced.
AGENTS_SDK_SHOP = '''
import os
from pathlib import Path

from agents import Agent, Runner, function_tool

MARKERS = Path(os.environ["SHOP_MARKERS"])
INSTRUCTIONS = "You are the shop's assistant. Look orders up before answering."


def refund_now(order_id):
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"refund-{order_id}").write_text("refunded")
    return f"refunded order {order_id}"


@function_tool
def find_order(order_id: str) -> str:
    """Find an order by its number."""
    return "shipped"


@function_tool
def refund(order_id: str) -> str:
    """Refund an order."""
    return refund_now(order_id)


expert = Agent(name="expert", instructions="You check refunds.")


@function_tool
async def second_opinion(question: str) -> str:
    """Ask the refunds expert."""
    history = [
        {"role": "user", "content": question},
        {"type": "function_call", "call_id": "call_own", "name": "refund", "arguments": '{"order_id": "1042"}'},
        {"type": "function_call_output", "call_id": "call_own", "output": refund_now("1042")},
    ]
    return str((await Runner.run(expert, history)).final_output)


shop = Agent(name="shop", instructions=INSTRUCTIONS, tools=[find_order, refund, second_opinion])
'''

PYDANTIC_AI_SHOP = '''
import os
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart

MARKERS = Path(os.environ["SHOP_MARKERS"])
INSTRUCTIONS = "You are the shop's assistant. Look orders up before answering."

shop = Agent("openai:gpt-4o-mini", defer_model_check=True, name="shop", instructions=INSTRUCTIONS)
expert = Agent("openai:gpt-4o-mini", defer_model_check=True, name="expert", instructions="You check refunds.")


def refund_now(order_id):
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"refund-{order_id}").write_text("refunded")
    return f"refunded order {order_id}"


@shop.tool_plain
def find_order(order_id: str) -> str:
    """Find an order by its number."""
    return "shipped"


@shop.tool_plain
def refund(order_id: str) -> str:
    """Refund an order."""
    return refund_now(order_id)


@shop.tool_plain
async def second_opinion(question: str) -> str:
    """Ask the refunds expert."""
    history = [
        ModelRequest(parts=[UserPromptPart(question)]),
        ModelResponse(parts=[ToolCallPart("refund", {"order_id": "1042"}, tool_call_id="call_own")]),
        ModelRequest(parts=[ToolReturnPart("refund", refund_now("1042"), tool_call_id="call_own")]),
    ]
    return (await expert.run("Was that right?", message_history=history)).output
'''


@dataclass(frozen=True)
class Framework:
    runtime: str
    source: str

    @property
    def entry(self) -> str:
        return "bot:shop"


FRAMEWORKS = {
    "agents-sdk": Framework("openai-agents", AGENTS_SDK_SHOP),
    "pydantic-ai": Framework("pydantic-ai", PYDANTIC_AI_SHOP),
}


@pytest.fixture(params=sorted(FRAMEWORKS))
def framework(request) -> Framework:
    return FRAMEWORKS[request.param]


def shop_answer(body: dict) -> Answer | str:
    """The stub's model: call the tool the user names with order 1042, then say what it said."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return f"Your order: {last['content']}"
    named = next(name for name in ("second_opinion", "refund", "find_order") if name in last["content"])
    arguments = {"question": "Refund 1042?"} if named == "second_opinion" else {"order_id": "1042"}
    return Answer(tool_calls=[Call(named, arguments)])


@pytest.fixture
def shop_stub(stub) -> object:
    stub.respond_with(shop_answer)
    return stub


def _agent(framework: Framework, package: str, **fields) -> Agent:
    return Agent.objects.create(
        name="shop", runtime=framework.runtime, entry=f"{package}.{framework.entry}", provider="stub",
        model="gpt-4o-mini", **fields,
    )


def _suite(agent: Agent, text: str, *, mocks: dict[str, str] | None = None, expects: str = "",
           extra_allowed: tuple[str, ...] = ()) -> Suite:
    suite = Suite.objects.create(name="shop", agent=agent, case_timeout_seconds=int(WAIT_SECONDS),
                                 extra_allowed_functions=list(extra_allowed))
    case = Case.objects.create(suite=suite, name="the order")
    Turn.objects.create(case=case, position=0, user_message=text)
    for position, (name, result) in enumerate((mocks or {}).items()):
        Mock.objects.create(case=case, position=position, function_name=name, result=result)
    if expects:
        Assertion.objects.create(case=case, position=0, type="outputContains", params={"text": expects})
    return suite


def _model_calls(result: CaseResult) -> int:
    return result.conversation.messages.filter(role=Message.Role.ASSISTANT).count()


def test_it_records_a_frameworks_responses_calls_and_replays_them_key_free_with_the_stub_gone(
    framework, shop_stub, team_repo, monkeypatch
):
    agent = _agent(framework, team_repo(framework.source))
    suite = _suite(agent, "Where is find_order 1042?", mocks={"find_order": "in transit"}, expects="in transit")

    recorded = execute_suite(suite, Run.Mode.RECORD)

    assert recorded.status == "passed", recorded.reason
    # The framework's own wire format: the Responses API, its instructions and input items as it built them.
    assert shop_stub.paths == ["/v1/responses"] * 2
    first, second = shop_stub.requests
    assert first["instructions"] == "You are the shop's assistant. Look orders up before answering."
    assert "messages" not in first
    assert [tool["name"] for tool in first["tools"]] == ["find_order", "refund", "second_opinion"]
    outputs = [item for item in second["input"] if item.get("type") == "function_call_output"]
    assert [item["output"] for item in outputs] == ["in transit"]
    assert recorded.input_tokens > 0 and _model_calls(recorded) == 2
    shop_stub.stop()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    replayed = execute_suite(suite, Run.Mode.REPLAY)

    assert replayed.status == "passed", replayed.reason
    assert len(shop_stub.requests) == 2
    assert _model_calls(replayed) == 2
    assert replayed.input_tokens == recorded.input_tokens


def test_it_names_a_changed_instruction_when_a_responses_replay_is_stale(framework, shop_stub, team_repo):
    agent = _agent(framework, team_repo(framework.source))
    suite = _suite(agent, "Where is find_order 1042?", mocks={"find_order": "in transit"}, expects="in transit")
    assert execute_suite(suite, Run.Mode.RECORD).status == "passed"
    shop_stub.stop()
    changed = team_repo(framework.source.replace("Look orders up before", "Always look orders up before"))
    Agent.objects.filter(pk=agent.pk).update(entry=f"{changed}.{framework.entry}")

    stale = execute_suite(suite, Run.Mode.REPLAY)

    assert stale.status == "error"
    assert stale.reason.startswith("stale recording: the request at turn 0 step 0 differs from the recording")
    assert "First difference: settings.instructions" in stale.reason
    assert "Always look orders up before" in stale.reason


def test_it_blocks_an_unmocked_tool_a_responses_model_calls_with_no_side_effect(
    framework, shop_stub, team_repo, tmp_path
):
    agent = _agent(framework, team_repo(framework.source))
    suite = _suite(agent, "Please refund 1042.", expects="Your order:")

    result = execute_suite(suite, Run.Mode.LIVE)

    assert markers(tmp_path) == []
    assert [(call["name"], call["outcome"]) for call in result.tool_calls] == [("refund", "blocked")]
    assert result.status == "failed" and "refund" in result.reason
    # The block stopped the turn, as it does natively: the model was not asked again.
    assert len(shop_stub.requests) == 1


def test_it_ends_the_case_when_the_teams_code_hands_a_responses_model_a_tool_result_of_its_own(
    framework, shop_stub, team_repo, tmp_path
):
    agent = _agent(framework, team_repo(framework.source), outside_effects={"second_opinion": False})
    suite = _suite(agent, "Ask second_opinion about 1042.", extra_allowed=("second_opinion",), expects="Your order:")

    result = execute_suite(suite, Run.Mode.LIVE)

    assert result.status == "error"
    assert "tool 'refund' ran outside agenttest" in result.reason
    assert "'call_own'" in result.reason
    # The expert's request carrying it was never sent: the stub saw the shop's first request only.
    assert len(shop_stub.requests) == 1


def test_it_answers_a_tools_own_responses_call_through_the_model_layer(scripted_model, team_repo, monkeypatch):
    monkeypatch.setenv("SEAL_LISTENER", "http://127.0.0.1:9")
    agent = plain_agent(team_repo(TOOLS_BOT), outside_effects={name: False for name in TOOL_NAMES})
    scripted_model.respond_with(
        lambda request: (
            "1.08" if request.api == "responses"
            else "done: " + request.messages[-1]["content"] if request.messages[-1]["role"] == "tool"
            else Answer(tool_calls=[Call("ask_own_model_responses", {})])
        )
    )

    outcome = _run(agent, scripted_model)

    assert outcome.status == "passed", outcome.reason
    assert outcome.tool_calls[0]["result"] == "1.08"
    own = scripted_model.requests[1]
    # The tool's request as its client built it, on the model under test.
    assert own.api == "responses" and own.model == "scripted"
    assert own.messages == [{"role": "user", "content": "What is the exchange rate today?"}]


def _without_ids(requests: list[dict]) -> list[dict]:
    # The stub numbers its call, response and output item ids across both runs.
    text = json.dumps(requests)
    for position, found in enumerate(dict.fromkeys(re.findall(r'"((?:call|\w+_resp_stub)_\d+(?:_\d+)?)"', text))):
        text = text.replace(f'"{found}"', f'"id-{position}"')
    return json.loads(text)


def test_it_sends_the_responses_request_each_framework_sends_on_its_own(framework, shop_stub, team_repo):
    package = team_repo(framework.source)
    agent = _agent(framework, package)
    under_agenttest = conversation_send(conversation=conversation_start(agent=agent), text="Where is find_order 1042?")
    through_agenttest = shop_stub.requests

    load_entry(f"{package}.{framework.entry}")
    module = sys.modules[f"{package}.bot"]
    client = AsyncOpenAI(base_url=shop_stub.base_url, api_key="unused")
    if framework.runtime == "openai-agents":
        alone = Runner.run_sync(module.shop, "Where is find_order 1042?", run_config=RunConfig(
            model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client), tracing_disabled=True
        )).final_output
    else:
        model = PydanticAIResponsesModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
        alone = module.shop.run_sync("Where is find_order 1042?", model=model).output

    assert alone == under_agenttest.output == "Your order: shipped"
    on_its_own = shop_stub.requests[len(through_agenttest):]
    assert shop_stub.paths == ["/v1/responses"] * 4
    assert len(through_agenttest) == len(on_its_own) == 2
    for mine, theirs in zip(_without_ids(through_agenttest), _without_ids(on_its_own), strict=True):
        assert sorted(mine) == sorted(theirs)
        for field in theirs:
            assert mine[field] == theirs[field], field


# A plain loop written against the Responses API: through the seam (`tools.call`) or calling its function itself.
RESPONSES_LOOP = '''
import json
import os
from pathlib import Path

MARKERS = Path(os.environ["SHOP_MARKERS"])
TOOLS = [{"type": "function", "name": "refund", "description": "Refund an order.", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}]


def refund(order_id):
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"refund-{order_id}").write_text("refunded")
    return f"refunded order {order_id}"


def respond(messages, client, tools):
    items = list(messages)
    for _ in range(4):
        response = client.responses.create(model="gpt-4o-mini", instructions="Refund what the customer asks.",
                                           input=items, tools=TOOLS)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response.output_text
        for call in calls:
            items.append({"type": "function_call", "call_id": call.call_id, "name": call.name,
                          "arguments": call.arguments})
            result = THROUGH_THE_SEAM
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": result})
    return "I could not finish."
'''


@pytest.mark.parametrize(("how", "through_the_seam"), [
    ("tools.call", "tools.call(refund, call.arguments, call_id=call.call_id)"),
    ("its own call", "refund(**json.loads(call.arguments))"),
])
def test_it_takes_a_plain_responses_loops_tool_results_only_from_the_seam(
    how, through_the_seam, shop_stub, team_repo, tmp_path
):
    package = team_repo(RESPONSES_LOOP.replace("THROUGH_THE_SEAM", through_the_seam))
    agent = Agent.objects.create(name="shop", runtime="python", entry=f"{package}.bot:respond", provider="stub",
                                 model="gpt-4o-mini")
    suite = _suite(agent, "Please refund 1042.", mocks={"refund": "refund queued"}, expects="refund queued")

    result = execute_suite(suite, Run.Mode.LIVE)

    assert shop_stub.paths[0] == "/v1/responses"
    if how == "tools.call":
        assert result.status == "passed", result.reason
        assert markers(tmp_path) == []
        assert len(shop_stub.requests) == 2
    else:
        # The refund ran in the loop's own code (its marker is there); its result never reached the model.
        assert result.status == "error"
        assert "tool 'refund' ran outside agenttest" in result.reason
        assert [marker.name for marker in markers(tmp_path)] == ["refund-1042"]
        assert len(shop_stub.requests) == 1


def test_it_replays_in_a_new_conversation_what_a_scripted_model_answered_on_the_responses_api(
    framework, scripted_model, team_repo
):
    # The scripted model says text and calls only: its output items' ids are the model layer's, and the framework
    # sends them back in its next request — which the replay, in another conversation, must find unchanged.
    agent = Agent.objects.create(name="shop", runtime=framework.runtime, entry=f"{team_repo(framework.source)}."
                                 f"{framework.entry}", provider="scripted", model="scripted")
    suite = _suite(agent, "Where is find_order 1042?", mocks={"find_order": "in transit"}, expects="in transit")
    scripted_model.play(Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]), "Your order: in transit")

    recorded, replayed = (
        CaseResult.objects.get(run=run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key],
                                                                 mode=mode).pk))
        for mode in (Run.Mode.RECORD, Run.Mode.REPLAY)
    )

    assert recorded.status == "passed", recorded.reason
    assert replayed.status == "passed", replayed.reason
    assert [request.api for request in scripted_model.requests] == ["responses"] * 2
