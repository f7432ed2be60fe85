"""Under test an MCP tool is mocked or blocked exactly like every other tool: no server is started or contacted, the
tools come from the cached listing, only read-only tools may be extra-allowed, and a changed tools/list makes a
replay stale naming the tool. A recorded chat's real MCP results become the draft's mocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from agenthost.llm.scripted import Answer, Call
from agenthost.mcp import client
from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start
from cases.models import Assertion, Case, Mock, Suite, Turn
from recording.services import recording_create
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.mcp.conftest import Markers, order_server_spec

pytestmark = pytest.mark.django_db(transaction=True)

LOOKUP = "orders__lookup_order"


def server_processes(markers: Markers) -> list[str]:
    """Every process on this machine running this test's order server (the process list, not our own bookkeeping):
    its environment names the test's marker directory. Another test running beside this one (the PostgreSQL and
    SQLite passes run side by side) may have servers of its own."""
    found = []
    wanted = f"MCP_MARKER_DIR={markers.root}".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            text = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environment = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if "order_server.py" in text and wanted in environment:
            found.append(text)
    return found


@pytest.fixture
def agent(admin_client_api, scripted_model, mcp_servers, markers) -> Agent:
    """An agent declaring every tool of `orders`, saved through the API (which lists the server's tools); then the
    session is stopped and the markers cleared, so whatever a test sees next is its own doing."""
    response = admin_client_api.post("/api/agents/", {
        "name": "desk", "instruction": "You run the order desk.", "provider": "scripted", "model": "scripted",
        "functions": [{"mcp": "orders"}],
    }, format="json")
    assert response.status_code == 201, response.data
    client.shutdown()
    markers.clear()
    assert server_processes(markers) == []
    return Agent.objects.get(name="desk")


def make_case(suite: Suite, name: str, text: str, *, mocks=(), called: str = "") -> Case:
    case = Case.objects.create(suite=suite, name=name)
    Turn.objects.create(case=case, position=0, user_message=text)
    for position, (function, result) in enumerate(mocks):
        Mock.objects.create(case=case, position=position, function_name=function, result=result)
    if called:
        Assertion.objects.create(case=case, position=0, type="toolCalled", params={"function": called})
    return case


def execute(suite: Suite, key: str, mode: str = Run.Mode.LIVE) -> Run:
    return run_execute(run_id=run_create(suite=suite, model_keys=[key], mode=mode).pk)


def test_it_answers_mcp_calls_from_mocks_without_starting_or_contacting_any_server(agent, scripted_model, markers):
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=30)
    make_case(suite, "looks up", "Where is order 1042?", mocks=[(LOOKUP, '{"status": "mocked"}')], called=LOOKUP)
    scripted_model.play(Answer(tool_calls=[Call(LOOKUP, {"order_id": "1042"})]), "It is mocked.")

    run = execute(suite, scripted_model.key)

    result = CaseResult.objects.get(run=run)
    assert result.status == "passed", result.reason
    assert [(call["name"], call["outcome"], call["result"]) for call in result.tool_calls] == [
        (LOOKUP, "mocked", '{"status": "mocked"}')
    ]
    assert markers.called() == [] and markers.started() == []
    assert server_processes(markers) == [] and not client.started()
    # The model was offered the tools as cached when the agent was saved.
    assert LOOKUP in [tool["function"]["name"] for tool in scripted_model.requests[0].tools]


def test_it_blocks_an_unmocked_mcp_call_and_names_it(agent, scripted_model, markers):
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=30)
    make_case(suite, "cancels", "Cancel order 1042", called="orders__cancel_order")
    scripted_model.play(Answer(tool_calls=[Call("orders__cancel_order", {"order_id": "1042"})]), "Cancelled.")

    run = execute(suite, scripted_model.key)

    result = CaseResult.objects.get(run=run)
    assert result.status == "failed"
    assert "orders__cancel_order has no mock, so it was blocked" in result.reason
    assert result.tool_calls[0]["outcome"] == "blocked"
    assert markers.called() == [] and markers.started() == [] and server_processes(markers) == []


def test_it_lets_only_read_only_mcp_tools_be_extra_allowed(admin_client_api, agent):
    def create(allowed):
        return admin_client_api.post("/api/suites/", {
            "name": f"desk-{len(allowed)}-{allowed[0]}", "agent": agent.name, "extra_allowed_functions": allowed,
        }, format="json")

    destructive = create(["orders__cancel_order"])
    assert destructive.status_code == 400
    assert "orders__cancel_order is an MCP tool its server does not annotate read-only" in json.dumps(
        destructive.data
    )
    unannotated = create([LOOKUP, "orders__add_note"])
    assert unannotated.status_code == 400 and "orders__add_note" in json.dumps(unannotated.data)
    assert LOOKUP not in json.dumps(unannotated.data)
    assert create([LOOKUP]).status_code == 201


def test_it_lets_an_extra_allowed_read_only_mcp_tool_reach_its_server(agent, scripted_model, markers):
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=30, extra_allowed_functions=[LOOKUP])
    make_case(suite, "looks up for real", "Where is order 3?", called=LOOKUP)
    scripted_model.play(Answer(tool_calls=[Call(LOOKUP, {"order_id": "3"})]), "Shipped.")

    result = CaseResult.objects.get(run=execute(suite, scripted_model.key))

    assert result.status == "passed", result.reason
    assert result.tool_calls[0]["outcome"] == "allowed"
    assert json.loads(result.tool_calls[0]["result"])["status"] == "shipped"
    assert len(markers.called("lookup_order")) == 1


def test_it_reports_a_stale_recording_naming_the_mcp_tool_whose_schema_changed(
    agent, scripted_model, settings, mcp_servers, markers, admin_client
):
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=30)
    make_case(suite, "looks up", "Where is order 1042?", mocks=[(LOOKUP, '{"status": "mocked"}')], called=LOOKUP)
    scripted_model.play(Answer(tool_calls=[Call(LOOKUP, {"order_id": "1042"})]), "It is mocked.")
    recorded = execute(suite, scripted_model.key, Run.Mode.RECORD)
    assert CaseResult.objects.get(run=recorded).status == "passed"
    schema = recorded.agent_snapshot["mcp_tools"][LOOKUP]
    assert schema["server"] == "orders" and schema["tool"] == "lookup_order"
    assert set(schema["parameters"]["properties"]) == {"order_id"}
    assert schema["annotations"] == {"readOnlyHint": True}

    # The server's tools/list changes; the cache is refreshed by the explicit command (never by the run).
    settings.AGENTTEST_MCP_SERVERS = {**mcp_servers, "orders": order_server_spec(markers, variant="2")}
    call_command("mcp", "refresh", "orders")
    markers.clear()
    replayed = execute(suite, scripted_model.key, Run.Mode.REPLAY)

    result = CaseResult.objects.get(run=replayed)
    assert result.status == "error"
    assert "stale recording" in result.reason
    assert f"Tools changed since the recording: {LOOKUP} (changed)" in result.reason
    assert set(replayed.agent_snapshot["mcp_tools"][LOOKUP]["parameters"]["properties"]) == {
        "order_id", "include_items"
    }
    assert markers.started() == [] and server_processes(markers) == []

    # The run compared with the recording run names the MCP tool whose schema changed.
    page = admin_client.get(f"/runs/{replayed.pk}/compare/?baseline={recorded.pk}").content.decode()
    tools_line = page.split('data-difference="tools"', 1)[1].split("</li>", 1)[0]
    assert f"<code>{LOOKUP}</code>" in tools_line


def test_it_makes_mocks_from_the_real_results_of_a_recorded_conversation(agent, scripted_model, markers):
    scripted_model.play(Answer(tool_calls=[Call(LOOKUP, {"order_id": "1042"})]), "It has shipped.")
    conversation = conversation_start(agent=agent)
    conversation_send(conversation=conversation, text="Where is order 1042?")
    assert len(markers.called("lookup_order")) == 1

    drafts = recording_create(conversation=conversation)

    [case] = drafts.cases
    [mock] = case.mocks.all()
    assert mock.function_name == LOOKUP
    assert json.loads(mock.result) == {"order_id": "1042", "status": "shipped"}
    # The draft replays its source green from that mock, with no server started.
    client.shutdown()
    markers.clear()
    Case.objects.filter(pk=case.pk).update(enabled=True)
    scripted_model.play(Answer(tool_calls=[Call(LOOKUP, {"order_id": "1042"})]), "It has shipped.")
    result = CaseResult.objects.get(run=execute(drafts.suite, scripted_model.key))
    assert result.status == "passed", result.reason
    assert result.tool_calls[0]["outcome"] == "mocked"
    assert markers.started() == [] and server_processes(markers) == []
