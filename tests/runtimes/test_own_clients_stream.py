"""Streaming on agenttest's own clients (issue 33 item 3, "streaming or not"): the python runtime's given client and
the Agents SDK's chat-completions client agenttest builds answer `stream=True` with the model layer's answer handed
back as the API's chunks or events (agenthost/llm/streams.py). Stream is transport: the request recorded, replayed and
sent is the one the same code sends unstreamed."""

from __future__ import annotations

import json
import re

import pytest

from agenthost.models import Agent, Conversation
from agenthost.services import conversation_send, conversation_start
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import Run
from tests.runtimes.conftest import SHOP_BOT, execute_suite, markers, suite_finding_order
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

# SHOP_BOT's loop reading its answers as chunks: text and tool calls put together from the deltas, as a streaming
# loop written from the openai docs does.
STREAMED_CHAT = SHOP_BOT.replace('''        completion = client.chat.completions.create(
            model="gpt-4o-mini", messages=conversation, tools=TOOLS, temperature=0.2
        )
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        conversation.append({
            "role": "assistant", "content": message.content,
            "tool_calls": [call.model_dump() for call in message.tool_calls],
        })
        for call in message.tool_calls:
            result = tools.call(FUNCTIONS[call.function.name], call.function.arguments, call_id=call.id)
            conversation.append({"role": "tool", "tool_call_id": call.id, "content": result})''',
    '''        text, calls, usage = "", {}, None
        for chunk in client.chat.completions.create(
            model="gpt-4o-mini", messages=conversation, tools=TOOLS, temperature=0.2, stream=True,
            stream_options={"include_usage": True},
        ):
            usage = chunk.usage or usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for delta in choice.delta.tool_calls or []:
                    call = calls.setdefault(delta.index, {"id": "", "type": "function",
                                                          "function": {"name": "", "arguments": ""}})
                    call["id"] = delta.id or call["id"]
                    call["function"]["name"] += delta.function.name or ""
                    call["function"]["arguments"] += delta.function.arguments or ""
        assert usage is not None and usage.total_tokens > 0
        if not calls:
            return text
        conversation.append({"role": "assistant", "content": text or None,
                             "tool_calls": [calls[index] for index in sorted(calls)]})
        for call in conversation[-1]["tool_calls"]:
            result = tools.call(FUNCTIONS[call["function"]["name"]], call["function"]["arguments"], call_id=call["id"])
            conversation.append({"role": "tool", "tool_call_id": call["id"], "content": result})''')

# SHOP_BOT's loop on the SDK's stream helper: its events read, then its final completion.
STREAM_HELPER = SHOP_BOT.replace('''        completion = client.chat.completions.create(
            model="gpt-4o-mini", messages=conversation, tools=TOOLS, temperature=0.2
        )''', '''        with client.chat.completions.stream(
            model="gpt-4o-mini", messages=conversation, tools=TOOLS, temperature=0.2
        ) as stream:
            deltas = [event for event in stream if event.type == "content.delta"]
            completion = stream.get_final_completion()
        assert "".join(event.delta for event in deltas) == (completion.choices[0].message.content or "")''').replace(
    '"tool_calls": [call.model_dump() for call in message.tool_calls],',
    '"tool_calls": [{"id": call.id, "type": "function", "function": {"name": call.function.name, '
    '"arguments": call.function.arguments}} for call in message.tool_calls],',
)

# The same loop on the Responses API, unstreamed or streamed (its events read to `response.completed`).
RESPONSES_LOOP = SHOP_BOT.split("def respond(")[0] + '''
RESPONSES_TOOLS = [{"type": "function", **tool["function"]} for tool in TOOLS]


def respond(messages, client, tools):
    items = list(messages)
    for _ in range(5):
        response = ASK
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response.output_text
        for call in calls:
            items.append({"type": "function_call", "call_id": call.call_id, "name": call.name,
                          "arguments": call.arguments})
            result = tools.call(FUNCTIONS[call.name], call.arguments, call_id=call.call_id)
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": result})
    return "I could not finish."


def ask(client, items, **streaming):
    return client.responses.create(model="gpt-4o-mini", instructions=INSTRUCTION, input=items,
                                   tools=RESPONSES_TOOLS, **streaming)


def ask_streamed(client, items):
    for event in ask(client, items, stream=True):
        if event.type == "response.completed":
            return event.response
    raise AssertionError("the stream ended without response.completed")
'''
UNSTREAMED_RESPONSES = RESPONSES_LOOP.replace("ASK", "ask(client, items)")
STREAMED_RESPONSES = RESPONSES_LOOP.replace("ASK", "ask_streamed(client, items)")


