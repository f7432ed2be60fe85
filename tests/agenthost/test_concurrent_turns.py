"""One turn at a time per conversation: a send claims the conversation before anything runs, so a second send at the
same moment is refused before it runs a tool; and start-up rules run on a committed conversation."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from agenthost.functions import FunctionContext, register_function
from agenthost.llm.scripted import Answer, Call, Fail
from agenthost.models import Agent, Conversation, Message, StateChange
from agenthost.seams import ModelCallFailed
from agenthost.services import conversation_send, conversation_start
from agenthost.turns import ConcurrentTurn

COUNTED = "test-counted_tool"
PROBE = "test-committed_probe"
_executions: list[int] = []
_probes: list[dict] = []


@register_function(name=COUNTED, description="Counts how often it really ran.", outside_effects=False)
def _counted(context: FunctionContext) -> str:
    _executions.append(context.conversation_id)
    return "counted"


def _seen_from_another_connection(conversation_id: int) -> dict:
    seen: dict = {}

    def look() -> None:
        try:
            seen["exists"] = Conversation.objects.filter(pk=conversation_id).exists()
            seen["state"] = dict(
                StateChange.objects.filter(conversation_id=conversation_id).values_list("key", "value")
            )
            seen["history"] = Message.objects.filter(conversation_id=conversation_id).count()
        except Exception as exc:  # a table locked by an open transaction is what this probe is for
            seen["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            connections.close_all()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(timeout=30)
    return seen


@register_function(name=PROBE, description="Looks at its conversation from another connection.", outside_effects=False)
def _probe(context: FunctionContext) -> str:
    _probes.append(_seen_from_another_connection(context.conversation_id))
    return "probed"


@pytest.fixture(autouse=True)
def _forget():
    _executions.clear()
    _probes.clear()


@pytest.fixture
def agent(scripted_model):
    return Agent.objects.create(
        name="counter",
        instruction="x",
        provider=scripted_model.provider_name,
        model=scripted_model.model,
        functions=[{"name": COUNTED}],
    )


def _in_thread(target, *args):
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = target(*args)
        except Exception as exc:
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.mark.django_db(transaction=True)
def test_it_lets_only_one_of_two_simultaneous_sends_run_and_writes_nothing_of_the_other(agent, scripted_model):
    conversation = conversation_start(agent=agent)
    first_call_started, release_first_call = threading.Event(), threading.Event()

    def model(request):
        if request.messages[-1]["role"] == "user" and not first_call_started.is_set():
            first_call_started.set()
            assert release_first_call.wait(timeout=30)
            return Answer(tool_calls=[Call(COUNTED, {})])
        if request.messages[-1]["role"] == "user":
            return Answer(tool_calls=[Call(COUNTED, {})])
        return Answer("done")

    scripted_model.respond_with(model)
    first, first_outcome = _in_thread(
        lambda: conversation_send(conversation=Conversation.objects.get(pk=conversation.pk), text="first")
    )
    try:
        assert first_call_started.wait(timeout=30)
        # The second send arrives while the first is waiting for the model, on its own copy of the conversation.
        with pytest.raises(ConcurrentTurn, match="another turn is in progress in this conversation"):
            conversation_send(conversation=Conversation.objects.get(pk=conversation.pk), text="second")
    finally:
        release_first_call.set()
        first.join(timeout=30)

    assert "error" not in first_outcome, first_outcome
    assert first_outcome["value"].output == "done"
    assert _executions == [conversation.pk], "exactly one turn ran the tool"
    user_messages = Message.objects.filter(conversation=conversation, role=Message.Role.USER)
    assert list(user_messages.values_list("content", flat=True)) == ["first"]
    assert len(scripted_model.requests) == 2, "the refused send never reached the model"
    stored = Conversation.objects.get(pk=conversation.pk)
    assert (stored.turn_count, stored.turn_claimed_until) == (1, None)


@pytest.mark.django_db(transaction=True)
def test_it_runs_a_turn_sent_on_a_copy_read_before_the_previous_turn_ended(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call(COUNTED, {})]), "one", Answer(tool_calls=[Call(COUNTED, {})]), "two")
    conversation = conversation_start(agent=agent)
    stale = Conversation.objects.get(pk=conversation.pk)

    conversation_send(conversation=conversation, text="first")
    second = conversation_send(conversation=stale, text="second")

    assert (second.turn, second.output) == (1, "two")
    assert _executions == [conversation.pk, conversation.pk]
    seqs = list(Message.objects.filter(conversation=conversation).values_list("seq", flat=True))
    assert seqs == list(range(len(seqs)))


@pytest.mark.django_db(transaction=True)
def test_it_gives_the_claim_back_when_the_turn_fails(agent, scripted_model):
    scripted_model.play(Fail(code="rate_limited", message="slow down"), "recovered")
    conversation = conversation_start(agent=agent)

    with pytest.raises(ModelCallFailed):
        conversation_send(conversation=conversation, text="first")

    assert Conversation.objects.get(pk=conversation.pk).turn_claimed_until is None
    assert conversation_send(conversation=conversation, text="again").output == "recovered"


@pytest.mark.django_db(transaction=True)
def test_it_takes_over_a_claim_that_expired(agent, scripted_model):
    # The process that held it died mid-turn: after the request timeout the conversation is usable again.
    scripted_model.play("after the crash")
    conversation = conversation_start(agent=agent)
    Conversation.objects.filter(pk=conversation.pk).update(turn_claimed_until=timezone.now() - timedelta(seconds=1))

    assert conversation_send(conversation=conversation, text="hello").output == "after the crash"


@pytest.mark.django_db(transaction=True)
def test_it_answers_409_while_another_turn_is_in_progress(agent, scripted_model, admin_user, admin_client_api):
    conversation = conversation_start(agent=agent)
    in_progress = timezone.now() + timedelta(minutes=1)
    Conversation.objects.filter(pk=conversation.pk).update(turn_claimed_until=in_progress)

    response = admin_client_api.post(f"/api/conversations/{conversation.pk}/messages/", {"text": "hi"}, format="json")

    assert response.status_code == 409, response.data
    assert response.data["code"] == "concurrent_turn"
    assert response.data["detail"].startswith("another turn is in progress in this conversation")
    assert scripted_model.requests == [] and not Message.objects.filter(conversation=conversation).exists()
    assert Conversation.objects.get(pk=conversation.pk).turn_claimed_until == in_progress, "the claim is not ours"


@pytest.mark.django_db(transaction=True)
def test_it_fires_start_up_rules_on_a_committed_conversation_after_on_created(scripted_model):
    agent = Agent.objects.create(
        name="greeter",
        instruction="x",
        provider=scripted_model.provider_name,
        model=scripted_model.model,
        functions=[{"name": PROBE}],
        rules=[{"trigger": "conversation_started", "function": PROBE}],
    )
    prepared: list[int] = []

    def on_created(conversation):
        assert _probes == [], "on_created runs before any rule"
        prepared.append(conversation.pk)

    conversation = conversation_start(
        agent=agent,
        initial_state={"customer": "Ana"},
        history=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
        on_created=on_created,
    )

    assert prepared == [conversation.pk]
    assert _probes == [{"exists": True, "state": {"customer": "Ana"}, "history": 2}]
    stored = Conversation.objects.get(pk=conversation.pk)
    assert (stored.turn_count, stored.message_count, stored.turn_claimed_until) == (1, 4, None)
    rule_result = Message.objects.get(conversation=conversation, role=Message.Role.TOOL_RESULT)
    assert (rule_result.function_name, rule_result.content, rule_result.turn) == (PROBE, "probed", -1)
