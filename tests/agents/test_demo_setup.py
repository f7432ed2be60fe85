"""`manage.py demo_setup`: users, the order-support agents and the sample conversations, idempotently."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import call_command

from agents.models import Agent, Conversation, Message, StateChange

pytestmark = pytest.mark.django_db


def _run() -> str:
    out = io.StringIO()
    call_command("demo_setup", stdout=out)
    return out.getvalue()


def _snapshot():
    return {
        "agents": list(Agent.objects.order_by("pk").values()),
        "sub_agents": sorted(Agent.sub_agents.through.objects.values_list("from_agent_id", "to_agent_id")),
        "conversations": list(Conversation.objects.order_by("pk").values()),
        "messages": Message.objects.count(),
        "state_changes": StateChange.objects.count(),
        "users": list(get_user_model().objects.order_by("pk").values("username", "password", "is_superuser")),
    }


def test_it_sets_up_the_demo_once_and_changes_nothing_on_a_rerun(monkeypatch):
    monkeypatch.delenv("AGENTTEST_ADMIN_PASSWORD", raising=False)
    monkeypatch.delenv("AGENTTEST_MEMBER_PASSWORD", raising=False)

    first = _run()
    passwords = re.findall(r"Generated password \(shown only now\): (\S+)", first)
    assert len(passwords) == 1
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff and admin.check_password(passwords[0])
    assert not get_user_model().objects.filter(username="member").exists()
    before = _snapshot()

    second = _run()
    assert "Generated password" not in second and passwords[0] not in second
    assert "Superuser 'admin' exists; its password was not changed." in second
    assert "none added" in second
    assert _snapshot() == before


def test_it_builds_the_order_support_agents():
    _run()
    router = Agent.objects.get(name="order-router")
    assert router.model_key == "simulated:sim-careful"
    assert sorted(router.sub_agents.values_list("name", flat=True)) == ["order-cancellation", "order-lookup"]
    cancellation = Agent.objects.get(name="order-cancellation")
    assert [f["name"] for f in cancellation.functions] == [
        "lookup_order", "cancel_order", "util-email-handle_email_sender"
    ]
    assert [f["name"] for f in Agent.objects.get(name="order-lookup").functions] == ["lookup_order"]
    assert "{{ customer_email|default:'unknown' }}" in cancellation.instruction


def test_it_plays_demo_conversations_on_the_simulated_model():
    output = _run()
    admin = get_user_model().objects.get(username="admin")
    conversations = {c.title: c for c in Conversation.objects.all()}
    assert len(conversations) == 3
    assert all(c.tags == ["demo"] and c.owner == admin for c in conversations.values())
    assert "Created conversation" in output and "stopped early" not in output

    where = conversations["Where is order 1042?"]
    where_calls = list(where.messages.filter(role="tool_call").values_list("function_name", flat=True))
    assert where_calls == ["route_to_agent", "lookup_order"]
    assert "1042" in where.messages.filter(role="assistant").exclude(content="").last().content

    cancel = conversations["Cancel order 1043"]
    assert dict(cancel.state_changes.values_list("key", "value")) == {"order_id": "1043", "order_status": "cancelled"}
    # The confirmation really went through Django's email backend (locmem under tests).
    assert [(m.to, m.subject) for m in mail.outbox] == [(["ana@example.com"], "Order 1043 is now cancelled")]

    delivered = conversations["Cancel a delivered order"]
    delivered_calls = list(delivered.messages.filter(role="tool_call").values_list("function_name", flat=True))
    assert "cancel_order" not in delivered_calls, "the careful model does not cancel a delivered order"


def test_it_takes_passwords_from_the_environment_without_printing_them(monkeypatch):
    monkeypatch.setenv("AGENTTEST_ADMIN_PASSWORD", "admin-secret-from-env")
    monkeypatch.setenv("AGENTTEST_MEMBER_PASSWORD", "member-secret-from-env")
    output = _run()
    users = get_user_model().objects
    assert users.get(username="admin").check_password("admin-secret-from-env")
    member = users.get(username="member")
    assert member.check_password("member-secret-from-env") and not member.is_staff
    assert "secret-from-env" not in output and "Generated password" not in output

    monkeypatch.setenv("AGENTTEST_ADMIN_PASSWORD", "a-different-password")
    assert "User 'member' exists" in _run()
    assert users.get(username="admin").check_password("admin-secret-from-env"), "a re-run never resets a password"


def test_it_leaves_an_edited_demo_agent_alone():
    _run()
    Agent.objects.filter(name="order-lookup").update(temperature=0.7)
    assert "Agent 'order-lookup' exists; left unchanged." in _run()
    assert Agent.objects.get(name="order-lookup").temperature == 0.7
