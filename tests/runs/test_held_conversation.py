"""Issue 15, item 4: a case's test conversation is held for the whole case and written once, in the transaction that
stores the case's result — so a case costs the same few statements however many turns it has, and a stored result
and the transcript it points at are durable together. Through the real run service, mock seam and database."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection, connections
from django.db.backends.signals import connection_created

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Conversation, Message, StateChange
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute

pytestmark = pytest.mark.django_db(transaction=True)


def answer_by_rule(request) -> Answer:
    """A tool call for the order the user names, then a short text after its result."""
    if request.messages[-1]["role"] == "tool":
        return Answer("It has shipped.")
    order = request.messages[-1]["content"].rsplit(" ", 1)[-1].rstrip("?")
    return Answer(tool_calls=[Call("find_order", {"order_id": order})])


def suite_of(cases: int, turns: int, name: str = "orders") -> Suite:
    agent = Agent.objects.create(
        name=f"{name}-desk", instruction="Help.", provider="scripted", model="scripted",
        functions=[{"name": "find_order"}],
    )
    suite = Suite.objects.create(name=name, agent=agent, case_timeout_seconds=30)
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"case {index:02d}")
        for position in range(turns):
            turn = Turn.objects.create(case=case, position=position, user_message=f"Where is order {index}{position}?")
            Assertion.objects.create(
                case=case, turn=turn, position=position, type="toolCalled", params={"function": "find_order"}
            )
        Mock.objects.create(
            case=case, function_name="find_order", result='{"status": "shipped"}',
            state_writes={"order_status": "shipped"},
        )
        Assertion.objects.create(
            case=case, position=turns, type="stateEquals", params={"key": "order_status", "value": "shipped"}
        )
    return suite


def test_it_writes_nothing_of_a_cases_conversation_until_it_stores_the_result_and_then_the_whole_transcript(
    scripted_model,
):
    seen: list[int] = []

    def respond(request):
        # Asked on the case's own thread, in the middle of its turns.
        seen.append(Message.objects.filter(conversation_id=request.metadata["conversation_id"]).count())
        return answer_by_rule(request)

    scripted_model.respond_with(respond)
    suite = suite_of(cases=3, turns=3)

    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key]).pk)

    assert run.status == Run.Status.PASSED, run.reason
    assert seen == [0] * 18
    for result in CaseResult.objects.filter(run=run):
        conversation = Conversation.objects.get(pk=result.conversation_id)
        messages = list(Message.objects.filter(conversation=conversation).select_related("agent").order_by("seq"))
        assert [(m["seq"], m["turn"], m["role"], m["content"], m["agent"]) for m in result.transcript] == [
            (m.seq, m.turn, m.role, m.content, m.agent.name) for m in messages
        ]
        assert [m.turn for m in messages if m.role == "user"] == [0, 1, 2]
        assert (conversation.turn_count, conversation.message_count) == (3, 15)
        assert conversation.turn_claimed_until is None and conversation.seal_hash
        assert list(StateChange.objects.filter(conversation=conversation).values_list("key", "value")) == [
            ("order_status", "shipped")
        ] * 3


class Statements:
    """Every statement and commit on every connection (a run's cases use a thread and a connection of their own)."""

    def __init__(self) -> None:
        self.count = 0
        self.commits = 0
        self.kinds: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._wrapped: list[Any] = []

    def __call__(self, execute, sql, params, many, context):
        with self._lock:
            self.count += 1
            self.kinds[" ".join(sql.split()[:3])[:40]] += 1
            self.commits += sql.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE") and not (
                context["connection"].in_atomic_block
            )
        return execute(sql, params, many, context)

    def wrap(self, sender: Any = None, connection: Any = None, **kwargs: Any) -> None:
        connection.execute_wrappers.append(self)
        commit = connection.commit

        def counted() -> None:
            with self._lock:
                self.commits += 1
            commit()

        connection.commit = counted
        self._wrapped.append(connection)

    def __enter__(self) -> Statements:
        connection_created.connect(self.wrap, weak=False, dispatch_uid="held-conversation-statements")
        connection.ensure_connection()
        self.wrap(connection=connections["default"])
        return self

    def __exit__(self, *exc_info: object) -> None:
        connection_created.disconnect(dispatch_uid="held-conversation-statements")
        for wrapped in self._wrapped:
            wrapped.execute_wrappers.remove(self)
            del wrapped.commit


def run_counted(suite: Suite, model_key: str) -> Statements:
    run = run_create(suite=suite, model_keys=[model_key])
    with Statements() as statements:
        finished = run_execute(run_id=run.pk)
    assert finished.status == Run.Status.PASSED, finished.reason
    return statements


@pytest.mark.parametrize("turns", [1, 5])
def test_it_costs_a_case_the_same_few_statements_and_commits_however_many_turns_it_has(scripted_model, turns):
    scripted_model.respond_with(answer_by_rule)
    # The first run of the group creates its run lock: once, not per case.
    run_counted(suite_of(cases=1, turns=turns, name="first"), scripted_model.key)
    small = run_counted(suite_of(cases=2, turns=turns, name="small"), scripted_model.key)
    large = run_counted(suite_of(cases=6, turns=turns, name="large"), scripted_model.key)

    per_case = Counter(statements=(large.count - small.count) / 4, commits=(large.commits - small.commits) / 4)

    # Per case: its conversation's row (a transaction), and one transaction storing the result with the
    # conversation's counters, messages and state, whose first statement also announces the next case unless a
    # cancel was asked. SQLite's BEGIN is a statement of its own.
    assert per_case == Counter(statements=8 if connection.vendor == "sqlite" else 6, commits=2), (
        large.kinds - small.kinds
    )


def test_it_keeps_the_result_of_a_case_whose_conversation_was_deleted_while_it_ran_and_goes_on(scripted_model):
    # Someone deletes a running case's test conversation (the admin allows deleting conversations): that case keeps
    # its verdict and transcript without the conversation, and the run goes on to the next cases.
    deleted: list[int] = []

    def respond(request):
        conversation_id = request.metadata["conversation_id"]
        if not deleted and request.messages[-1]["role"] == "tool":
            Conversation.objects.filter(pk=conversation_id).delete()
            deleted.append(conversation_id)
        return answer_by_rule(request)

    scripted_model.respond_with(respond)
    suite = suite_of(cases=3, turns=2)

    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key]).pk)

    assert run.status == Run.Status.PASSED, run.reason
    first, *others = CaseResult.objects.filter(run=run).order_by("position")
    assert first.conversation_id is None
    assert "its test conversation was deleted while the case ran" in first.reason
    # The same turns as a case whose conversation was kept.
    assert [(m["turn"], m["role"]) for m in first.transcript] == [(m["turn"], m["role"]) for m in others[0].transcript]
    asked = [m["content"] for m in first.transcript if m["role"] == "user"]
    assert asked == ["Where is order 00?", "Where is order 01?"]
    assert not Conversation.objects.filter(pk=deleted[0]).exists()
    assert [r.status for r in others] == [CaseResult.Status.PASSED] * 2
    assert all(Conversation.objects.filter(pk=r.conversation_id).exists() for r in others)
