"""The model gateway of a process agent (issue 39): the program's own openai client, pointed at OPENAI_BASE_URL with
the key agenttest gave it, reaches agenttest's model layer — Chat Completions and the Responses API, streamed and
not — under test from inside its network namespace and in chat; another key is refused; a tool result the program
made up itself is refused by the seal's ledger."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.seams import get_model
from agenthost.services import conversation_send, conversation_start
from tests.runtimes.harness import AssertionPlan, CasePlan, TurnPlan, execute_case, suite_plan

pytestmark = pytest.mark.django_db(transaction=True)

# A team's agent as a separate program with the openai SDK: its own instruction, four model calls per turn.
FOUR_CALLS = """
import json
import sys

from openai import OpenAI

client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY, as agenttest set them
INSTRUCTION = "You are the shop's assistant."

for line in sys.stdin:
    turn = json.loads(line)
    conversation = [{"role": "system", "content": INSTRUCTION}, *turn["messages"]]
    said = [client.chat.completions.create(model="gpt-4o-mini", messages=conversation).choices[0].message.content]
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=conversation, stream=True)
    said.append("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))
    response = client.responses.create(model="gpt-4o-mini", instructions=INSTRUCTION, input=turn["message"])
    said.append(response.output_text)
    events = client.responses.create(model="gpt-4o-mini", instructions=INSTRUCTION, input=turn["message"], stream=True)
    said.append("".join(event.delta for event in events if event.type == "response.output_text.delta"))
    print(json.dumps({"reply": " | ".join(said)}), flush=True)
"""
# Calls the gateway with a key of its own making, and says what it got.
OWN_KEY = """
import json
import os
import sys

from openai import AuthenticationError, OpenAI

client = OpenAI(api_key="sk-the-teams-own-key")
for line in sys.stdin:
    try:
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        said = "answered"
    except AuthenticationError as exc:
        said = f"refused {exc.status_code}"
    print(json.dumps({"reply": said}), flush=True)
"""
# Runs the tool the model asked for itself, in its own code, and sends the model the result.
OWN_TOOL = """
import json
import sys

from openai import OpenAI

client = OpenAI()
for line in sys.stdin:
    conversation = json.loads(line)["messages"]
    message = client.chat.completions.create(model="gpt-4o-mini", messages=conversation).choices[0].message
    call = message.tool_calls[0]
    conversation += [message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "refunded 42 EUR"}]
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=conversation).choices[0].message.content
    print(json.dumps({"reply": answer}), flush=True)
"""


def _agent(tmp_path: Path, source: str) -> Agent:
    (tmp_path / "agent.py").write_text(textwrap.dedent(source))
    return Agent.objects.create(
        name="shop", runtime="process", command=sys.executable, args=["agent.py"], cwd=str(tmp_path),
        protocol="jsonl", provider="scripted", model="scripted",
    )


def _run(agent: Agent, scripted_model, text: str, expected: str):
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={}, turns=[TurnPlan(text)],
        assertions=[AssertionPlan("outputContains", {"text": expected})], mocks=[],
    )
    suite = suite_plan(timeout=30.0)
    return execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite)


def test_it_answers_the_programs_model_calls_through_the_model_layer_under_test(scripted_model, tmp_path):
    scripted_model.play("Shipped.", "Streamed.", "Responded.", "Responded, streamed.")

    outcome = _run(_agent(tmp_path, FOUR_CALLS), scripted_model, "Where is order 1042?",
                   "Shipped. | Streamed. | Responded. | Responded, streamed.")

    assert outcome.status == "passed", outcome.reason
    requests = scripted_model.requests
    assert [request.api for request in requests] == ["chat", "chat", "responses", "responses"]
    # The program's own instruction and the user's words, as its client built the request.
    assert requests[0].messages == [
        {"role": "system", "content": "You are the shop's assistant."},
        {"role": "user", "content": "Where is order 1042?"},
    ]
    assert outcome.usage.total_tokens > 0


@pytest.mark.parametrize("host", ["localhost", "[::1]"])
def test_it_answers_a_program_that_reaches_the_gateway_by_another_name_for_loopback(scripted_model, tmp_path, host):
    # A client that resolves `localhost` to ::1 first (Node's does) reaches the gateway there too, and is no breach.
    scripted_model.play("Shipped.", "Streamed.", "Responded.", "Responded, streamed.")
    source = FOUR_CALLS.replace(
        "client = OpenAI()",
        f"import os\nclient = OpenAI(base_url=os.environ['OPENAI_BASE_URL'].replace('127.0.0.1', {host!r}))",
    )

    outcome = _run(_agent(tmp_path, source), scripted_model, "Where is order 1042?",
                   "Shipped. | Streamed. | Responded. | Responded, streamed.")

    assert outcome.status == "passed", outcome.reason
    assert len(scripted_model.requests) == 4


def test_it_answers_the_programs_model_calls_in_chat(scripted_model, tmp_path):
    scripted_model.play("Shipped.", "Streamed.", "Responded.", "Responded, streamed.")
    conversation = conversation_start(agent=_agent(tmp_path, FOUR_CALLS))

    result = conversation_send(conversation=conversation, text="Where is order 1042?")

    assert result.output == "Shipped. | Streamed. | Responded. | Responded, streamed."
    assert len(scripted_model.requests) == 4


def test_it_refuses_a_request_with_another_key(scripted_model, tmp_path):
    outcome = _run(_agent(tmp_path, OWN_KEY), scripted_model, "Hi", "refused 401")

    assert outcome.status == "passed", outcome.reason
    assert scripted_model.requests == []


def test_it_ends_the_case_when_the_program_sends_a_tool_result_it_made_up(scripted_model, tmp_path):
    scripted_model.play(Answer(tool_calls=[Call("refund", {"order_id": "1042"})]), "Refunded.")

    outcome = _run(_agent(tmp_path, OWN_TOOL), scripted_model, "Refund order 1042.", "Refunded")

    assert outcome.status == "error", outcome.reason
    assert "tool 'refund' ran outside agenttest" in outcome.reason
    assert len(scripted_model.requests) == 1
