"""A conversation a team's service had, written into the host from plain data (the host knows no traces): its messages
as given, re-imports that update it in place, and nothing written for what cannot be one."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from django.db import connection, transaction

from agenthost.imported import PROVIDER_EXECUTED
from agenthost.models import Agent, Conversation, Message
from agenthost.services import conversation_import, conversation_send
from agenthost.turns import InvalidInput

pytestmark = pytest.mark.django_db


def message(role: str, content: str = "", **fields) -> SimpleNamespace:
    defaults = dict(function_name="", arguments=None, raw_arguments="", tool_call_id="", agent_name="", model="",
                    input_tokens=0, output_tokens=0, span_id="", provider_executed=False)
    return SimpleNamespace(role=role, content=content, **(defaults | fields))


def turn(order: str, span: str) -> list[SimpleNamespace]:
    return [
        message("user", f"Where is order {order}?", span_id=f"{span}0"),
        message("assistant", "", agent_name="shop", model="openai:gpt-4o", input_tokens=12, span_id=f"{span}1"),
        message("tool_call", function_name="find_order", arguments={"order_id": order}, tool_call_id=f"c{order}",
                agent_name="shop", span_id=f"{span}1"),
        message("tool_result", f'{{"status": "shipped", "order_id": "{order}"}}', tool_call_id=f"c{order}",
                agent_name="shop", span_id=f"{span}2"),
        message("tool_call", function_name="web_search", arguments={"q": order}, tool_call_id=f"w{order}",
                agent_name="billing", provider_executed=True, span_id=f"{span}1"),
        message("assistant", f"Order {order} has shipped.", agent_name="billing", model="openai:gpt-4o",
                span_id=f"{span}3"),
    ]


def trace(*messages: SimpleNamespace, key: str = "conv-1", content_missing: str = "") -> SimpleNamespace:
    return SimpleNamespace(key=key, service_name="shop-service", trace_ids=("a" * 32,), agent_name="shop",
                           messages=messages, content_missing=content_missing)


def rows(conversation: Conversation) -> list[tuple]:
    return list(conversation.messages.order_by("seq").values_list(
        "pk", "turn", "role", "function_name", "agent__name", "agent_name", "outcome", "span_id"))


def test_it_imports_a_conversation_and_updates_it_when_imported_again(scripted_model):
    shop = Agent.objects.create(name="shop", provider="scripted", model="scripted")

    conversation = conversation_import(agent=shop, mapped=trace(*turn("1042", "a")), bound_by="agent name")

    assert (conversation.source, conversation.trace_service, conversation.trace_key, conversation.trace_ids,
            conversation.trace_agent, conversation.bound_by) == (
        "trace", "shop-service", "conv-1", ["a" * 32], "shop", "agent name")
    assert (conversation.turn_count, conversation.message_count) == (1, 6)
    first = rows(conversation)
    # The agent named in the trace is ours when one of that name exists, else a name under the bound agent; a result
    # names its function and how it was answered (the tool ran) as the host's own do; a tool the provider ran is
    # marked so.
    assert [row[1:] for row in first] == [
        (0, "user", "", "shop", "", "", "a0"),
        (0, "assistant", "", "shop", "", "", "a1"),
        (0, "tool_call", "find_order", "shop", "", "", "a1"),
        (0, "tool_result", "find_order", "shop", "", "executed", "a2"),
        (0, "tool_call", "web_search", "shop", "billing", PROVIDER_EXECUTED, "a1"),
        (0, "assistant", "", "shop", "billing", "", "a3"),
    ]
    assert conversation.messages.get(seq=2).arguments == {"order_id": "1042"}
    assert conversation.messages.get(seq=1).input_tokens == 12

    # The same conversation again: nothing changes. Grown by a turn: the new messages are added to the same rows.
    again = conversation_import(agent=shop, mapped=trace(*turn("1042", "a")), bound_by="agent name")
    assert again.pk == conversation.pk and rows(again) == first
    grown = conversation_import(agent=shop, mapped=trace(*turn("1042", "a"), *turn("7", "b")), bound_by="chosen")
    assert grown.pk == conversation.pk and rows(grown)[:6] == first
    assert [row[1:3] for row in rows(grown)[6:]] == [(1, "user"), *[(1, role) for role in
                                                     ("assistant", "tool_call", "tool_result", "tool_call",
                                                      "assistant")]]
    grown.refresh_from_db()
    assert (grown.turn_count, grown.message_count, grown.bound_by) == (2, 12, "chosen")

    # What the service says now differs from what was stored: the conversation is rewritten, still one.
    rewritten = conversation_import(agent=shop, mapped=trace(*turn("9", "c")), bound_by="agent name")
    assert rewritten.pk == conversation.pk
    assert [(row[2], row[7]) for row in rows(rewritten)][:1] == [("user", "c0")]
    assert rewritten.messages.count() == 6
    assert Conversation.objects.filter(source="trace").count() == 1
    # Another key is another conversation.
    assert conversation_import(agent=shop, mapped=trace(*turn("9", "c"), key="conv-2"),
                               bound_by="agent name").pk != conversation.pk

    # It happened in the team's service: nothing can be sent to it here, and no model is asked.
    with pytest.raises(InvalidInput, match="imported from the traces of shop-service"):
        conversation_send(conversation=rewritten, text="And now?")
    assert scripted_model.requests == []


def test_it_writes_nothing_for_a_conversation_without_content_or_with_an_unknown_role(db):
    shop = Agent.objects.create(name="shop", provider="scripted", model="scripted")

    with pytest.raises(InvalidInput, match="no message content: turn capture on"):
        conversation_import(agent=shop, mapped=trace(message("user"), content_missing="turn capture on"),
                            bound_by="agent name")
    with pytest.raises(InvalidInput, match=r"messages\[1\]: role must be one of"):
        conversation_import(agent=shop, mapped=trace(message("user", "hi"), message("system", "be nice")),
                            bound_by="agent name")
    with pytest.raises(InvalidInput, match="bound_by must be one of"):
        conversation_import(agent=shop, mapped=trace(message("user", "hi")), bound_by="guess")

    assert not Conversation.objects.exists() and not Message.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_updates_the_conversation_another_import_wrote_at_the_same_moment():
    """The receiver and a worker import one new conversation at once: the second insert meets the first's unique key
    and updates that conversation instead of failing the request (PostgreSQL lets both read "none yet"; SQLite's
    IMMEDIATE transactions queue the second behind the first)."""
    shop = Agent.objects.create(name="shop", provider="scripted", model="scripted")
    first_written, second_started = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def first() -> None:
        try:
            with transaction.atomic():
                conversation_import(agent=shop, mapped=trace(*turn("1042", "a")), bound_by="agent name")
                first_written.set()
                # Hold the insert uncommitted until the second import has read that there is none yet.
                second_started.wait(10)
                threading.Event().wait(0.5)
        except BaseException as exc:  # noqa: BLE001 — reported by the test
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    assert first_written.wait(10)
    second_started.set()
    grown = trace(*turn("1042", "a"), *turn("1043", "b"))
    conversation = conversation_import(agent=shop, mapped=grown, bound_by="agent name")
    thread.join(10)

    assert failures == []
    assert Conversation.objects.filter(source="trace").count() == 1
    assert (conversation.turn_count, conversation.messages.count()) == (2, 12)
