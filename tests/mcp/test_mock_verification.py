"""`agenttest mocks verify` against a real MCP server (issue 36): a read-only tool is called on its mock's arguments
and its changed answer is drift; a destructive tool is never called."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from agenthost.mcp import client
from agenthost.models import Agent
from cases.models import MockVerification, Suite
from cases.services import case_create

pytestmark = pytest.mark.django_db

LOOKUP, CANCEL = "orders__lookup_order", "orders__cancel_order"


@pytest.fixture
def suite(admin_client_api, scripted_model, mcp_servers, markers) -> Suite:
    response = admin_client_api.post("/api/agents/", {
        "name": "desk", "instruction": "You run the order desk.", "provider": "scripted", "model": "scripted",
        "functions": [{"mcp": "orders"}],
    }, format="json")
    assert response.status_code == 201, response.data
    client.shutdown()
    markers.clear()
    suite = Suite.objects.create(name="Desk", agent=Agent.objects.get(name="desk"))
    case_create(suite=suite, document={
        "name": "Cancel 1042",
        "turns": [{"user_message": "Cancel order 1042", "assertions": [
            {"type": "toolCalled", "params": {"function": CANCEL}}]}],
        "mocks": [
            {"function_name": LOOKUP, "arguments": {"order_id": "1042"},
             "result": json.dumps({"order_id": "1042", "status": "shipped"})},
            {"function_name": CANCEL, "arguments": {"order_id": "1042"}, "result": "cancelled"},
        ],
    })
    return suite


def verify() -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("mocks", "verify", stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def test_it_verifies_a_read_only_mcp_tool_against_its_server_and_never_calls_a_destructive_one(suite, markers):
    code, out, err = verify()

    assert code == 0, err
    assert f"equal: suite 'Desk', case 'Cancel 1042', mocks[0] ({LOOKUP})" in out
    assert f"unverifiable: suite 'Desk', case 'Cancel 1042', mocks[1] ({CANCEL})" in out
    assert [json.loads(path.read_text()) for path in markers.called("lookup_order")] == [{"order_id": "1042"}]
    assert markers.called("cancel_order") == []


def test_it_reports_drift_when_the_mcp_servers_answer_changes(suite, markers):
    markers.list(status="delivered")

    code, _, err = verify()

    assert code == 1
    assert f"drifted: suite 'Desk', case 'Cancel 1042', mocks[0] ({LOOKUP})" in err
    assert "status: 'shipped' in the mock, 'delivered' from the tool" in err
    assert MockVerification.objects.get(function_name=LOOKUP).diff == [
        {"path": "status", "change": "value", "mock": "shipped", "real": "delivered"}
    ]
    assert markers.called("cancel_order") == []
