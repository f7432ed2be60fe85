"""A tool's own openai client under test, streaming (issue 33 item 3: routed "streaming or not"): chat completions and
the Responses API with stream=True, and the SDK's stream helpers, sync and async, are answered by the model layer and
read by the team's code as the SDK's own chunks and events; nothing reaches the network. A Responses request asking
the server for state it kept (previous_response_id, conversation, prompt, background) is an Error naming the field."""

from __future__ import annotations

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from cases.models import Assertion, Case, Suite, Turn
from runs.models import Run
from tests.agenthost.listeners import local_server  # noqa: F401 — the fixture
from tests.runtimes.conftest import execute_suite, stub_provider
from tests.runtimes.test_case_seal import _agent, _run, listener  # noqa: F401 — the fixture
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "What is the exchange rate today?"

STREAMS_BOT = '''
import asyncio
import os

from openai import AsyncOpenAI, OpenAI

LISTENER = os.environ["SEAL_LISTENER"]
QUESTION = "What is the exchange rate today?"
ASK = [{"role": "user", "content": QUESTION}]


def _client():
    return OpenAI(api_key="sk-own", base_url=LISTENER + "/v1", max_retries=0)


def _async_client():
    return AsyncOpenAI(api_key="sk-own", base_url=LISTENER + "/v1", max_retries=0)


def chat_stream():
    stream = _client().chat.completions.create(
        model="gpt-4o-mini", messages=ASK, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens >= 0
    return "rate: " + "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


def chat_stream_helper():
    with _client().chat.completions.stream(model="gpt-4o-mini", messages=ASK) as stream:
        for _event in stream:
            pass
        return "rate: " + (stream.get_final_completion().choices[0].message.content or "")


def chat_stream_async():
    async def ask():
        stream = await _async_client().chat.completions.create(model="gpt-4o-mini", messages=ASK, stream=True)
        return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

    return "rate: " + asyncio.run(ask())


def responses_stream():
    stream = _client().responses.create(model="gpt-4o-mini", input=QUESTION, stream=True)
    return "rate: " + "".join(event.delta for event in stream if event.type == "response.output_text.delta")


def responses_stream_helper():
    with _client().responses.stream(model="gpt-4o-mini", input=QUESTION) as stream:
        for _event in stream:
            pass
        return "rate: " + stream.get_final_response().output_text


def responses_stream_async():
    async def ask():
        stream = await _async_client().responses.create(model="gpt-4o-mini", input=QUESTION, stream=True)
        async for event in stream:
            if event.type == "response.completed":
                return event.response.output_text
        return ""

    return "rate: " + asyncio.run(ask())


def stateful(field):
    values = {"previous_response_id": "resp_earlier", "conversation": "conv_1", "background": True,
              "prompt": {"id": "pmpt_1"}}
    return _client().responses.create(model="gpt-4o-mini", input=QUESTION, **{field: values[field]}).output_text


FUNCTIONS = {name: function for name, function in globals().items()
             if name.startswith(("chat_", "responses_", "stateful"))}


def respond(messages, client, tools):
    conversation = [{"role": "system", "content": "Help."}, *messages]
    for _ in range(4):
        completion = client.chat.completions.create(model="gpt-4o-mini", messages=conversation, tools=[
            {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
            for name in FUNCTIONS
        ])
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

STREAMING = ("chat_stream", "chat_stream_helper", "chat_stream_async", "responses_stream", "responses_stream_helper",
             "responses_stream_async")


def _asking(tool: str, arguments: dict | None = None):
    """The model: has `tool` called, answers the tool's own question "1.08", then says what the tool said."""
    def answer(request):
        last = request.chat_messages()[-1]
        if last.get("content") == QUESTION:
            return "1.08"
        if last["role"] == "tool":
            return "done: " + last["content"]
        return Answer(tool_calls=[Call(tool, arguments or {})])
    return answer


@pytest.mark.parametrize("tool", STREAMING)
def test_it_answers_a_tools_own_streamed_openai_call_through_the_model_layer(tool, scripted_model, team_repo,
                                                                             listener):  # noqa: F811
    agent = _agent(team_repo(STREAMS_BOT), outside_effects={tool: False})
    scripted_model.respond_with(_asking(tool))

    outcome = _run(agent, scripted_model, extra_allowed=(tool,))

    assert listener.received == []
    assert outcome.status == "passed", outcome.reason
    assert outcome.tool_calls[0]["result"] == "rate: 1.08"
    # The tool's call reached the model under test as the same call unstreamed: streaming is how it travels.
    own = scripted_model.requests[1]
    assert own.chat_messages()[-1] == {"role": "user", "content": QUESTION}
    assert "stream" not in own.settings and "stream_options" not in own.settings
    assert len(scripted_model.requests) == 3


@pytest.mark.parametrize("field", ["previous_response_id", "conversation", "background", "prompt"])
def test_it_ends_a_case_whose_tool_asks_the_responses_api_for_server_state_naming_the_field(
    field, scripted_model, team_repo, listener  # noqa: F811
):
    agent = _agent(team_repo(STREAMS_BOT), outside_effects={"stateful": False})
    scripted_model.respond_with(_asking("stateful", {"field": field}))

    outcome = _run(agent, scripted_model, extra_allowed=("stateful",))

    assert listener.received == []
    assert outcome.status == "error", outcome.reason
    assert f"does not carry {field}" in outcome.reason
    # Nothing of the tool's request reached the model: only the turn's first request was sent.
    assert len(scripted_model.requests) == 1


@pytest.mark.parametrize("tool", ["chat_stream", "responses_stream_helper"])
def test_it_records_a_tools_own_streamed_call_and_replays_it_with_the_server_gone(
    tool, openai_stub, settings, team_repo, listener  # noqa: F811
):
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": stub_provider(openai_stub.base_url)}
    openai_stub.respond_with(
        lambda body: (
            "1.08" if body["messages"][-1]["content"] == QUESTION
            else "done: " + body["messages"][-1]["content"] if body["messages"][-1]["role"] == "tool"
            else Answer(tool_calls=[Call(tool, {})])
        )
    )
    agent = Agent.objects.create(
        name="desk", runtime="python", entry=f"{team_repo(STREAMS_BOT)}.bot:respond", provider="stub",
        model="gpt-4o-mini", outside_effects={tool: False},
    )
    suite = Suite.objects.create(
        name="rates", agent=agent, case_timeout_seconds=int(WAIT_SECONDS), extra_allowed_functions=[tool],
    )
    case = Case.objects.create(suite=suite, name="converts")
    Turn.objects.create(case=case, user_message="Convert 10 EUR")
    Assertion.objects.create(case=case, type="outputContains", params={"text": "rate: 1.08"})

    recorded = execute_suite(suite, Run.Mode.RECORD)
    assert recorded.status == "passed", recorded.reason
    # The tool's streamed call reached the stub unstreamed, through the model layer.
    assert len(openai_stub.requests) == 3
    assert "stream" not in openai_stub.requests[1]
    openai_stub.stop()

    replayed = execute_suite(suite, Run.Mode.REPLAY)

    assert replayed.status == "passed", replayed.reason
    assert listener.received == []
