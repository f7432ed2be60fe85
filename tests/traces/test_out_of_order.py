"""Issue 35, findings 5 and 8: spans that arrive before the span naming their conversation are adopted into that one
conversation — whatever order an exporter sends them in, one span a request — and leave no orphan duplicate behind;
a conversation of stored spans agenttest cannot place is named on the traces page with the reason, never dropped
silently."""

from __future__ import annotations

import random

import pytest
from django.urls import reverse

from agenthost.models import Agent, Conversation
from recording.services import recording_create
from tests.traces.test_conversations import FIND_ORDER
from tests.traces.test_receiver_conversations import exported, send, transcript  # noqa: F401 (a fixture)
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db

WHOLE = [
    ("user", "Where is order 1042?"),
    ("assistant", ""),
    ("tool_call", "find_order"),
    ("tool_result", '{"order_id":"1042","status":"shipped"}'),
    ("assistant", "Order 1042 has shipped."),
    ("user", "And order 7?"),
    ("assistant", ""),
    ("tool_call", "find_order"),
    ("tool_result", '{"order_id":"7","status":"shipped"}'),
    ("assistant", "Order 7 has shipped."),
]


def orders(count: int) -> dict[str, list[int]]:
    shuffled = {f"shuffled {seed}": random.Random(seed).sample(range(count), count) for seed in range(4)}
    return {"as ended": list(range(count)), "reversed": list(reversed(range(count))), **shuffled}


@pytest.mark.parametrize("order", ["as ended", "reversed", "shuffled 0", "shuffled 1", "shuffled 2", "shuffled 3"])
def test_it_adopts_spans_sent_in_any_order_into_one_conversation(client, staff_token, exported, order):  # noqa: F811
    Agent.objects.create(name="shop", provider="scripted", model="scripted")
    spans = [*exported[0], *exported[1]]  # two traces, each named the conversation by its invoke_agent span only

    for index in orders(len(spans))[order]:
        send(client, staff_token, [spans[index]], unnamed=not spans[index].name.startswith("invoke_agent"))

    [conversation] = Conversation.objects.filter(source=Conversation.Source.TRACE)
    keys = set(TraceSpan.objects.values_list("conversation_key", flat=True))
    assert keys == {conversation.trace_key}, "every span under the conversation's own key"
    assert sorted(conversation.trace_ids) == sorted({f"{span.context.trace_id:032x}" for span in spans})
    assert transcript(conversation) == WHOLE


def test_it_names_a_service_it_cannot_place_under_a_key_another_service_placed(client, staff_token, admin_user):
    from tests.traces.test_keys_and_bindings import CONVERSATION_ID, post_with_conversation_id, run_in

    # Bound by its service's name; the spans' agent name (shop) is no agent agenttest knows.
    Agent.objects.create(name="shop-eu", provider="scripted", model="scripted")
    post_with_conversation_id(client, staff_token, run_in("shop-eu", "Where is order 1042?"), CONVERSATION_ID)
    # The same id from a service that names no agent agenttest knows: its conversation is not placed.
    post_with_conversation_id(client, staff_token, run_in("billing", "Refund order 7?"), CONVERSATION_ID)
    assert Conversation.objects.filter(trace_key=CONVERSATION_ID).count() == 1

    client.force_login(admin_user)
    page = client.get(reverse("traces:conversations")).content.decode()

    assert "billing" in page
    assert "Not imported" in page and "billing" in page.split("Not imported", 1)[1], page


def test_it_moves_a_draft_of_a_copy_to_the_one_conversation_when_the_copy_is_adopted(
    client, staff_token, exported  # noqa: F811
):
    Agent.objects.create(name="shop", provider="scripted", model="scripted", functions=[FIND_ORDER])
    first_run, second_run = exported
    send(client, staff_token, first_run)
    [named] = Conversation.objects.all()
    *children, invoke = second_run
    send(client, staff_token, children, unnamed=True)
    copy = Conversation.objects.exclude(pk=named.pk).get()
    [draft] = recording_create(conversation=copy).cases

    send(client, staff_token, [invoke])

    assert list(Conversation.objects.values_list("pk", flat=True)) == [named.pk]
    draft.refresh_from_db()
    assert draft.source_conversation_id == named.pk
    assert transcript(Conversation.objects.get()) == WHOLE
