"""The case seal in the case runner (agenthost/seal.py, issue 33): under test the team's code reaches no network, starts
no process, and sends its model no tool result agenttest's seam did not produce — from the turn itself, from a thread
a tool starts, from a tool's own openai client. Chat has no seal."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.seams import get_model
from agenthost.services import conversation_send, conversation_start
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import Run
from tests.agenthost.listeners import local_server  # noqa: F401 — the fixture
from tests.runtimes.conftest import execute_suite, markers, stub_provider
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, TurnPlan, execute_case, suite_plan
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

# A plain loop whose tools are effect-free by the agent file, each doing what such a tool may be written to do:
# start a thread that posts, start a process, open its own openai client.
TOOLS_BOT = '''
import json
import os
import subprocess
import threading
import urllib.request

from openai import OpenAI

LISTENER = os.environ["SEAL_LISTENER"]
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
         for name in ("audit_in_thread", "run_script", "ask_own_model", "ask_own_model_responses")]


def audit_in_thread():
    outcome = {}

    def post():
        try:
            urllib.request.urlopen(urllib.request.Request(LISTENER + "/audit", data=b"x", method="POST"), timeout=5)
            outcome["posted"] = True
        except OSError as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=post)
    worker.start()
    worker.join()
    return json.dumps(outcome)


def run_script():
    return subprocess.run(["curl", "-s", "-X", "POST", LISTENER + "/script"], capture_output=True, text=True).stdout


def ask_own_model():
    client = OpenAI(api_key="sk-own", base_url=LISTENER + "/v1", max_retries=0)
    answer = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "What is the exchange rate today?"}]
    )
    return "rate: " + (answer.choices[0].message.content or "")


def ask_own_model_responses():
    client = OpenAI(api_key="sk-own", base_url=LISTENER + "/v1", max_retries=0)
    return client.responses.create(model="gpt-4o-mini", input="What is the exchange rate today?").output_text


FUNCTIONS = {"audit_in_thread": audit_in_thread, "run_script": run_script, "ask_own_model": ask_own_model,
             "ask_own_model_responses": ask_own_model_responses}


def respond(messages, client, tools):
    conversation = [{"role": "system", "content": "Help."}, *messages]
    for _ in range(4):
        completion = client.chat.completions.create(model="gpt-4o-mini", messages=conversation, tools=TOOLS)
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        conversation.append({"role": "assistant", "content": message.content or "",
                             "tool_calls": [call.model_dump() for call in message.tool_calls]})
        for call in message.tool_calls:
            result = tools.call(FUNCTIONS[call.function.name], call.function.arguments, call_id=call.id)
            conversation.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return "I could not finish."
'''

# A loop that calls its functions itself (reproduction 2 of issue 33) instead of through `tools.call`.
OWN_CALLS_BOT = '''
import json
import os
from pathlib import Path

MARKERS = Path(os.environ["SHOP_MARKERS"])
TOOLS = [{"type": "function", "function": {"name": "refund", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]


def refund(order_id):
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"refund-{order_id}").write_text("refunded")
    return f"refunded order {order_id}"


IMPLEMENTATIONS = {"refund": refund}


def respond(messages, client, tools):
    conversation = [{"role": "system", "content": "Refund what the customer asks."}, *messages]
    for _ in range(4):
        completion = client.chat.completions.create(model="gpt-4o-mini", messages=conversation, tools=TOOLS)
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        conversation.append({"role": "assistant", "content": message.content or "",
                             "tool_calls": [call.model_dump() for call in message.tool_calls]})
        for call in message.tool_calls:
            result = IMPLEMENTATIONS[call.function.name](**json.loads(call.function.arguments))
            conversation.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return "I could not finish."
'''

# A tool written against the async client, run on its own event loop.
ASYNC_CLIENT_BOT = TOOLS_BOT.replace("def audit_in_thread():", """def ask_async():
    import asyncio

    from openai import AsyncOpenAI

    async def ask():
        client = AsyncOpenAI(api_key="sk-own", base_url=LISTENER + "/v1", max_retries=0)
        answer = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "What is the exchange rate today?"}]
        )
        return "rate: " + (answer.choices[0].message.content or "")

    return asyncio.run(ask())


