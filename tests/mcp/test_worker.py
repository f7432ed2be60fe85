"""A test run on a real Celery worker whose process has the MCP server configured: the cases answer from mocks, and
no server process is started anywhere on the machine."""

from __future__ import annotations

import json
import sys

import pytest
from kombu import Connection

from agenthost.mcp import client
from agenthost.mcp.tools import refresh
from agenthost.models import Agent
from cases.models import Assertion, Case, Mock, Suite, Turn
from common.provider_config import load_providers
from runs.models import CaseResult, Run
from runs.services import run_trigger
from runs.tasks import execute_run
from tests.mcp.conftest import ORDER_SERVER
from tests.mcp.test_runs import server_processes
from tests.workers import REDIS_URL, flush_redis_queue, runs_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The model's side of "Please cancel order 1043": look the order up, cancel it, say so. The worker plays it from a file.
SCRIPT = {"answers": [
    {"tool_calls": [{"name": "orders__lookup_order", "arguments": {"order_id": "1043"}}]},
    {"tool_calls": [{"name": "orders__cancel_order", "arguments": {"order_id": "1043"}}]},
    {"text": "Order 1043 is now cancelled."},
]}


def test_it_runs_mcp_cases_on_a_worker_from_mocks_without_starting_a_server(
    tmp_path, settings, mcp_servers, markers, admin_user
):
    config = tmp_path / "mcp.toml"
    config.write_text(
        "[servers.orders]\n"
        f"command = {sys.executable!r}\n"
        f"args = [{str(ORDER_SERVER)!r}, 'stdio']\n"
        f"env = {{ MCP_MARKER_DIR = {str(markers.root)!r} }}\n"
    )
    assert refresh(["orders"]) == {}
    client.shutdown()
    markers.clear()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    providers = tmp_path / "providers.toml"
    providers.write_text(
        f'[providers.scripted]\nkind = "scripted"\nscript = "{script}"\n\n'
        '[[providers.scripted.models]]\nname = "scripted"\n'
    )
    settings.AGENTTEST_PROVIDERS = load_providers(str(providers))
    agent = Agent.objects.create(
        name="desk", instruction="Help with orders.", provider="scripted", model="scripted",
        functions=[{"mcp": "orders", "tools": ["lookup_order", "cancel_order"]}],
    )
    suite = Suite.objects.create(name="desk", agent=agent)
    case = Case.objects.create(suite=suite, name="cancel")
    turn = Turn.objects.create(case=case, user_message="Please cancel order 1043")
    Mock.objects.create(case=case, function_name="orders__lookup_order", result='{"status": "processing"}')
    Mock.objects.create(case=case, position=1, function_name="orders__cancel_order", result='{"cancelled": true}')
    Assertion.objects.create(case=case, turn=turn, type="toolCalled", params={"function": "orders__cancel_order"})
    broker = REDIS_URL
    flush_redis_queue(broker)
    settings.CELERY_BROKER_URL = broker

    def dispatch(run_id: int) -> None:
        with Connection(broker) as connection:
            execute_run.apply_async(args=[run_id], queue="runs", connection=connection, retry=False)

    log = tmp_path / "worker.log"
    with runs_worker(broker, log, AGENTTEST_MCP_FILE=str(config), AGENTTEST_PROVIDERS_FILE=str(providers)):
        run = run_trigger(suite=suite, model_keys=["scripted:scripted"], triggered_by=admin_user, dispatch=dispatch)
        wait_for(lambda: Run.objects.get(pk=run.pk).is_finished, what="the run to finish", log_path=log)
        assert server_processes(markers) == []

    result = CaseResult.objects.get(run=run)
    assert result.status == "passed", result.reason
    assert [(call["name"], call["outcome"]) for call in result.tool_calls] == [
        ("orders__lookup_order", "mocked"), ("orders__cancel_order", "mocked")
    ]
    assert markers.called() == [] and markers.started() == []
