"""Applying files and replaying contact no MCP server: `agenttest apply` (and --dry-run) checks agents' MCP
declarations against the cached listings, and `agenttest run DIR --mode replay` takes the listings kept with the
recordings — so a server that is unreachable, or whose secret is unset, breaks neither. Record mode lists the servers.
Real servers over stdio and HTTP; the run on a database that starts empty, as on a CI machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from agenthost.llm.scripted import Answer, Call
from agenthost.mcp import client
from agenthost.models import Agent, Conversation, McpToolList
from cases.files import files_export
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import Recording, Run
from runs.services import run_create, run_execute
from runs.tapes.files import recordings_export
from tests.mcp.conftest import order_server_spec
from tests.mcp.test_runs import server_processes

# What these tests answer hangs on MCP servers in processes of their own, not on the database
# engine: the PostgreSQL pass runs them, once.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.production_engine]

LOOKUP = "orders__lookup_order"
REMOTE = "remote__lookup_order"


@pytest.fixture
def team_repo(tmp_path, admin_client_api, scripted_model, http_order_server, markers, monkeypatch) -> Path:
    """A team's directory as `agenttest export` and a record run leave it: an agent declaring a stdio and an HTTP
    server's tools, a suite whose case mocks one of each, and its recording — then every server session stopped."""
    monkeypatch.setenv("MCP_TEST_TEAM", "support")
    response = admin_client_api.post("/api/agents/", {
        "name": "desk", "instruction": "You run the order desk.", "provider": "scripted", "model": "scripted",
        "functions": [{"mcp": "orders"}, {"mcp": "remote", "tools": ["lookup_order"]}],
    }, format="json")
    assert response.status_code == 201, response.data
    suite = Suite.objects.create(name="desk", agent=Agent.objects.get(name="desk"), case_timeout_seconds=30)
    case = Case.objects.create(suite=suite, name="looks up")
    Turn.objects.create(case=case, position=0, user_message="Where are orders 1 and 2?")
    Mock.objects.create(case=case, position=0, function_name=LOOKUP, result='{"status": "mocked"}')
    Mock.objects.create(case=case, position=1, function_name=REMOTE, result='{"status": "mocked too"}')
    Assertion.objects.create(case=case, position=0, type="toolCalled", params={"function": REMOTE})
    scripted_model.play(
        Answer(tool_calls=[Call(LOOKUP, {"order_id": "1"}), Call(REMOTE, {"order_id": "2"})]), "Both are mocked."
    )
    recorded = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key], mode=Run.Mode.RECORD).pk)
    assert recorded.status == "passed", recorded.reason
    repo = tmp_path / "repo"
    files_export(directory=repo)
    recordings_export(suite=suite, directory=repo / "recordings" / "desk")
    client.shutdown()
    markers.clear()
    return repo


def break_every_server(settings, mcp_servers, http_server, markers, monkeypatch, *, http_down: bool = True) -> None:
    """The HTTP server is down and its header's variable unset (or, `http_down=False`, up and answering, so that a
    contact would show in its markers); the stdio server's secret variable is unset."""
    if http_down:
        http_server.stop()
        monkeypatch.delenv("MCP_TEST_TEAM", raising=False)
    settings.AGENTTEST_MCP_SERVERS = {
        **settings.AGENTTEST_MCP_SERVERS,
        "orders": {**order_server_spec(markers), "env_from": {"ORDERS_TOKEN": "UNSET_ORDERS_TOKEN"}},
    }


def assert_no_server_contacted(markers) -> None:
    # The HTTP server, where it runs, is the test's own process: its markers say whether anything contacted it.
    assert markers.started() == [] and markers.listed() == [] and markers.called() == []
    assert [process for process in server_processes(markers) if " stdio" in process] == []
    assert not client.started()


