"""`manage.py demo_setup`: users, the order-support agents, the sample conversations, the demo suite and its first
run, idempotently."""

from __future__ import annotations

import io
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import call_command

from agenthost.models import Agent, Conversation, Message, StateChange
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db

BASE_DIR = Path(__file__).resolve().parents[2]


def _run() -> str:
    out = io.StringIO()
    # The queued run is checked in a process of its own below: here nothing may publish to the default broker.
    call_command("demo_setup", "--no-run", stdout=out)
    return out.getvalue()


def _fresh_deployment(var_dir: Path, **settings: str) -> Callable[..., str]:
    """manage(*args) → the output of `manage.py` in a deployment of its own on the embedded default (a SQLite file
    and the file broker in `var_dir`), the demo on, with `settings` on top; a failing command fails the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "DATABASE_URL", "AGENTTEST_"))}
    env.update(
        AGENTTEST_DEBUG="1", AGENTTEST_DEMO="1", AGENTTEST_VAR_DIR=str(var_dir),
        AGENTTEST_ADMIN_PASSWORD="demo-password-1", **settings,
    )

    def manage(*args: str) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True,
            timeout=WAIT_SECONDS,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    return manage


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
        "lookup_order",
        "cancel_order",
        "util-email-handle_email_sender",
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


def test_it_adds_the_demo_suites_with_every_assertion_type_and_a_blocked_tool():
    from cases.models import Assertion, Suite

    _run()
    suite = Suite.objects.get(name="Order support demo")
    assert suite.agent.name == "order-router" and suite.judge_model == "simulated:sim-careful"
    assert suite.cases.filter(enabled=True).count() == suite.cases.count() >= 8
    # The demo's two suites use every assertion type between them (goalReached needs a simulated user).
    demo = ("Order support demo", "Simulated users demo")
    used = set(Assertion.objects.filter(case__suite__name__in=demo).values_list("type", flat=True))
    # nodesVisited needs a langgraph agent's graph (tests/runtimes/test_langgraph_runtime.py) and snapshotMatches a
    # process agent's program (tests/runtimes/test_process_acp.py); the demo's are native.
    assert used == set(Assertion.Type.values) - {"nodesVisited", "snapshotMatches"}
    blocked = suite.cases.get(name="An unmocked email is blocked, never sent")
    assert not blocked.mocks.filter(function_name="util-email-handle_email_sender").exists()
    _run()
    assert Suite.objects.filter(name="Order support demo").count() == 1


# The demo's own set-up on the embedded default (a SQLite file of its own, the file broker): once is enough.
@pytest.mark.embedded_default
def test_it_queues_the_first_run_of_the_demo_suite_once(tmp_path):
    manage = _fresh_deployment(tmp_path)
    manage("migrate", "--noinput")
    first = manage("demo_setup")
    assert "Queued run #1 of 'Order support demo' on simulated:sim-careful, simulated:sim-hasty" in first
    second = manage("demo_setup")
    assert "Queued run" not in second
    with sqlite3.connect(tmp_path / "agenttest.sqlite3") as db:
        assert db.execute("select status, model_keys, total from runs_run").fetchall() == [
            ("pending", '["simulated:sim-careful", "simulated:sim-hasty"]', 18)
        ]
    with sqlite3.connect(tmp_path / "broker.sqlite3") as broker:
        assert broker.execute("select count(*) from kombu_message").fetchone() == (1,)


# A host-only deployment (no harness apps, so no `apply`): the demo's agents, read from their files, and its
# conversations; no suite.
@pytest.mark.embedded_default
def test_it_sets_up_the_agents_and_conversations_of_a_deployment_without_the_harness(tmp_path):
    manage = _fresh_deployment(tmp_path, AGENTTEST_HARNESS_APPS="")
    manage("migrate", "--noinput")
    first = manage("demo_setup")
    for name in ("order-cancellation", "order-lookup", "order-router"):
        assert f"Created agent {name!r} (simulated:sim-careful)." in first
    assert first.count("Created conversation #") == 3 and "stopped early" not in first
    assert "suite" not in first.lower() and "Queued run" not in first
    second = manage("demo_setup")
    assert "Agent 'order-router' exists; left unchanged." in second and "Created" not in second


@pytest.mark.django_db(transaction=True)
def test_it_runs_the_demo_suite_from_the_cli_with_the_right_exit_code_and_junit(tmp_path, capsys):
    import xml.etree.ElementTree as ET

    _run()
    junit = tmp_path / "demo.xml"
    with pytest.raises(SystemExit) as exited:
        call_command(
            "run_suite",
            "Order support demo",
            "--models",
            "simulated:sim-careful,simulated:sim-hasty",
            "--inline",
            "--junit",
            str(junit),
        )
    assert exited.value.code == 1, "some demo cases fail (sim-hasty loses an order; one email is blocked), none error"
    output = capsys.readouterr().out
    assert "simulated:sim-careful" in output and "simulated:sim-hasty" in output and "pass rate" in output
    root = ET.parse(junit).getroot()
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    careful = suites["Order support demo on simulated:sim-careful"]
    hasty = suites["Order support demo on simulated:sim-hasty"]
    assert (careful.get("tests"), careful.get("failures"), careful.get("errors")) == ("9", "1", "0")
    assert (hasty.get("tests"), hasty.get("failures"), hasty.get("errors")) == ("9", "3", "0")
    blocked = [
        case for case in careful.iter("testcase") if case.get("name") == "An unmocked email is blocked, never sent"
    ]
    assert "util-email-handle_email_sender" in blocked[0].find("failure").get("message")


@pytest.mark.parametrize(
    "backend", ["django.core.mail.backends.console.EmailBackend", "django.core.mail.backends.smtp.EmailBackend"]
)
def test_it_holds_the_demo_conversations_emails_instead_of_printing_or_sending_them(settings, capsys, backend):
    # What scripts/demo configures (console, DEBUG on), and a production SMTP server that must not get demo mail.
    settings.EMAIL_BACKEND = backend
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9

    output = _run()

    printed = capsys.readouterr().out
    assert "Content-Type:" not in printed + output and "Kind regards" not in printed + output
    assert (
        "  The demo's email to ana@example.com ('Order 1043 is now cancelled') was held in memory, not sent."
        in output
    )
    cancel = Conversation.objects.get(title="Cancel order 1043")
    results = cancel.messages.filter(role="tool_result", function_name="util-email-handle_email_sender")
    assert results.get().content.startswith('{"sent": true'), "the demo's email tool answered as usual"
