"""The ledger's matcher on the Responses API's input items (agenthost/ledger.py): the same random conversations as
tests/agenthost/test_ledger.py, written as a Responses request writes them — function_call and function_call_output
items beside message and reasoning items. Every result the seam did not produce is named; every one it produced
passes, exactly as in the chat format."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agenthost.ledger import strangers
from agenthost.llm.base import ModelRequest
from tests.agenthost.test_ledger import _conversation, steps


def _as_responses_input(messages: list[dict], *, parts: bool) -> list[dict]:
    """The chat conversation as the Responses API's input items, as the Agents SDK and pydantic-ai send them."""
    items: list[dict] = []
    for message in messages:
        if message["role"] == "assistant":
            items.append({"type": "reasoning", "id": f"rs_{len(items)}", "summary": []})
            items.extend(
                {"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                 "arguments": call["function"]["arguments"], "id": f"fc_{call['id']}"}
                for call in message["tool_calls"]
            )
        elif message["role"] == "tool":
            content = message["content"]
            text = content if isinstance(content, str) else content[0]["text"]
            output = [{"type": "input_text", "text": text}] if parts else text
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"], "output": output})
        else:
            items.append({"role": message["role"], "content": message["content"]})
    return items


@given(steps, st.booleans())
def test_it_names_the_same_strangers_in_a_responses_request_as_in_the_chat_one(drawn, parts):
    messages, decided, spares, foreign = _conversation(drawn, parts=False)

    items = _as_responses_input(messages, parts=parts)

    assert strangers(items, decided, spares) == foreign == strangers(messages, decided, spares)


@given(steps)
def test_it_reads_a_responses_requests_items_as_the_chat_messages_they_stand_for(drawn):
    messages, _, _, _ = _conversation(drawn, parts=False)
    request = ModelRequest(model="m", messages=_as_responses_input(messages, parts=False), api="responses",
                           settings={"instructions": "Help."})

    chat = request.chat_messages()

    assert chat[0] == {"role": "system", "content": "Help."}
    assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in chat[1:] if m["role"] != "assistant"] == [
        (m["role"], m.get("tool_call_id"), m["content"]) for m in messages if m["role"] != "assistant"
    ]
    assert [call for m in chat if m["role"] == "assistant" for call in m["tool_calls"]] == [
        call for m in messages if m["role"] == "assistant" for call in m["tool_calls"]
    ]