def test_it_applies_files_and_dry_runs_them_without_starting_or_contacting_any_server(
    team_repo, settings, mcp_servers, http_server, markers, monkeypatch, capsys
):
    break_every_server(settings, mcp_servers, http_server, markers, monkeypatch, http_down=False)
    listed_before = dict(McpToolList.objects.values_list("server", "listed_at"))

    call_command("apply", str(team_repo), "--dry-run")
    call_command("apply", str(team_repo))

    assert "desk" in capsys.readouterr().out
    assert_no_server_contacted(markers)
    assert dict(McpToolList.objects.values_list("server", "listed_at")) == listed_before


def test_it_names_the_server_an_agent_file_declares_that_was_never_listed_instead_of_contacting_it(
    team_repo, settings, mcp_servers, http_server, markers, monkeypatch, capsys
):
    McpToolList.objects.filter(server="remote").delete()

    with pytest.raises(SystemExit) as refused:
        call_command("apply", str(team_repo))

    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "functions[1].mcp: the tools of 'remote' were never listed on this database" in err
    assert "agenttest mcp refresh remote" in err
    assert "suites/desk/suite.yaml: agent: the suite and its cases were not checked" in err
    assert "is not a function the agent" not in err
    assert_no_server_contacted(markers)


def wipe_database() -> None:
    """What a fresh CI machine has: nothing applied, nothing listed."""
    Recording.objects.all().delete()
    Run.objects.all().delete()
    Conversation.objects.all().delete()
    Suite.objects.all().delete()
    Agent.objects.all().delete()
    McpToolList.objects.all().delete()


def test_it_replays_a_directory_with_the_listings_kept_with_its_recordings_and_contacts_no_server(
    team_repo, settings, mcp_servers, http_server, markers, monkeypatch, capsys
):
    break_every_server(settings, mcp_servers, http_server, markers, monkeypatch)
    wipe_database()

    call_command("run", str(team_repo), "--mode", "replay")  # exit 0: no SystemExit

    out = capsys.readouterr().out
    assert "Passed" in out or "passed" in out
    run = Run.objects.get()
    assert run.status == "passed" and run.mode == "replay"
    assert set(run.agent_snapshot["mcp_tools"]) >= {LOOKUP, REMOTE}
    assert_no_server_contacted(markers)


def test_it_lists_the_servers_in_record_mode_and_keeps_the_listings_with_the_recordings(
    team_repo, scripted_model, settings, mcp_servers, http_server, markers, monkeypatch
):
    monkeypatch.setenv("MCP_TEST_TEAM", "support")
    wipe_database()
    (team_repo / "recordings").rename(team_repo.parent / "old-recordings")
    scripted_model.play(
        Answer(tool_calls=[Call(LOOKUP, {"order_id": "1"}), Call(REMOTE, {"order_id": "2"})]), "Both are mocked."
    )

    call_command("run", str(team_repo), "--mode", "record")

    assert len(markers.listed()) == 2 and markers.called() == []
    manifest = (team_repo / "recordings" / "desk" / "recordings.json").read_text()
    assert '"mcp_tools"' in manifest and '"remote"' in manifest and '"orders"' in manifest


def test_it_refuses_recorded_listings_that_give_two_tools_one_name_naming_the_file(
    team_repo, settings, mcp_servers, http_server, markers, monkeypatch, capsys
):
    break_every_server(settings, mcp_servers, http_server, markers, monkeypatch)
    wipe_database()
    manifest_path = team_repo / "recordings" / "desk" / "recordings.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["mcp_tools"]["orders"]["tools"] += [
        {"name": "peek.ticket", "annotations": {"readOnlyHint": True}},
        {"name": "peek_ticket", "annotations": {"destructiveHint": True}},
    ]
    manifest_path.write_text(json.dumps(manifest))

    with pytest.raises(SystemExit) as refused:
        call_command("run", str(team_repo), "--mode", "replay")

    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "recordings.json: mcp_tools.orders" in err and "orders__peek_ticket" in err
    assert not McpToolList.objects.filter(server="orders").exists()
    assert_no_server_contacted(markers)
