"""A span arriving at a long conversation costs what its conversation holds once, not every history in it (issue 35,
item 7): each model call resends the conversation so far, so a conversation's stored spans hold its history many
times over — and every span that arrived re-read all of them (one 1 KB span to a 75 MB conversation: 12-15 s,
~150 MB). Now a model call's history is read only where the mapping reads it: the last call of each turn."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agenthost.models import Agent, Conversation
from tests.traces.conftest import PROTOBUF, TRACES, request, span, with_peak_memory

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
