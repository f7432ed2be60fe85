"""The cached tools/list is not trusted at the moment of a real call under test: before an extra-allowed MCP tool runs,
its server is listed live (once per run) and a tool whose annotations changed is blocked and its case Errors; a
suite whose extra-allowed tool is no longer read-only on its server runs its cases one at a time. A refresh whose
listing gives two tools one function name is refused, the old listing kept. Real servers, over stdio and HTTP."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.core.management import CommandError, call_command

from agenthost.llm.scripted import Answer, Call
from agenthost.mcp import client
from agenthost.models import Agent, McpToolList
from agenthost.testing.openai_stub import OpenAIStub, echo_reply
from cases.models import Assertion, Case, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.workers import WAIT_SECONDS

# What these tests answer hangs on MCP servers in processes of their own, not on the database
# engine: the PostgreSQL pass runs them, once.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.production_engine]

LOOKUP = "orders__lookup_order"
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True}


def save_agent(client_api, functions, *, name="desk", provider="scripted", model="scripted") -> Agent:
    response = client_api.post("/api/agents/", {
        "name": name, "instruction": "You run the order desk.", "provider": provider, "model": model,
        "functions": functions,
    }, format="json")
    assert response.status_code == 201, response.data
    return Agent.objects.get(name=name)


def calling_case(suite: Suite, name: str, function: str) -> Case:
    case = Case.objects.create(suite=suite, name=name)
    Turn.objects.create(case=case, position=0, user_message="Where is order 3?")
    Turn.objects.create(case=case, position=1, user_message="And order 4?")
    Assertion.objects.create(case=case, position=0, type="toolCalled", params={"function": function})
    return case


def run_suite(suite: Suite, key: str) -> Run:
    return run_execute(run_id=run_create(suite=suite, model_keys=[key]).pk)


def test_it_blocks_an_extra_allowed_tool_its_stdio_server_now_marks_destructive_and_errors_the_case(
    admin_client_api, scripted_model, mcp_servers, markers
):
    agent = save_agent(admin_client_api, [{"mcp": "orders"}])
    assert McpToolList.objects.get(server="orders").tools[0]["annotations"] == {"readOnlyHint": True}
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=30, extra_allowed_functions=[LOOKUP])
    calling_case(suite, "looks up", LOOKUP)
    # The running server re-marks the tool after the cache was written; nothing refreshes the cache.
    markers.list(annotations={"lookup_order": DESTRUCTIVE})
    scripted_model.play(Answer(tool_calls=[Call(LOOKUP, {"order_id": "3"})]), "Shipped.")

    run = run_suite(suite, scripted_model.key)

    result = CaseResult.objects.get(run=run)
    assert markers.called("lookup_order") == []
    assert result.status == "error"
    assert LOOKUP in result.reason
    assert "readOnlyHint true → false, destructiveHint → true" in result.reason
    assert "agenttest mcp refresh orders" in result.reason
    [call] = result.tool_calls
    assert call["outcome"] == "blocked" and call["blocked_because"] == "live-listing"
    # The case stopped there: its second turn never reached the model.
    assert len(scripted_model.requests) == 1
    assert run.status == "error"


def test_it_blocks_a_stale_extra_allowed_tool_over_http_too(
    admin_client_api, scripted_model, http_order_server, markers, monkeypatch
):
    monkeypatch.setenv("MCP_TEST_TEAM", "support")
    agent = save_agent(admin_client_api, [{"mcp": "remote", "tools": ["lookup_order"]}])
    suite = Suite.objects.create(
        name="desk", agent=agent, case_timeout_seconds=30, extra_allowed_functions=["remote__lookup_order"]
    )
    calling_case(suite, "looks up", "remote__lookup_order")
    markers.list(annotations={"lookup_order": None})
    scripted_model.play(Answer(tool_calls=[Call("remote__lookup_order", {"order_id": "3"})]), "Shipped.")

    result = CaseResult.objects.get(run=run_suite(suite, scripted_model.key))

    assert markers.called("lookup_order") == []
    assert result.status == "error"
    assert "remote__lookup_order was blocked" in result.reason
    assert "readOnlyHint true → (removed)" in result.reason


def test_it_lets_an_unchanged_extra_allowed_tool_run_and_lists_its_server_once_per_run(
    admin_client_api, scripted_model, mcp_servers, markers
):
    agent = save_agent(admin_client_api, [{"mcp": "orders"}])
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=30, extra_allowed_functions=[LOOKUP])
    for index in range(2):
        calling_case(suite, f"looks up {index}", LOOKUP)
    scripted_model.play(
        *[item for _ in range(2) for item in (
            Answer(tool_calls=[Call(LOOKUP, {"order_id": "3"})]), "Shipped.",
            Answer(tool_calls=[Call(LOOKUP, {"order_id": "4"})]), "Shipped too.",
        )]
    )
    markers.clear()

    run = run_suite(suite, scripted_model.key)

    assert run.status == "passed", [r.reason for r in CaseResult.objects.filter(run=run)]
    assert len(markers.called("lookup_order")) == 4
    assert len(markers.listed()) == 1


def test_it_fails_closed_when_the_server_cannot_be_listed_before_the_call(
    admin_client_api, scripted_model, settings, mcp_servers, markers
):
    agent = save_agent(admin_client_api, [{"mcp": "orders"}])
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=30, extra_allowed_functions=[LOOKUP])
    calling_case(suite, "looks up", LOOKUP)
    client.shutdown()
    settings.AGENTTEST_MCP_SERVERS = {
        **mcp_servers, "orders": {**mcp_servers["orders"], "env_from": {"ORDERS_TOKEN": "UNSET_ORDERS_TOKEN"}},
    }
    scripted_model.play(Answer(tool_calls=[Call(LOOKUP, {"order_id": "3"})]), "Shipped.")

    result = CaseResult.objects.get(run=run_suite(suite, scripted_model.key))

    assert result.status == "error"
    assert f"{LOOKUP} could not be checked against its server" in result.reason
    assert "UNSET_ORDERS_TOKEN" in result.reason
    assert markers.called() == []


class Latency:
    """The stub's echo rules after a fixed latency, counting the model calls in flight at once (the most seen)."""

    def __init__(self, stub: OpenAIStub) -> None:
        self.in_flight = self.most = 0
        self._lock = threading.Lock()
        stub.respond_with(self.reply)

    def reply(self, body: dict):
        with self._lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            time.sleep(0.1)
            return echo_reply(body)
        finally:
            with self._lock:
                self.in_flight -= 1


