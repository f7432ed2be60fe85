"""A span arriving at a long conversation costs what its conversation holds once, not every history in it (issue 35,
item 7): each model call resends the conversation so far, so a conversation's stored spans hold its history many
times over — and every span that arrived re-read all of them (one 1 KB span to a 75 MB conversation: 12-15 s,
~150 MB). Now a model call's history is read only where the mapping reads it: the last call of each turn; and a span
continues its conversation from where its mapping stands (traces.models.ConversationMapping): it maps its own turn
and the host appends, in as many queries at the conversation's 30th turn as at its 5th."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agenthost.models import Agent, Conversation, Message
from bench.traces_ingest import growing_spans
from tests.traces.conftest import PROTOBUF, TRACES, request, span, with_peak_memory
from traces import conversations
from traces.conversations import trace_conversations_import
from traces.models import ConversationMapping

pytestmark = pytest.mark.django_db

CALLS = 40
FILLER = "The customer explained the whole story of the order again. " * 1_600  # ~100 KB a message


def text(role: str, content: str) -> dict:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def post(staff_token: str, *spans) -> None:
    answer = Client().generic("POST", TRACES, request(*spans, service="shop").SerializeToString(),
                              content_type=PROTOBUF, HTTP_AUTHORIZATION=f"Bearer {staff_token}")
    assert answer.status_code == 200, answer.content


def test_it_reads_a_long_turns_histories_once_when_one_more_span_arrives(staff_token):
    Agent.objects.create(name="shop", provider="scripted", model="scripted")
    # One turn of an agent loop: each of its model calls resends the history, which grows by a step each call.
    history = [text("user", "Where is order 1042? " + FILLER)]
    calls = []
    for number in range(1, CALLS + 1):
        answer = text("assistant", f"Step {number}: still looking. " + FILLER[: 2_000])
        calls.append(span(trace=1, span_id=number + 1, parent=1, start=number * 1_000, end=number * 1_000 + 500, **{
            "gen_ai.operation.name": "chat", "gen_ai.conversation.id": "long",
            "gen_ai.input.messages": json.dumps(history), "gen_ai.output.messages": json.dumps([answer]),
        }))
        history = [*history, answer, text("user", f"Go on {number}")]
    for start in range(0, CALLS, 10):
        post(staff_token, *calls[start : start + 10])
    histories = CALLS * len(FILLER)  # the bytes of history the turn's spans hold, at the least
    agent_span = span(trace=1, span_id=1, name="invoke_agent shop", start=0, end=10**6, **{
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "shop", "gen_ai.conversation.id": "long",
    })

    _, peak = with_peak_memory(lambda: post(staff_token, agent_span))

    conversation = Conversation.objects.get()
    assert conversation.messages.filter(role="assistant").count() == CALLS
    # The last call's history and the spans' other attributes: a few times one history, not all forty of them.
    assert peak < histories / 4, f"one more span held {peak / 1e6:.1f} MB; the histories are {histories / 1e6:.1f} MB"


GROWING = "bench-growing-conversation"
SPANS_PER_TURN = 4  # a model call asking for a tool, the tool, the model call answering, the invoke_agent span
MESSAGE_FIELDS = ("seq", "turn", "role", "content", "function_name", "arguments", "raw_arguments", "tool_call_id",
                  "agent__name", "agent_name", "outcome", "model", "input_tokens", "output_tokens", "span_id")


def post_body(staff_token: str, body: bytes) -> None:
    answer = Client().generic("POST", TRACES, body, content_type=PROTOBUF, HTTP_AUTHORIZATION=f"Bearer {staff_token}")
    assert answer.status_code == 200, answer.content


def queries_per_span(staff_token: str, bodies: list[bytes]) -> list[int]:
    counts = []
    for body in bodies:
        with CaptureQueriesContext(connection) as queries:
            post_body(staff_token, body)
        counts.append(len(queries.captured_queries))
    return counts


def written() -> tuple[dict, list[dict]]:
    conversation = Conversation.objects.get(trace_key=GROWING)
    fields = {name: getattr(conversation, name) for name in (
        "turn_count", "message_count", "trace_ids", "trace_agent", "bound_by", "title")}
    return fields, list(Message.objects.filter(conversation=conversation).order_by("seq").values(*MESSAGE_FIELDS))


def test_it_adds_a_span_to_a_long_conversation_in_as_many_queries_as_to_a_short_one(staff_token):
    Agent.objects.create(name="bench-growing", provider="scripted", model="scripted")
    bodies = growing_spans(31 * SPANS_PER_TURN, service="bench-growing")
    for body in bodies[: 5 * SPANS_PER_TURN]:
        post_body(staff_token, body)
    # The 6th turn's spans, one a request, in the order the service's exporter ends them.
    short = queries_per_span(staff_token, bodies[5 * SPANS_PER_TURN : 6 * SPANS_PER_TURN])
    for body in bodies[6 * SPANS_PER_TURN : 30 * SPANS_PER_TURN]:
        post_body(staff_token, body)
    long = queries_per_span(staff_token, bodies[30 * SPANS_PER_TURN :])

    assert long == short, f"a span at the 31st turn took {long} queries, at the 6th {short}"
    fields, messages = written()
    assert fields["turn_count"] == 31 and fields["message_count"] == 31 * 5
    assert [m["content"] for m in messages if m["role"] == "user"] == [
        f"Where is order {turn}? It was due last week." for turn in range(1, 32)]


def test_it_writes_the_conversation_a_span_continues_as_importing_all_its_spans_at_once_does(staff_token):
    Agent.objects.create(name="bench-growing", provider="scripted", model="scripted")
    Agent.objects.create(name="shop", provider="scripted", model="scripted")
    # Ten turns, the last cut short after its tool ran; each turn's invoke_agent span comes last and starts first, so
    # the turn is written before the agent that ran it is known, and its tool call before the tool's span.
    for body in growing_spans(9 * SPANS_PER_TURN + 2, service="bench-growing"):
        post_body(staff_token, body)
    assert ConversationMapping.objects.filter(conversation_key=GROWING).exists()
    continued = written()

    Conversation.objects.filter(trace_key=GROWING).delete()
    assert not ConversationMapping.objects.exists()  # the state goes with its conversation
    trace_conversations_import(keys=[GROWING])

    assert written() == continued
    fields, messages = continued
    assert fields["message_count"] == 9 * 5 + 4 and fields["trace_agent"] == "shop"
    assert {m["agent__name"] for m in messages[: 9 * 5]} == {"shop"}


def test_it_maps_the_whole_conversation_again_when_a_span_of_an_earlier_turn_comes_late(staff_token):
    Agent.objects.create(name="bench-growing", provider="scripted", model="scripted")
    bodies = growing_spans(5 * SPANS_PER_TURN, service="bench-growing")
    late = bodies.pop(SPANS_PER_TURN + 1)  # the second turn's tool span, held up in the service's exporter
    for body in [*bodies, late]:
        post_body(staff_token, body)
    continued = written()

    Conversation.objects.filter(trace_key=GROWING).delete()
    trace_conversations_import(keys=[GROWING])

    assert written() == continued
    results = [m for m in continued[1] if m["role"] == "tool_result"]
    assert [m["tool_call_id"] for m in results] == [f"call_{turn}" for turn in range(1, 6)]
    assert ConversationMapping.objects.get(conversation_key=GROWING).message_count == 5 * 5


def test_it_continues_a_conversation_keyed_by_its_one_trace_from_where_it_stands(staff_token, monkeypatch):
    """No conversation id: the conversation is its trace's, and an agent loop's trace grows call by call. Each span
    continues it (mapped from its state, not from nothing) and holds one history, not all of them."""
    Agent.objects.create(name="shop", provider="scripted", model="scripted")
    mappings: list[bool] = []
    real = conversations.conversations_from_spans

    def mapped(spans, prior=None):
        mappings.append(prior is not None)
        return real(spans, prior=prior)

    monkeypatch.setattr(conversations, "conversations_from_spans", mapped)
    history = [text("user", "Where is order 1042? " + FILLER)]
    peaks = []
    for number in range(1, CALLS // 2 + 1):
        answer = text("assistant", f"Step {number}: still looking. " + FILLER[:2_000])
        one = span(trace=7, span_id=number + 1, parent=1, start=number * 1_000, end=number * 1_000 + 500, **{
            "gen_ai.operation.name": "chat", "gen_ai.agent.name": "shop",
            "gen_ai.input.messages": json.dumps(history), "gen_ai.output.messages": json.dumps([answer]),
        })
        _, peak = with_peak_memory(lambda one=one: post(staff_token, one))
        peaks.append(peak)
        history = [*history, answer, text("user", f"Go on {number}")]

    conversation = Conversation.objects.get()
    assert conversation.trace_key == f"{7:032x}" and conversation.messages.filter(role="assistant").count() == 20
    assert mappings == [False] + [True] * (CALLS // 2 - 1), "every span after the first continues the conversation"
    # Each span resends the history (its first message is 100 KB): the 20th holds about what the 5th did.
    assert peaks[-1] < 2 * peaks[4], [round(peak / 1e6, 2) for peak in peaks]
    continued = list(conversation.messages.order_by("seq").values_list("role", "content"))
    conversation.delete()
    trace_conversations_import(keys=[f"{7:032x}"])
    assert list(Conversation.objects.get().messages.order_by("seq").values_list("role", "content")) == continued
