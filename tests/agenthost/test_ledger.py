"""The ledger's matcher (agenthost/ledger.py): random conversations of tool calls and results, some produced by the
seam (by the model's call id, or as a spare without it), some by the agent's own code. Every result the seam did
not produce is named; every one it produced passes."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from agenthost.ledger import ANY_CONTENT, Stranger, strangers

NAMES = ("find_order", "refund", "send_email")
# A hand-off's call is the framework's, named for it; no tool of the team's has its name.
HANDOFF_NAME = "transfer_to_billing"
# How a result reached the request: the seam answered the model's id, the seam answered without it (a spare of
# that name and content), a hand-off the framework answered in its own words, or the agent's own code.
BY_ID, SPARE, HANDOFF, OWN_CODE = "by_id", "spare", "handoff", "own_code"

results = st.tuples(st.sampled_from(NAMES), st.text(max_size=12), st.sampled_from((BY_ID, SPARE, HANDOFF, OWN_CODE)))
steps = st.lists(st.lists(results, min_size=1, max_size=4), min_size=1, max_size=6)


def _conversation(drawn: list[list[tuple[str, str, str]]], *, parts: bool):
    messages: list[dict] = [{"role": "user", "content": "hi"}]
    decided: dict[str, set[str]] = {}
    spares: Counter = Counter()
    foreign: list[Stranger] = []
    number = 0
    for step in drawn:
        calls, answers = [], []
        for name, text, how in step:
            number += 1
            call_id = f"call_{number}"
            calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}})
            # The agent's own code answers with what no seam result says (its real function's output).
            content = f"own:{text}" if how == OWN_CODE else f"seam:{text}"
            if how == BY_ID:
                decided.setdefault(call_id, set()).add(content)
            elif how == SPARE:
                spares[(name, content)] += 1
            elif how == HANDOFF:
                name = HANDOFF_NAME
                calls[-1]["function"]["name"] = name
                spares[(name, ANY_CONTENT)] += 1
                content = f'{{"assistant": "{text}"}}'
            else:
                foreign.append(Stranger(call_id=call_id, name=name))
            sent = [{"type": "text", "text": content}] if parts else content
            answers.append({"role": "tool", "tool_call_id": call_id, "content": sent})
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        messages.extend(answers)
    return messages, decided, spares, foreign


@given(steps, st.booleans())
def test_it_names_every_result_the_seam_did_not_produce_and_passes_every_one_it_did(drawn, parts):
    messages, decided, spares, foreign = _conversation(drawn, parts=parts)

    assert strangers(messages, decided, spares) == foreign


@given(steps, st.data())
def test_it_catches_a_seam_result_whose_content_the_agents_code_replaced(drawn, data):
    messages, decided, spares, _ = _conversation(drawn, parts=False)
    answered = [index for index, message in enumerate(messages)
                if message["role"] == "tool" and message["tool_call_id"] in decided]
    if not answered:
        return
    index = data.draw(st.sampled_from(answered))
    # The loop got the mock's answer through the seam, then sent the model its own function's output instead.
    messages[index] = {**messages[index], "content": "own:the real refund went through"}

    found = strangers(messages, decided, spares)

    assert Stranger(call_id=messages[index]["tool_call_id"], name=_name_of(messages, index)) in found


@given(st.lists(st.text(max_size=8), min_size=1, max_size=5))
def test_it_lets_a_spare_answer_one_call_only(contents):
    # The seam answered one call without the model's id; the loop sends that result twice.
    content = contents[0]
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "refund", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "refund", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "a", "content": content},
        {"role": "tool", "tool_call_id": "b", "content": content},
    ]

    assert strangers(messages, {}, {("refund", content): 1}) == [Stranger(call_id="b", name="refund")]


def test_it_passes_history_the_transcript_holds_and_a_request_without_tool_results():
    messages = [
        {"role": "user", "content": "Refund order 7"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "h1", "type": "function", "function": {"name": "refund", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "h1", "content": "refunded"},
        {"role": "assistant", "content": "Done."},
    ]

    assert strangers(messages, {"h1": {"refunded"}}) == []
    assert strangers([{"role": "user", "content": "hi"}], {}) == []


def _name_of(messages: list[dict], index: int) -> str:
    call_id = messages[index]["tool_call_id"]
    return next(call["function"]["name"] for message in messages if message["role"] == "assistant"
                for call in message.get("tool_calls") or () if call["id"] == call_id)