def _python_suite(package: str, name: str) -> Suite:
    suite = suite_finding_order(Agent.objects.create(
        name=name, runtime="python", entry=f"{package}.bot:respond", provider="stub", model="gpt-4o-mini"
    ))
    Suite.objects.filter(pk=suite.pk).update(name=name)
    return suite


def _without_ids(requests: list[dict]) -> list[dict]:
    """The requests with the server's own ids (the stub numbers them across all its answers) replaced by their
    position: the one value neither the team's code nor agenttest chooses."""
    text = json.dumps(requests)
    for position, found in enumerate(dict.fromkeys(re.findall(r'"((?:call|\w+_resp_stub)_\d+(?:_\d+)?)"', text))):
        text = text.replace(f'"{found}"', f'"id-{position}"')
    return json.loads(text)


def _records_replays_and_sends_as_unstreamed(stub, team_repo, tmp_path, suite_of, streamed: str, unstreamed: str):
    plain = execute_suite(suite_of(team_repo(unstreamed), "unstreamed"), Run.Mode.RECORD)
    assert plain.status == "passed", plain.reason
    sent_plain = list(stub.requests)

    suite = suite_of(team_repo(streamed), "streamed")
    recorded = execute_suite(suite, Run.Mode.RECORD)
    assert recorded.status == "passed", recorded.reason
    sent_streamed = stub.requests[len(sent_plain):]
    stub.stop()
    replayed = execute_suite(suite, Run.Mode.REPLAY)

    assert replayed.status == "passed", replayed.reason
    assert [c["outcome"] for c in replayed.tool_calls] == [c["outcome"] for c in recorded.tool_calls] != []
    # find_order mocked (and, for the Agents SDK, the desk agent exposed as a tool allowed): nothing ran for real.
    assert "mocked" in {c["outcome"] for c in recorded.tool_calls} <= {"mocked", "allowed"}
    assert markers(tmp_path) == []
    # Stream is transport: the streamed loop's requests are, field by field, the unstreamed loop's.
    assert len(sent_streamed) == len(sent_plain) >= 2
    assert _without_ids(sent_streamed) == _without_ids(sent_plain)
    assert all("stream" not in body and "stream_options" not in body for body in sent_streamed)


@pytest.mark.parametrize(("streamed", "unstreamed"), [
    (STREAMED_CHAT, SHOP_BOT), (STREAM_HELPER, SHOP_BOT), (STREAMED_RESPONSES, UNSTREAMED_RESPONSES),
], ids=["chat.completions", "chat.completions.stream", "responses"])
def test_a_streaming_plain_loop_is_recorded_replayed_offline_and_sent_as_unstreamed(
    streamed, unstreamed, stub, team_repo, tmp_path
):
    _records_replays_and_sends_as_unstreamed(stub, team_repo, tmp_path, _python_suite, streamed, unstreamed)


def test_a_streaming_plain_loop_answers_in_chat(stub, team_repo):
    agent = Agent.objects.create(name="shop", runtime="python", entry=f"{team_repo(STREAMED_CHAT)}.bot:respond",
                                 provider="stub", model="gpt-4o-mini")

    answer = conversation_send(conversation=conversation_start(agent=agent), text="Where is order 1042?")

    assert answer.output == 'Your order: {"order_id":"1042","status":"shipped"}'


