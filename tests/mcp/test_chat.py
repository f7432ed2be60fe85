"""Outside tests an MCP tool runs for real: chat over stdio, over streamable HTTP and on the PyPI reference server;
a hang, a crash and an is_error answer each give the model a clear tool error and the turn goes on."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.mcp import client
from agenthost.models import Agent, McpToolList
from tests.mcp.conftest import order_server_spec
from tests.workers import WAIT_SECONDS

# What these tests answer hangs on MCP servers in processes of their own, not on the database
# engine: the PostgreSQL pass runs them, once.
pytestmark = [pytest.mark.django_db, pytest.mark.production_engine]


def create_agent(admin_client_api, functions, name="desk"):
    response = admin_client_api.post("/api/agents/", {
        "name": name, "instruction": "You run the order desk.", "provider": "scripted", "model": "scripted",
        "functions": functions,
    }, format="json")
    assert response.status_code == 201, response.data
    return Agent.objects.get(name=name)


def chat(client_api, agent, text):
    started = client_api.post("/api/conversations/", {"agent": agent.name}, format="json")
    assert started.status_code == 201, started.data
    return client_api.post(f"/api/conversations/{started.data['id']}/messages/", {"text": text}, format="json")


def test_it_executes_a_real_mcp_tool_in_chat_over_stdio(admin_client_api, scripted_model, mcp_servers, markers):
    agent = create_agent(admin_client_api, [{"mcp": "orders"}])
    scripted_model.play(Answer(tool_calls=[Call("orders__lookup_order", {"order_id": "1042"})]), "It has shipped.")

    reply = chat(admin_client_api, agent, "Where is order 1042?")

    assert reply.status_code == 200, reply.data
    [call] = reply.data["tool_calls"]
    assert call["outcome"] == "executed" and json.loads(call["result"]) == {"order_id": "1042", "status": "shipped"}
    assert [json.loads(path.read_text()) for path in markers.called("lookup_order")] == [{"order_id": "1042"}]
    assert reply.data["output"] == "It has shipped."
    # The model was offered the server's own description and schema under the prefixed name.
    offered = {tool["function"]["name"]: tool["function"] for tool in scripted_model.requests[0].tools}
    assert offered["orders__lookup_order"]["description"] == "Look an order up by its number."
    assert offered["orders__lookup_order"]["parameters"]["properties"]["order_id"]["description"] == "The order number"
    assert {"orders__cancel_order", "orders__add_note", "orders__crash"} <= set(offered)


def test_it_executes_a_real_mcp_tool_over_streamable_http_with_headers_from_the_environment(
    admin_client_api, scripted_model, http_order_server, markers, monkeypatch
):
    monkeypatch.setenv("MCP_TEST_TEAM", "support")
    agent = create_agent(admin_client_api, [{"mcp": "remote", "tools": ["lookup_order"]}])
    scripted_model.play(Answer(tool_calls=[Call("remote__lookup_order", {"order_id": "7"})]), "Shipped.")

    reply = chat(admin_client_api, agent, "Where is order 7?")

    assert reply.status_code == 200, reply.data
    assert json.loads(reply.data["tool_calls"][0]["result"])["status"] == "shipped"
    assert len(markers.called("lookup_order")) == 1
    # Only the named subset is offered.
    assert [tool["function"]["name"] for tool in scripted_model.requests[0].tools] == ["remote__lookup_order"]


def test_it_names_the_missing_header_variable_instead_of_connecting(
    admin_client_api, scripted_model, http_order_server, monkeypatch
):
    monkeypatch.delenv("MCP_TEST_TEAM", raising=False)
    response = admin_client_api.post("/api/agents/", {
        "name": "desk", "instruction": "x", "provider": "scripted", "model": "scripted",
        "functions": [{"mcp": "remote"}],
    }, format="json")
    assert response.status_code == 400
    assert "headers_from.X-Team names the environment variable MCP_TEST_TEAM" in str(response.data["functions"])


def test_it_runs_the_reference_time_server_from_pypi(admin_client_api, scripted_model, mcp_servers):
    agent = create_agent(admin_client_api, [{"mcp": "time", "tools": ["get_current_time"]}])
    scripted_model.play(Answer(tool_calls=[Call("time__get_current_time", {"timezone": "Europe/Paris"})]), "Done.")

    reply = chat(admin_client_api, agent, "What time is it in Paris?")

    assert reply.status_code == 200, reply.data
    result = json.loads(reply.data["tool_calls"][0]["result"])
    assert result["timezone"] == "Europe/Paris" and "datetime" in result
    assert not reply.data["tool_calls"][0]["error"]


def test_it_gives_the_model_a_clear_error_for_a_hung_call_within_the_timeout(
    admin_client_api, scripted_model, settings, mcp_servers, markers
):
    settings.AGENTTEST_MCP_SERVERS = {**mcp_servers, "orders": order_server_spec(markers, call_timeout=1.0)}
    agent = create_agent(admin_client_api, [{"mcp": "orders"}])
    scripted_model.play(Answer(tool_calls=[Call("orders__slow_lookup", {"seconds": 30})]), "The system is slow.")

    began = time.monotonic()
    reply = chat(admin_client_api, agent, "Look it up")
    elapsed = time.monotonic() - began

    assert reply.status_code == 200, reply.data
    [call] = reply.data["tool_calls"]
    assert call["error"] and "did not answer slow_lookup within 1 s" in call["result"]
    assert call["result"].startswith("orders__slow_lookup failed: MCP server 'orders'")
    # The turn went on: the model read the error and answered.
    assert reply.data["output"] == "The system is slow."
    assert "did not answer" in scripted_model.requests[1].messages[-1]["content"]
    assert elapsed < 30, "the turn went on without waiting for the tool's 30 s"


def test_it_restarts_a_crashed_server_on_next_use(admin_client_api, scripted_model, mcp_servers, markers):
    agent = create_agent(admin_client_api, [{"mcp": "orders"}])
    scripted_model.play(
        Answer(tool_calls=[Call("orders__crash", {})]), "It broke.",
        Answer(tool_calls=[Call("orders__lookup_order", {"order_id": "9"})]), "Shipped.",
    )

    crashed = chat(admin_client_api, agent, "crash it")
    assert crashed.status_code == 200, crashed.data
    assert crashed.data["tool_calls"][0]["error"]
    assert "stopped during the call (it will be restarted on next use)" in crashed.data["tool_calls"][0]["result"]
    assert crashed.data["output"] == "It broke."

    again = chat(admin_client_api, agent, "Where is order 9?")
    assert again.status_code == 200, again.data
    assert json.loads(again.data["tool_calls"][0]["result"])["order_id"] == "9"
    assert len(markers.started()) == 2  # a new process answered


def test_it_restarts_a_server_that_died_between_calls(admin_client_api, scripted_model, mcp_servers, markers):
    agent = create_agent(admin_client_api, [{"mcp": "orders"}])
    scripted_model.play(Answer(tool_calls=[Call("orders__lookup_order", {"order_id": "1"})]), "ok")
    assert chat(admin_client_api, agent, "one").status_code == 200
    [first] = markers.started()
    os.kill(int(first.name.split("-")[1]), signal.SIGKILL)
    deadline = time.monotonic() + WAIT_SECONDS
    while client.supervisor().running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.supervisor().running() == []  # the supervisor noticed

    scripted_model.play(Answer(tool_calls=[Call("orders__lookup_order", {"order_id": "2"})]), "ok")
    reply = chat(admin_client_api, agent, "two")
    assert not reply.data["tool_calls"][0]["error"], reply.data
    assert len(markers.started()) == 2


def test_it_passes_a_servers_is_error_answer_to_the_model_as_a_tool_error(
    admin_client_api, scripted_model, mcp_servers
):
    agent = create_agent(admin_client_api, [{"mcp": "orders"}])
    scripted_model.play(Answer(tool_calls=[Call("orders__refuse", {"order_id": "5"})]), "Sorry, it is locked.")

    reply = chat(admin_client_api, agent, "cancel 5")

    [call] = reply.data["tool_calls"]
    assert call["error"] and "order 5 is locked" in call["result"]
    assert reply.data["output"] == "Sorry, it is locked."


def test_it_refuses_arguments_that_do_not_fit_the_servers_schema_without_calling_it(
    admin_client_api, scripted_model, mcp_servers, markers
):
    agent = create_agent(admin_client_api, [{"mcp": "orders"}])
    scripted_model.play(Answer(tool_calls=[Call("orders__lookup_order", {"order": 5})]), "Let me retry.")

    reply = chat(admin_client_api, agent, "look")

    [call] = reply.data["tool_calls"]
    assert call["outcome"] == "invalid" and "order_id" in call["result"]
    assert markers.called() == []


def test_it_refreshes_the_cached_tools_when_a_chat_starts(admin_client_api, scripted_model, settings, mcp_servers,
                                                          markers):
    agent = create_agent(admin_client_api, [{"mcp": "orders"}])
    before = McpToolList.objects.get(server="orders")
    assert "include_items" not in json.dumps(before.tools)
    client.shutdown()
    settings.AGENTTEST_MCP_SERVERS = {**mcp_servers, "orders": order_server_spec(markers, variant="2")}

    scripted_model.play("Hello.")
    assert chat(admin_client_api, agent, "hi").status_code == 200

    assert "include_items" in json.dumps(McpToolList.objects.get(server="orders").tools)
    offered = {tool["function"]["name"]: tool["function"] for tool in scripted_model.requests[0].tools}
    assert "include_items" in offered["orders__lookup_order"]["parameters"]["properties"]


def test_it_reconnects_to_an_http_server_that_restarted(
    admin_client_api, scripted_model, http_server, http_order_server, monkeypatch
):
    monkeypatch.setenv("MCP_TEST_TEAM", "support")
    agent = create_agent(admin_client_api, [{"mcp": "remote", "tools": ["lookup_order"]}])
    scripted_model.play(Answer(tool_calls=[Call("remote__lookup_order", {"order_id": "1"})]), "ok")
    assert not chat(admin_client_api, agent, "one").data["tool_calls"][0]["error"]

    http_server.stop()
    scripted_model.play(Answer(tool_calls=[Call("remote__lookup_order", {"order_id": "2"})]), "down")
    down = chat(admin_client_api, agent, "two")
    assert down.status_code == 200 and down.data["tool_calls"][0]["error"]
    assert down.data["tool_calls"][0]["result"].startswith("remote__lookup_order failed: MCP server 'remote'")
    assert down.data["output"] == "down"

    http_server.start()  # a new process that never saw the old session
    scripted_model.play(Answer(tool_calls=[Call("remote__lookup_order", {"order_id": "3"})]), "back")
    back = chat(admin_client_api, agent, "three")
    assert not back.data["tool_calls"][0]["error"], (back.data, http_server.said())
    assert json.loads(back.data["tool_calls"][0]["result"])["order_id"] == "3"
