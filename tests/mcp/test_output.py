"""What MCP servers put in agenttest's output: a stdio server that dies at start is reported with the last lines of
its own stderr, and the SDK's chatter about HTTP sessions ("Received session ID", "GET stream disconnected,
reconnecting…") is not logged at all. Real servers."""

from __future__ import annotations

import logging
import sys

import pytest
from django.core.management import CommandError, call_command

from agenthost.mcp import client
from agenthost.models import McpToolList
from common.mcp_config import normalise

pytestmark = pytest.mark.django_db

DYING = (
    "import sys\n"
    "print('starting the ticket server', file=sys.stderr)\n"
    "print('error: TICKETS_DB is not set; cannot open the ticket database', file=sys.stderr)\n"
    "sys.exit(3)\n"
)


def test_it_reports_a_stdio_server_that_dies_at_start_with_its_own_stderr(settings):
    settings.AGENTTEST_MCP_SERVERS = {
        "tickets": normalise({"command": sys.executable, "args": ["-c", DYING], "connect_timeout": 20}),
    }
    try:
        with pytest.raises(CommandError) as refused:
            call_command("mcp", "refresh", "tickets")
    finally:
        client.shutdown()

    message = str(refused.value)
    assert "MCP server 'tickets' could not be started" in message
    assert "its stderr ended with: starting the ticket server | error: TICKETS_DB is not set" in message
    assert not McpToolList.objects.filter(server="tickets").exists()


def test_it_keeps_the_mcp_sdks_http_session_chatter_out_of_the_output(
    http_order_server, monkeypatch, caplog
):
    monkeypatch.setenv("MCP_TEST_TEAM", "support")
    caplog.set_level(logging.DEBUG, logger="agenthost")

    call_command("mcp", "refresh", "remote")

    assert McpToolList.objects.filter(server="remote").exists()
    sdk = [record.getMessage() for record in caplog.records if record.name.startswith("mcp")]
    assert not [message for message in sdk if "session ID" in message or "reconnecting" in message], sdk
    assert not logging.getLogger("mcp.client.streamable_http").isEnabledFor(logging.INFO)
