"""The MCP server file: stdio and streamable-HTTP servers with their timeouts; secrets only by environment-variable
name; every problem names the server and the field; agents' declarations of servers' tools are checked on save."""

from __future__ import annotations

import json
import string

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from hypothesis import given
from hypothesis import settings as settings_profile
from hypothesis import strategies as st

from agenthost.models import Agent, McpToolList
from common.mcp_config import load_mcp_servers, validate_mcp_servers
from tests.properties import SUPPRESSED_WITH_FIXTURES


def write(tmp_path, text, name="mcp.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_it_reads_stdio_and_http_servers_with_their_timeouts(tmp_path):
    servers = load_mcp_servers(write(tmp_path, """
[servers.time]
command = "python"
args = ["-m", "mcp_server_time"]
env = { TZ = "UTC" }
env_from = { TOKEN = "TIME_TOKEN" }
cwd = "/tmp"
call_timeout = 3

[servers.search]
transport = "http"
url = "http://127.0.0.1:9/mcp"
headers_from = { Authorization = "SEARCH_AUTH" }
connect_timeout = 2.5
"""))
    assert servers["time"] == {
        "transport": "stdio", "connect_timeout": 30.0, "call_timeout": 3.0, "command": "python",
        "args": ["-m", "mcp_server_time"], "env": {"TZ": "UTC"}, "env_from": {"TOKEN": "TIME_TOKEN"}, "cwd": "/tmp",
    }
    assert servers["search"] == {
        "transport": "http", "connect_timeout": 2.5, "call_timeout": 30.0, "url": "http://127.0.0.1:9/mcp",
        "headers_from": {"Authorization": "SEARCH_AUTH"},
    }


def test_it_reads_the_same_servers_from_json(tmp_path):
    path = write(tmp_path, json.dumps({"servers": {"time": {"command": "python"}}}), "mcp.json")
    assert load_mcp_servers(path)["time"]["command"] == "python"
    assert load_mcp_servers("") == {}


@pytest.mark.parametrize(("text", "message"), [
    ('[servers.a]\ntransport = "sse"\ncommand = "x"', "server 'a': field 'transport' must be one of stdio, http"),
    ('[servers.a]\nargs = ["x"]', "server 'a': field 'command' must name the program"),
    ('[servers.a]\ncommand = "x"\ncall_timeout = 0', "server 'a': field 'call_timeout' must be a number of seconds"),
    ('[servers.a]\ncommand = "x"\nurl = "http://h"', "server 'a': unknown field 'url' for transport 'stdio'"),
    ('[servers.a]\ntransport = "http"\nurl = "ftp://h"', "server 'a': field 'url' must be an http:// or https://"),
    ('[servers.a]\ntransport = "http"\nurl = "http://h"\nheaders_from = { Authorization = "Bearer abc" }',
     "server 'a': headers_from.Authorization must be the NAME of an environment variable"),
    # A line end after a name: a pattern anchored with `$` took it.
    ('[servers.a]\ncommand = "x"\nenv_from = { TOKEN = "TIME_TOKEN\\n" }',
     "server 'a': env_from.TOKEN must be the NAME of an environment variable"),
    ('[servers.a]\ncommand = "x"\nenv = { "TZ\\n" = "UTC" }', "server 'a': env: 'TZ\\n' is not a valid name"),
    ('[servers.a]\ntransport = "http"\nurl = "http://h"\nheaders = { Authorization = "Bearer abc" }',
     "server 'a': unknown field 'headers'"),
    ('[servers.a__b]\ncommand = "x"', "server 'a__b': the name must be"),
    ('[providers.a]\nkind = "x"', "unknown top-level key 'providers'"),
    ('servers = 3', "the servers must be a table"),
    ("[servers.a\n", "not valid TOML"),
])
def test_it_refuses_a_bad_file_naming_server_and_field(tmp_path, text, message):
    with pytest.raises(ImproperlyConfigured) as refused:
        load_mcp_servers(write(tmp_path, text))
    assert message in str(refused.value)
    assert "Bearer abc" not in str(refused.value)


def test_it_names_a_missing_file():
    with pytest.raises(ImproperlyConfigured, match="does not exist"):
        load_mcp_servers("/nonexistent/mcp.toml")


@given(st.text(alphabet=string.ascii_letters + string.digits + "_-. :/", min_size=1, max_size=40))
def test_it_accepts_only_server_names_that_cannot_break_the_tool_prefix(name):
    problems = validate_mcp_servers({name: {"command": "x"}})
    acceptable = (name[0].isalnum() and "__" not in name and all(c.isalnum() or c in "_-" for c in name)
                  and len(name) <= 30)
    assert (problems == []) == acceptable


# --- Agents declaring servers' tools ------------------------------------------------------------------------------


def post_agent(admin_client_api, functions):
    # Any configured model will do (the scripted_model fixture configures it): only the declarations are checked.
    return admin_client_api.post("/api/agents/", {
        "name": "desk", "instruction": "x", "provider": "scripted", "model": "scripted", "functions": functions,
    }, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize(("functions", "message"), [
    ([{"mcp": "nowhere"}], "functions[0].mcp: 'nowhere' is not a configured MCP server; configured: orders, time"),
    ([{"mcp": "orders", "tools": ["lookup_order", "refund"]}],
     "functions[0].tools[1]: 'orders' lists no tool 'refund'; it lists: lookup_order, cancel_order"),
    ([{"mcp": "orders", "tools": []}], "functions[0].tools: must be a non-empty list of distinct tool names"),
    ([{"mcp": "orders", "only": ["x"]}], "functions[0].only: unknown field 'only'"),
    ([{"mcp": "orders"}, {"mcp": "orders"}], "functions[1].mcp: the server 'orders' is declared twice"),
    ([{"mcp": "orders", "tools": ["lookup_order"]}, {"name": "orders__lookup_order"}],
     "'orders__lookup_order' is declared twice"),
    ([{"name": "send", "mcp": {"server": "orders", "tool": "cancel_order", "annotations": {"readOnlyHint": True}}}],
     "functions[0].mcp: must name a configured MCP server; a tool's annotations come from its server's listing"),
])
def test_it_refuses_a_bad_mcp_declaration_with_400_naming_the_field(
    admin_client_api, scripted_model, mcp_servers, functions, message
):
    response = post_agent(admin_client_api, functions)
    assert response.status_code == 400
    assert message in " ".join(response.data["functions"])
    assert not Agent.objects.exists()


@pytest.mark.django_db
def test_it_refuses_a_server_that_cannot_be_listed_and_was_never_cached(
    admin_client_api, scripted_model, settings, mcp_servers
):
    settings.AGENTTEST_MCP_SERVERS = {**mcp_servers, "gone": {**mcp_servers["orders"], "command": "/nonexistent/x",
                                                              "connect_timeout": 5.0}}
    response = post_agent(admin_client_api, [{"mcp": "gone"}])
    assert response.status_code == 400
    assert "functions[0].mcp: the tools of 'gone' could not be listed: MCP server 'gone' could not be started" in \
        " ".join(response.data["functions"])


@pytest.mark.django_db
def test_it_keeps_the_cached_tools_when_a_server_is_down_at_save(
    admin_client_api, scripted_model, settings, mcp_servers
):
    assert post_agent(admin_client_api, [{"mcp": "orders", "tools": ["lookup_order"]}]).status_code == 201
    settings.AGENTTEST_MCP_SERVERS = {**mcp_servers, "orders": {**mcp_servers["orders"], "command": "/nonexistent"}}
    agent = Agent.objects.get()
    response = admin_client_api.patch(f"/api/agents/{agent.pk}/", {"functions": [{"mcp": "orders"}]}, format="json")
    assert response.status_code == 200, response.data
    assert "lookup_order" in json.dumps(McpToolList.objects.get(server="orders").tools)


@pytest.mark.django_db
def test_it_refreshes_and_lists_the_cache_from_the_command(mcp_servers, capsys):
    call_command("mcp", "list")
    assert "orders: never listed (run 'agenttest mcp refresh orders')" in capsys.readouterr().out
    call_command("mcp", "refresh")
    out = capsys.readouterr().out
    assert "orders: 6 tool(s) listed" in out and "time: 2 tool(s) listed" in out
    call_command("mcp", "list", "orders")
    listing = capsys.readouterr().out
    assert "orders__lookup_order  [read-only]  Look an order up by its number." in listing
    assert "orders__cancel_order  [side-effecting]" in listing and "orders__add_note  [side-effecting]" in listing
    with pytest.raises(CommandError, match="SERVER: nowhere is not a configured MCP server"):
        call_command("mcp", "refresh", "nowhere")


def test_it_reports_a_bad_server_set_in_code_in_the_system_check(settings):
    from django.core.checks import run_checks

    settings.AGENTTEST_MCP_SERVERS = {"orders": {"transport": "stdio", "command": ""}}
    errors = [error for error in run_checks() if error.id == "agenttest.E010"]
    assert [error.msg for error in errors] == [
        "MCP servers: server 'orders': field 'command' must name the program that starts the server"
    ]


@pytest.mark.django_db
def test_it_lets_a_rule_call_a_declared_mcp_tool_and_refuses_an_undeclared_one(
    admin_client_api, scripted_model, mcp_servers
):
    def post(rule_function):
        return admin_client_api.post("/api/agents/", {
            "name": f"desk-{rule_function}", "instruction": "x", "provider": "scripted", "model": "scripted",
            "functions": [{"mcp": "orders", "tools": ["lookup_order"]}],
            "rules": [{"trigger": "conversation_started", "function": rule_function, "arguments": {"order_id": "1"}}],
        }, format="json")

    assert post("orders__lookup_order").status_code == 201
    refused = post("orders__cancel_order")
    assert refused.status_code == 400
    assert "rules[0].function: 'orders__cancel_order' is not a function this agent can call" in " ".join(
        refused.data["rules"]
    )


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_ENTRY = st.fixed_dictionaries({"mcp": st.one_of(st.sampled_from(["orders", "time", "nowhere"]), _JSON)},
                               optional={"tools": _JSON, "name": _JSON, "extra": _JSON})


@pytest.fixture
def mcp_cache(settings, db):
    """Configured servers that cannot start (refreshing fails at once), with listings already cached."""
    from django.utils import timezone

    from common.mcp_config import normalise

    settings.AGENTTEST_MCP_SERVERS = {
        name: normalise({"command": "/nonexistent/mcp-server", "connect_timeout": 5}) for name in ("orders", "time")
    }
    tool = {"name": "lookup_order", "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": True}}
    McpToolList.objects.create(server="orders", tools=[tool], listed_at=timezone.now())


@pytest.mark.django_db
@settings_profile(suppress_health_check=SUPPRESSED_WITH_FIXTURES, deadline=None, max_examples=60)
@given(functions=st.lists(_ENTRY, max_size=3), rule_function=st.sampled_from(["orders__lookup_order", "x"]))
def test_it_answers_any_mcp_declaration_with_201_or_a_400_naming_functions(
    admin_client_api, scripted_model, mcp_cache, functions, rule_function
):
    response = admin_client_api.post("/api/agents/", {
        "name": "fuzzed", "instruction": "x", "provider": "scripted", "model": "scripted",
        "functions": functions, "rules": [{"trigger": "conversation_started", "function": rule_function}],
    }, format="json")
    assert response.status_code in (201, 400), response.content
    if response.status_code == 400:
        assert set(response.data) <= {"functions", "rules"}
    Agent.objects.filter(name="fuzzed").delete()
