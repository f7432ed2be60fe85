"""The `python` runtime against a real OpenAI-compatible server (the local stub): record then replay with the server
gone, stale detection when the team's own code changes, the request equal field by field to the one the team's
function sends on its own, and the canary proving the tool routing live."""

from __future__ import annotations

import openai
import pytest

from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start
from agenttest.plugin import DirectTools, FunctionResult, Runtime, register_runtime, unregister_runtime
from cases.models import Suite
from runs.models import Run
from tests.runtimes.conftest import SHOP_BOT, execute_suite, markers, suite_finding_order
from tests.runtimes.shop import assert_sent_alike, record_then_replay, replayed_after_a_change

pytestmark = pytest.mark.django_db(transaction=True)

STUB = "stub:gpt-4o-mini"
QUESTION = "Where is order 1042?"


def _suite(package: str) -> Suite:
    return suite_finding_order(Agent.objects.create(
        name="shop", runtime="python", entry=f"{package}.bot:respond", provider="stub", model="gpt-4o-mini"
    ))


def test_it_records_the_teams_loop_and_replays_it_with_the_server_gone(stub, team_repo, tmp_path):
    suite = _suite(team_repo())

    recorded, replayed = record_then_replay(suite, stub)

    # The team's loop ran again step by step against the recorded answers: one model call per recorded step.
    assert [m["role"] for m in replayed.transcript] == [m["role"] for m in recorded.transcript]
    assert [c["outcome"] for c in replayed.tool_calls] == ["mocked"]
    assert markers(tmp_path) == []


def test_it_reports_the_replay_stale_naming_the_change_in_the_teams_code(stub, team_repo):
    suite = _suite(team_repo())
    assert execute_suite(suite, Run.Mode.RECORD).status == "passed"
    stub.stop()
    # The team edits its instruction (a changed module: an entry point is imported once per process).
    changed = team_repo(SHOP_BOT.replace("Look orders up before answering.", "Always answer in one sentence."))

    stale = replayed_after_a_change(suite, f"{changed}.bot:respond")

    assert "messages[0].content: recorded \"You are the shop's assistant. Look orders up" in stale


def test_it_sends_the_request_the_teams_function_sends_on_its_own(stub, team_repo):
    package = team_repo()
    agent = Agent.objects.create(
        name="shop", runtime="python", entry=f"{package}.bot:respond", provider="stub", model="gpt-4o-mini"
    )
    under_agenttest = conversation_send(conversation=conversation_start(agent=agent), text=QUESTION)
    through_agenttest = stub.requests

    module = __import__(f"{package}.bot", fromlist=["respond"])
    on_its_own = module.respond(
        [{"role": "user", "content": QUESTION}], openai.OpenAI(base_url=stub.base_url, api_key="unused"), DirectTools()
    )

    assert on_its_own == under_agenttest.output == 'Your order: {"order_id":"1042","status":"shipped"}'
    assert_sent_alike(through_agenttest, stub.requests[len(through_agenttest):])


class _UnroutedRuntime(Runtime):
    """A runtime whose tool routing is not in place (as with a framework version whose tool invocation it cannot
    wrap): it runs the team's function itself."""

    name = "unrouted-python"

    def run_turn(self, turn, target):
        return target(turn.messages(), None, DirectTools())

    def invoke(self, turn, target, name, arguments):
        return FunctionResult(content=DirectTools().call(lambda_named(name), arguments))


def lambda_named(name):
    def function(**_arguments):
        return "ran for real"

    function.__name__ = name
    return function


def test_it_errors_on_a_dead_canary_when_a_runtimes_tool_routing_is_not_in_place(stub, team_repo, tmp_path):
    suite = _suite(team_repo())
    register_runtime(_UnroutedRuntime())
    try:
        Agent.objects.filter(pk=suite.agent_id).update(runtime="unrouted-python")
        result = execute_suite(suite, Run.Mode.LIVE)
    finally:
        unregister_runtime("unrouted-python")

    assert result.status == "error"
    assert "the mock seam is not live: the canary function answered 'ran for real'" in result.reason
    assert stub.requests == [] and markers(tmp_path) == []


def test_it_passes_the_canary_through_the_python_runtimes_tools_helper(stub, team_repo):
    suite = _suite(team_repo())

    result = execute_suite(suite, Run.Mode.LIVE)

    assert result.status == "passed", result.reason
