"""The team's loop lives inside the case: its model calls are cut at the case's deadline, and the usage of the calls
that answered is counted — for each runtime."""

from __future__ import annotations

import threading

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.runtimes.entry import load_entry
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.runtimes.conftest import SHOP_BOT
from tests.runtimes.test_langgraph_runtime import SHOP_GRAPH
from tests.runtimes.test_openai_agents_runtime import SHOP_AGENTS

pytestmark = pytest.mark.django_db(transaction=True)

# How long the model holds its late answer when nothing releases it: only if the case waited for it.
GATE_SECONDS = 120
# The case's timeout: long enough for the loop's first call and its tool on a loaded machine (at 2 s a loaded run
# ended the case before the second call was sent, issue 40); the second call is held until the run has ended.
CASE_TIMEOUT = 10


@pytest.mark.parametrize(("runtime", "source", "attribute"), [
    ("python", SHOP_BOT, "respond"), ("openai-agents", SHOP_AGENTS, "triage"), ("langgraph", SHOP_GRAPH, "graph"),
])
def test_it_ends_the_teams_loop_at_the_case_deadline_with_the_usage_of_the_calls_that_answered(
    openai_stub, settings, team_repo, runtime, source, attribute
):
    # The late answer comes only once the run has ended (or, if the case waited for it, after GATE_SECONDS): whether
    # the case waited is what the model saw, not how long the run took.
    run_ended, answered = threading.Event(), threading.Event()

    def answer(body: dict) -> Answer | str:
        if body["messages"][-1]["role"] == "tool":
            run_ended.wait(GATE_SECONDS)
            answered.set()
            return "too late"
        return Answer(tool_calls=[Call("find_order", {"order_id": "1042"})])

    openai_stub.respond_with(answer)
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": {
        "kind": "openai", "base_url": openai_stub.base_url, "api_key_env": "", "timeout": 60.0, "max_retries": 0,
        "models": [{"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.6, "label": ""}],
    }}
    package = team_repo(source)
    agent = Agent.objects.create(name="shop", runtime=runtime, entry=f"{package}.bot:{attribute}", provider="stub",
                                 model="gpt-4o-mini")
    # Imported before the run: the case's seconds are the loop's, not a framework's first import (LangChain's is long).
    load_entry(agent.entry)
    suite = Suite.objects.create(name="shop", agent=agent, case_timeout_seconds=CASE_TIMEOUT)
    case = Case.objects.create(suite=suite, name="slow model")
    Turn.objects.create(case=case, position=0, user_message="Where is order 1042?")
    Mock.objects.create(case=case, position=0, function_name="find_order", result='{"status": "in transit"}')
    Assertion.objects.create(case=case, position=0, type="toolCalled", params={"function": "find_order"})

    try:
        run = run_execute(run_id=run_create(suite=suite, model_keys=["stub:gpt-4o-mini"], mode=Run.Mode.LIVE).pk)
        assert not answered.is_set(), "the case waited for the model's late answer"
    finally:
        run_ended.set()

    result = CaseResult.objects.get(run=run)
    assert (result.status, result.reason) == ("error", f"the case timed out after {CASE_TIMEOUT} s")
    # The first call answered (the tool call) and is counted; the cut one is not.
    assert result.input_tokens > 0 and result.output_tokens > 0
    assert len(openai_stub.requests) == 2
