"""A held conversation (conversation_open): one caller runs several turns with no claim, seal check or write of
their own, and everything is written once, by save() — the claim held throughout, so nobody else can send."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Conversation, Message, StateChange
from agenthost.services import conversation_open, conversation_send
from agenthost.turns import ConcurrentTurn, ConversationError, ConversationSealed
from tests.order_tools import TRACK_ORDER

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent(scripted_model) -> Agent:
    def respond(request):
        if request.messages[-1]["role"] == "tool":
            return Answer("Done.")
        return Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1042"})])

    scripted_model.respond_with(respond)
    return Agent.objects.create(
        name="desk", instruction="Help.", provider="scripted", model="scripted", functions=[{"name": TRACK_ORDER}]
    )


def stored(conversation: Conversation) -> list[tuple[int, int, str]]:
    return list(Message.objects.filter(conversation=conversation).order_by("seq").values_list("seq", "turn", "role"))


def test_it_runs_several_turns_and_writes_them_once_when_saved(agent):
    held = conversation_open(agent=agent, initial_state={"customer": "Ana"})

    first, second = held.send("Where is order 1042?"), held.send("And now?")

    conversation = Conversation.objects.get(pk=held.conversation.pk)
    assert (first.turn, second.turn) == (0, 1)
    assert stored(conversation) == [] and not StateChange.objects.filter(conversation=conversation).exists()
    assert conversation.turn_claimed_until is not None
    # The second turn's model saw the first turn's messages, though none was written.
    assert [m.role for m in held.messages()] == ["user", "assistant", "tool_call", "tool_result", "assistant"] * 2

    held.save()

    conversation.refresh_from_db()
    assert [(turn, role) for _, turn, role in stored(conversation)] == [
        (turn, role) for turn in (0, 1) for role in ("user", "assistant", "tool_call", "tool_result", "assistant")
    ]
    assert [seq for seq, _, _ in stored(conversation)] == list(range(10))
    assert (conversation.turn_count, conversation.message_count, conversation.turn_claimed_until) == (2, 10, None)
    # The initial state and what the (real) lookup wrote, each once per write.
    assert list(StateChange.objects.filter(conversation=conversation).order_by("id").values_list("key", "value")) == [
        ("customer", "Ana"), ("order_id", "1042"), ("order_status", "delivered"),
        ("order_id", "1042"), ("order_status", "delivered"),
    ]


def test_it_refuses_a_send_from_elsewhere_while_held_and_continues_the_turn_numbers_after_save(agent):
    held = conversation_open(agent=agent)
    held.send("Where is order 1042?")
    elsewhere = Conversation.objects.get(pk=held.conversation.pk)

    with pytest.raises(ConcurrentTurn):
        conversation_send(conversation=elsewhere, text="Me too")
    assert stored(elsewhere) == []

    held.save()
    later = conversation_send(conversation=Conversation.objects.get(pk=held.conversation.pk), text="And now?")

    assert later.turn == 1
    assert [turn for _, turn, role in stored(elsewhere) if role == "user"] == [0, 1]


def test_it_refuses_a_turn_after_save_and_saves_only_once(agent):
    held = conversation_open(agent=agent)
    held.send("Where is order 1042?")
    held.save()
    held.save()

    with pytest.raises(ConversationError, match="was saved and is no longer held"):
        held.send("And now?")
    with pytest.raises(ConversationError, match="was saved and is no longer held"):
        held.invoke_function(TRACK_ORDER, {"order_id": "1"})
    assert len(stored(held.conversation)) == 5


def test_it_keeps_a_sealed_held_conversation_closed_to_a_send_without_its_key(agent):
    held = conversation_open(agent=agent, seal="this conversation belongs to test run 1")
    held.send("Where is order 1042?")
    held.save()

    with pytest.raises(ConversationSealed):
        conversation_send(conversation=Conversation.objects.get(pk=held.conversation.pk), text="Continue")
    assert len(stored(held.conversation)) == 5


def test_it_writes_its_turns_after_a_turn_that_took_an_expired_claim_over_numbering_them_after_it(agent):
    held = conversation_open(agent=agent)
    held.send("first held turn")
    held.send("second held turn")
    # The held claim ran out (its holder stalled) and another turn took the conversation over and wrote.
    Conversation.objects.filter(pk=held.conversation.pk).update(
        turn_claimed_until=timezone.now() - timedelta(seconds=1)
    )
    other = conversation_send(conversation=Conversation.objects.get(pk=held.conversation.pk), text="other turn")

    held.save()

    conversation = Conversation.objects.get(pk=held.conversation.pk)
    users = list(
        Message.objects.filter(conversation=conversation, role="user").order_by("seq").values_list("turn", "content")
    )
    assert other.turn == 0
    assert users == [(0, "other turn"), (1, "first held turn"), (2, "second held turn")]
    assert [seq for seq, _, _ in stored(conversation)] == list(range(15))
    assert (conversation.turn_count, conversation.message_count) == (3, 15)
    # The other turn gave its claim back; the held one's release, no longer its to give, changed nothing.
    assert conversation.turn_claimed_until is None


def test_it_is_as_it_was_after_the_transaction_of_its_save_rolls_back_and_a_second_save_writes_it_all(agent):
    held = conversation_open(agent=agent)
    held.send("first held turn")
    # Its claim ran out and another turn took the conversation over, so the save numbers its turn after that one.
    Conversation.objects.filter(pk=held.conversation.pk).update(
        turn_claimed_until=timezone.now() - timedelta(seconds=1)
    )
    conversation_send(conversation=Conversation.objects.get(pk=held.conversation.pk), text="other turn")

    with pytest.raises(RuntimeError, match="the caller's transaction failed"), transaction.atomic():
        held.save()
        raise RuntimeError("the caller's transaction failed")

    assert [(turn, role) for _, turn, role in stored(held.conversation) if role == "user"] == [(0, "user")]
    held.save()

    conversation = Conversation.objects.get(pk=held.conversation.pk)
    users = list(
        Message.objects.filter(conversation=conversation, role="user").order_by("seq").values_list("turn", "content")
    )
    assert users == [(0, "other turn"), (1, "first held turn")]
    assert [seq for seq, _, _ in stored(conversation)] == list(range(10))
    assert (conversation.turn_count, conversation.message_count) == (2, 10)
    # Its own messages, as written (the other turn's were never read into it).
    assert [(m.seq, m.turn) for m in held.messages()] == [(seq, turn) for seq, turn, _ in stored(conversation)][5:]
    assert len(StateChange.objects.filter(conversation=conversation)) == 4