@pytest.mark.parametrize("live_annotations, side_by_side", [(None, True), (DESTRUCTIVE, False)])
def test_it_runs_cases_side_by_side_only_while_the_live_server_still_marks_the_allowed_tool_read_only(
    admin_client_api, settings, mcp_servers, markers, live_annotations, side_by_side
):
    with OpenAIStub() as stub:
        settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": {
            "kind": "openai", "base_url": stub.base_url, "api_key_env": "", "timeout": WAIT_SECONDS, "max_retries": 0,
            "models": [{"name": "gpt-4o-mini", "input_price": 0, "output_price": 0, "label": ""}],
        }}
        server = Latency(stub)
        agent = save_agent(admin_client_api, [{"mcp": "orders"}], provider="stub", model="gpt-4o-mini")
        suite = Suite.objects.create(
            name="desk", agent=agent, case_timeout_seconds=30, extra_allowed_functions=[LOOKUP], case_concurrency=4
        )
        for index in range(4):
            case = Case.objects.create(suite=suite, name=f"says hello {index}")
            Turn.objects.create(case=case, position=0, user_message=f"hello {index}")
            Assertion.objects.create(case=case, type="outputContains", params={"text": f"hello {index}"})
        if live_annotations is not None:
            markers.list(annotations={"lookup_order": live_annotations})

        run = run_suite(suite, "stub:gpt-4o-mini")

    assert run.status == "passed"
    assert (server.most > 1) is side_by_side
    assert markers.called() == []


def clashing_listing(markers) -> None:
    markers.list(extra=[
        {"name": "peek.ticket", "annotations": {"readOnlyHint": True}},
        {"name": "peek_ticket", "annotations": {"destructiveHint": True}},
    ])


def test_it_refuses_a_refresh_whose_listing_gives_two_tools_one_name_and_keeps_the_old_listing(
    admin_client_api, mcp_servers, markers, capsys
):
    markers.list(extra=[{"name": "peek.ticket", "annotations": {"readOnlyHint": True}}])
    call_command("mcp", "refresh", "orders")
    before = McpToolList.objects.get(server="orders")
    clashing_listing(markers)

    with pytest.raises(CommandError) as refused:
        call_command("mcp", "refresh", "orders")

    message = str(refused.value)
    assert "'peek.ticket' and 'peek_ticket'" in message and "orders__peek_ticket" in message
    assert "kept" in message
    after = McpToolList.objects.get(server="orders")
    assert after.tools == before.tools and after.listed_at == before.listed_at
    capsys.readouterr()
    call_command("mcp", "list", "orders")
    listed = capsys.readouterr().out
    assert listed.count("orders__peek_ticket") == 1 and "[read-only]" in listed


def test_it_refuses_an_agent_save_while_its_server_lists_a_clash(admin_client_api, mcp_servers, markers):
    clashing_listing(markers)
    response = admin_client_api.post("/api/agents/", {
        "name": "desk", "instruction": "x", "provider": "scripted", "model": "scripted",
        "functions": [{"mcp": "orders"}],
    }, format="json")
    assert response.status_code == 400
    assert "orders__peek_ticket" in json.dumps(response.data["functions"])
    assert not Agent.objects.filter(name="desk").exists()


def test_it_offers_neither_tool_of_a_clash_cached_before_clashes_were_refused(
    admin_client_api, scripted_model, mcp_servers, markers, capsys
):
    agent = save_agent(admin_client_api, [{"mcp": "orders"}])
    row = McpToolList.objects.get(server="orders")
    # As an older agenttest cached it.
    row.tools = [*row.tools, {"name": "peek.ticket", "annotations": {"readOnlyHint": True}},
                 {"name": "peek_ticket", "annotations": {"destructiveHint": True}}]
    row.save()
    client.shutdown()
    markers.clear()
    suite = Suite.objects.create(name="desk", agent=agent, case_timeout_seconds=30)
    case = Case.objects.create(suite=suite, name="hello")
    Turn.objects.create(case=case, position=0, user_message="hi")
    Assertion.objects.create(case=case, type="outputContains", params={"text": "Hello"})
    scripted_model.play("Hello.")

    run_suite(suite, scripted_model.key)

    offered = [tool["function"]["name"] for tool in scripted_model.requests[0].tools]
    assert len(offered) == len(set(offered))
    assert "orders__peek_ticket" not in offered and LOOKUP in offered
    call_command("mcp", "list", "orders")
    listed = capsys.readouterr().out
    assert listed.count("orders__peek_ticket") == 1 and "name clash" in listed