def audit_in_thread():""").replace(
    '"ask_own_model_responses": ask_own_model_responses}', '"ask_own_model_responses": ask_own_model_responses,'
    ' "ask_async": ask_async}'
).replace('"ask_own_model", "ask_own_model_responses")', '"ask_own_model", "ask_own_model_responses", "ask_async")')

TOOL_NAMES = ("audit_in_thread", "run_script", "ask_own_model", "ask_own_model_responses")


@pytest.fixture
def listener(local_server, monkeypatch):  # noqa: F811 — the fixture imported above
    monkeypatch.setenv("SEAL_LISTENER", local_server.base_url)
    return local_server


def _agent(package: str, **fields) -> Agent:
    return Agent.objects.create(
        name="desk", runtime="python", entry=f"{package}.bot:respond", provider="scripted", model="scripted", **fields
    )


def _run(agent: Agent, scripted_model, *, mocks=(), extra_allowed=TOOL_NAMES, text: str = "Help me",
         network_allow=frozenset()):
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={}, turns=[TurnPlan(text)],
        assertions=[AssertionPlan("outputContains", {"text": "done"})], mocks=list(mocks),
    )
    suite = suite_plan(extra_allowed=extra_allowed, network_allow=network_allow)
    return execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite)


def _effect_free_tools_agent(team_repo) -> Agent:
    return _agent(team_repo(TOOLS_BOT), outside_effects={name: False for name in TOOL_NAMES})


def test_it_refuses_a_connection_from_a_thread_an_allowed_tool_starts(scripted_model, team_repo, listener):
    agent = _effect_free_tools_agent(team_repo)
    scripted_model.play(Answer(tool_calls=[Call("audit_in_thread", {})]), "done")

    outcome = _run(agent, scripted_model)

    assert listener.received == []
    assert outcome.status == "error", outcome.reason
    host_port = listener.host_port
    assert f"tried to connect to {host_port}" in outcome.reason
    # The model was not asked again once the seal was broken.
    assert len(scripted_model.requests) == 1


def test_it_lets_an_allowed_tool_reach_a_host_the_suite_names(scripted_model, team_repo, listener):
    agent = _effect_free_tools_agent(team_repo)
    scripted_model.play(Answer(tool_calls=[Call("audit_in_thread", {})]), "done")

    outcome = _run(agent, scripted_model, network_allow=frozenset({"localhost"}))

    assert outcome.status == "passed", outcome.reason
    assert json.loads(outcome.tool_calls[0]["result"]) == {"posted": True}
    assert [request.path for request in listener.received] == ["/audit"]


def test_it_refuses_a_process_an_allowed_tool_starts(scripted_model, team_repo, listener):
    agent = _effect_free_tools_agent(team_repo)
    scripted_model.play(Answer(tool_calls=[Call("run_script", {})]), "done")

    outcome = _run(agent, scripted_model)

    assert listener.received == []
    assert outcome.status == "error", outcome.reason
    assert "tried to start a process (subprocess.Popen: curl -s -X POST" in outcome.reason


def test_it_answers_a_tools_own_openai_client_through_the_model_layer(scripted_model, team_repo, listener):
    agent = _effect_free_tools_agent(team_repo)
    scripted_model.respond_with(
        lambda request: (
            "1.08" if request.messages[-1]["content"] == "What is the exchange rate today?"
            else "done: " + request.messages[-1]["content"] if request.messages[-1]["role"] == "tool"
            else Answer(tool_calls=[Call("ask_own_model", {})])
        )
    )

    outcome = _run(agent, scripted_model)

    assert listener.received == []
    assert outcome.status == "passed", outcome.reason
    assert outcome.tool_calls[0]["result"] == "rate: 1.08"
    # The tool's request went to the model under test, as the tool built it, and counts in the case's usage.
    own = scripted_model.requests[1]
    assert own.messages == [{"role": "user", "content": "What is the exchange rate today?"}]
    assert own.model == "scripted"
    assert len(scripted_model.requests) == 3


def test_it_records_a_tools_own_openai_call_and_replays_it_with_the_server_gone(
    openai_stub, settings, team_repo, listener
):
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": stub_provider(openai_stub.base_url)}
    openai_stub.respond_with(
        lambda body: (
            "1.08" if body["messages"][-1]["content"] == "What is the exchange rate today?"
            else "done: " + body["messages"][-1]["content"] if body["messages"][-1]["role"] == "tool"
            else Answer(tool_calls=[Call("ask_own_model", {})])
        )
    )
    agent = Agent.objects.create(
        name="desk", runtime="python", entry=f"{team_repo(TOOLS_BOT)}.bot:respond", provider="stub",
        model="gpt-4o-mini", outside_effects={"ask_own_model": False},
    )
    suite = Suite.objects.create(name="rates", agent=agent, case_timeout_seconds=int(WAIT_SECONDS),
                                 extra_allowed_functions=["ask_own_model"])
    case = Case.objects.create(suite=suite, name="converts")
    Turn.objects.create(case=case, user_message="Convert 10 EUR")
    Assertion.objects.create(case=case, type="outputContains", params={"text": "rate: 1.08"})

    recorded = execute_suite(suite, Run.Mode.RECORD)
    assert recorded.status == "passed", recorded.reason
    # The tool's own call was the model under test's: on the stub, recorded with the case.
    assert len(openai_stub.requests) == 3
    openai_stub.stop()

    replayed = execute_suite(suite, Run.Mode.REPLAY)

    assert replayed.status == "passed", replayed.reason
    assert listener.received == []


def test_it_answers_a_tools_own_async_openai_client_through_the_model_layer(scripted_model, team_repo, listener):
    agent = _agent(team_repo(ASYNC_CLIENT_BOT), outside_effects={"ask_async": False})
    scripted_model.respond_with(
        lambda request: (
            "1.09" if request.messages[-1]["content"] == "What is the exchange rate today?"
            else "done: " + request.messages[-1]["content"] if request.messages[-1]["role"] == "tool"
            else Answer(tool_calls=[Call("ask_async", {})])
        )
    )

    outcome = _run(agent, scripted_model, extra_allowed=("ask_async",))

    assert listener.received == []
    assert outcome.status == "passed", outcome.reason
    assert outcome.tool_calls[0]["result"] == "rate: 1.09"


def test_it_ends_a_case_whose_loop_calls_its_own_function_naming_the_tool(scripted_model, team_repo, tmp_path):
    agent = _agent(team_repo(OWN_CALLS_BOT))
    scripted_model.play(Answer(tool_calls=[Call("refund", {"order_id": "7"})]), "done: refunded")

    outcome = _run(agent, scripted_model, mocks=[MockSpec("refund", "refund queued")], extra_allowed=())

    assert outcome.status == "error", outcome.reason
    assert "tool 'refund' ran outside agenttest" in outcome.reason
    # The request carrying the loop's own result was never sent.
    assert len(scripted_model.requests) == 1
    # What the ledger cannot undo: the function ran in the team's own code (only the network is sealed).
    assert [path.name for path in markers(tmp_path)] == ["refund-7"]


def test_it_exits_run_suite_inline_with_the_error_code_when_a_loop_runs_its_own_tool(
    scripted_model, team_repo, tmp_path
):
    agent = _agent(team_repo(OWN_CALLS_BOT))
    scripted_model.play(Answer(tool_calls=[Call("refund", {"order_id": "7"})]), "done: refunded")
    suite = Suite.objects.create(name="refunds", agent=agent, case_timeout_seconds=int(WAIT_SECONDS))
    case = Case.objects.create(suite=suite, name="refunds order 7")
    Turn.objects.create(case=case, user_message="Refund order 7")
    Mock.objects.create(case=case, function_name="refund", result="refund queued")
    Assertion.objects.create(case=case, type="outputContains", params={"text": "done"})
    out = StringIO()

    with pytest.raises(SystemExit) as exit_:
        call_command("run_suite", "refunds", "--models", scripted_model.key, "--inline", stdout=out, stderr=StringIO())

    assert exit_.value.code not in (0, None)
    assert "[1/1] ERROR  refunds order 7" in out.getvalue()
    assert "tool 'refund' ran outside agenttest" in out.getvalue()


def test_it_lets_chat_run_the_teams_code_unsealed(scripted_model, team_repo, listener):
    agent = _effect_free_tools_agent(team_repo)
    scripted_model.play(Answer(tool_calls=[Call("audit_in_thread", {})]), "done")

    result = conversation_send(conversation=conversation_start(agent=agent), text="Help me")

    assert json.loads(result.tool_calls[0].result) == {"posted": True}
    assert [request.path for request in listener.received] == ["/audit"]


# pydantic-ai answers a call whose arguments do not validate itself (a retry prompt), running no tool of the team's.
RETRY_AGENT = '''
from pydantic_ai import Agent

agent = Agent("openai:gpt-4o-mini", defer_model_check=True, instructions="Look orders up.")


@agent.tool_plain
def find_order(order_id: int) -> str:
    """Find an order by its number."""
    return "shipped"
'''


def test_it_passes_a_framework_retry_prompt_for_arguments_that_do_not_validate(scripted_model, team_repo):
    agent = Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{team_repo(RETRY_AGENT)}.bot:agent",
                                 provider="scripted", model="scripted")
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "not a number"})]),
        Answer(tool_calls=[Call("find_order", {"order_id": 1042})]),
        "done: in transit",
    )

    outcome = _run(agent, scripted_model, mocks=[MockSpec("find_order", "in transit")], extra_allowed=())

    assert outcome.status == "passed", outcome.reason
    assert [(call["name"], call["outcome"]) for call in outcome.tool_calls] == [("find_order", "mocked")]
    # pydantic-ai's own answer to the call went to the model (a function_call_output item of its Responses request).
    assert scripted_model.requests[1].chat_messages()[-1]["role"] == "tool"
