"""A runtime loads what its first turn needs while the run sets up, before any case's clock starts
(`Runtime.prepare`): on one loaded core the first case of an ACP agent's run paid five times its twin's time in
imports (the ACP library, the MCP gateway's server, the model SDK) and timed out at 60 s where its twin took 6."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from agenthost.llm.scripted import Answer
from agenthost.models import Agent
from agenttest.plugin import FunctionResult, Runtime, register_runtime, unregister_runtime
from cases.models import Assertion, Case, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 30


def _not_under_test(context: object) -> FunctionResult:
    return FunctionResult(content="ran outside the seam")


class _Preparing(Runtime):
    """Asks its model once per turn; says when it was prepared, and for which agent."""

    name = "preparing"
    imports_entry = False

    def __init__(self) -> None:
        self.prepared: list[tuple[str, float]] = []

    def target(self, loaded):
        return loaded.name

    def prepare(self, loaded) -> None:
        self.prepared.append((loaded.name, time.monotonic()))

    def run_turn(self, turn, target):
        return str(turn.complete(messages=turn.messages()).text)

    def invoke(self, turn, target, name, arguments):
        return turn.call_tool(name=name, arguments=arguments, implementation=_not_under_test)


@pytest.fixture
def preparing():
    runtime = _Preparing()
    register_runtime(runtime)
    yield runtime
    unregister_runtime(runtime.name)


def _suite(agent: Agent, cases: int) -> Suite:
    suite = Suite.objects.create(name="prepared", agent=agent, case_timeout_seconds=TIMEOUT)
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"answers {index}")
        Turn.objects.create(case=case, position=0, user_message="Where is order 1042?")
        Assertion.objects.create(case=case, position=0, type="outputContains", params={"text": "shipped"})
    return suite


def test_it_prepares_the_agents_runtime_once_before_the_first_cases_clock_starts(preparing, scripted_model):
    agent = Agent.objects.create(name="shop", runtime="preparing", command="unused",
                                 provider=scripted_model.provider_name, model=scripted_model.model)
    scripted_model.play(Answer("It has shipped."), Answer("It has shipped."))

    run = run_execute(run_id=run_create(suite=_suite(agent, cases=2), model_keys=[scripted_model.key]).pk)

    assert run.status == Run.Status.PASSED, list(CaseResult.objects.filter(run=run).values_list("reason", flat=True))
    assert [name for name, _ in preparing.prepared] == ["shop"]
    # Every model request of a case carries its deadline: the case's clock started TIMEOUT seconds before it.
    first_case_started = min(request.deadline for request in scripted_model.requests) - TIMEOUT
    assert preparing.prepared[0][1] < first_case_started


def test_it_runs_the_cases_when_a_runtimes_prepare_fails(preparing, scripted_model, monkeypatch):
    # (The turn meets the same failure and its case says so: a prepare is only a head start.)
    def broken(loaded) -> None:
        raise ModuleNotFoundError("No module named 'acp'")

    monkeypatch.setattr(preparing, "prepare", broken)
    agent = Agent.objects.create(name="shop", runtime="preparing", command="unused",
                                 provider=scripted_model.provider_name, model=scripted_model.model)
    scripted_model.play(Answer("It has shipped."))

    run = run_execute(run_id=run_create(suite=_suite(agent, cases=1), model_keys=[scripted_model.key]).pk)

    assert run.status == Run.Status.PASSED


@pytest.mark.parametrize(("protocol", "functions", "loaded"), [
    ("acp", ["find_order"], ["acp", "agenthost.runtimes.acp", "agenthost.runtimes.mcp_gateway"]),
    ("acp", [], ["acp", "agenthost.runtimes.acp"]),
    ("jsonl", ["find_order"], ["agenthost.runtimes.mcp_gateway"]),
])
def test_it_loads_a_process_agents_protocol_and_tool_gateway_when_prepared(protocol, functions, loaded):
    # A fresh interpreter: this one has loaded them all long ago.
    program = f"""
import json, sys
import django
django.setup()
from agenthost.loading import LoadedAgent
from agenthost.runtimes.base import get_runtime
watched = {json.dumps(["acp", "agenthost.runtimes.acp", "agenthost.runtimes.mcp_gateway"])}
before = [name for name in watched if name in sys.modules]
get_runtime("process").prepare(LoadedAgent(
    id=1, name="a", description="", instruction="", provider="p", model="m", temperature=None,
    functions=[{{"name": name, "description": "", "parameters": {{}}}} for name in {json.dumps(functions)}], rules=[],
    runtime="process", command="agent", protocol={protocol!r}))
print(json.dumps({{"before": before, "after": [name for name in watched if name in sys.modules]}}))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=WAIT_SECONDS,
                          check=False,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "agenttest.settings", "AGENTTEST_DEBUG": "1"})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    assert seen["before"] == []
    assert seen["after"] == loaded