# An Agents SDK agent on the SDK's chat-completions model (its own model object, as for a non-OpenAI provider), asking
# a desk agent exposed as a tool; with `on_stream` the SDK runs the desk with Runner.run_streamed.
AGENTS_CHAT = '''
import json
import os
from pathlib import Path

from agents import Agent, AsyncOpenAI, OpenAIChatCompletionsModel, function_tool

MARKERS = Path(os.environ.get("SHOP_MARKERS", "markers"))


def _model():
    return OpenAIChatCompletionsModel(
        model="gpt-4o-mini", openai_client=AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused")
    )


@function_tool
def find_order(order_id: str) -> str:
    """Find an order by its number."""
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"find-{order_id}").write_text("looked up for real")
    return json.dumps({"order_id": order_id, "status": "shipped"})


STREAMED = []


def _streamed(event):
    STREAMED.append(event)


desk = Agent(name="desk", instructions="You look orders up.", tools=[find_order], model=_model())
front = Agent(
    name="front", instructions="Ask the desk about orders.", model=_model(),
    tools=[desk.as_tool(tool_name="ask_desk", tool_description="Ask the order desk.", ON_STREAM)],
)
'''
AGENTS_CHAT_STREAMED = AGENTS_CHAT.replace("ON_STREAM", "on_stream=_streamed")
AGENTS_CHAT_UNSTREAMED = AGENTS_CHAT.replace(", ON_STREAM", "")


def desk_answer(body: dict):
    """front asks the desk; the desk looks the order up and says what find_order said; front passes it on."""
    from agenthost.llm.scripted import Answer, Call

    messages = body["messages"]
    desk = messages[0]["content"] == "You look orders up."
    if messages[-1]["role"] == "tool":
        return f"{'Desk' if desk else 'Front'}: {messages[-1]['content']}"
    if desk:
        return Answer(tool_calls=[Call("find_order", {"order_id": "1042"})])
    return Answer(tool_calls=[Call("ask_desk", {"input": "Where is order 1042?"})])


def _agents_suite(package: str, name: str) -> Suite:
    agent = Agent.objects.create(
        name=name, runtime="openai-agents", entry=f"{package}.bot:front", provider="stub", model="gpt-4o-mini",
        outside_effects={"ask_desk": False},
    )
    suite = Suite.objects.create(name=name, agent=agent, case_timeout_seconds=int(WAIT_SECONDS),
                                 extra_allowed_functions=["ask_desk"])
    case = Case.objects.create(suite=suite, name="finds the order")
    Turn.objects.create(case=case, position=0, user_message="Where is order 1042?")
    Mock.objects.create(case=case, position=0, function_name="find_order", result='{"status": "in transit"}')
    Assertion.objects.create(case=case, position=0, type="toolCalled", params={"function": "find_order"})
    Assertion.objects.create(case=case, position=1, type="outputContains", params={"text": "Front: Desk:"})
    Assertion.objects.create(case=case, position=2, type="outputContains", params={"text": "in transit"})
    return suite


def test_a_streamed_agents_sdk_chat_completions_run_is_recorded_replayed_offline_and_sent_as_unstreamed(
    stub, team_repo, tmp_path
):
    stub.respond_with(desk_answer)
    _records_replays_and_sends_as_unstreamed(stub, team_repo, tmp_path, _agents_suite, AGENTS_CHAT_STREAMED,
                                             AGENTS_CHAT_UNSTREAMED)
    assert stub.paths == ["/v1/chat/completions"] * 8


def test_a_streamed_agents_sdk_chat_completions_run_answers_in_chat(stub, team_repo, tmp_path):
    stub.respond_with(desk_answer)
    package = team_repo(AGENTS_CHAT_STREAMED)
    agent = Agent.objects.create(name="shop", runtime="openai-agents", entry=f"{package}.bot:front", provider="stub",
                                 model="gpt-4o-mini")
    conversation = conversation_start(agent=agent)

    answer = conversation_send(conversation=conversation, text="Where is order 1042?")

    assert answer.output == 'Front: Desk: {"order_id": "1042", "status": "shipped"}'
    assert len(stub.requests) == 4 and Conversation.objects.filter(pk=conversation.pk).exists()
