"""The shop as every runtime's tests drive it, whatever framework the team's code is written in: the agent row naming
that code, the turn that looks an order up and emails the customer, a case of it run under test, a record then a
replay, and the requests the code sends through agenttest set beside those it sends on its own."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.seams import get_model
from cases.models import Suite
from runs.models import CaseResult, Run
from tests.runtimes.conftest import execute_suite, markers
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, TurnPlan, execute_case, suite_plan

EMAIL = {"to": "ana@example.com", "body": "Your order has shipped."}
QUESTION = "Where is order 1042? Email me."
# The ids a stub gives calls, responses and their output items, numbered across every request it answers.
_STUB_IDS = re.compile(r'"((?:call|\w+_resp_stub)_\d+(?:_\d+)?)"')


def shop_agent(runtime: str, entry: str, **fields: Any) -> Agent:
    """The agent `shop` running the team's code at `entry`, on the scripted model unless `fields` say otherwise."""
    return Agent.objects.create(
        name="shop", runtime=runtime, entry=entry, **{"provider": "scripted", "model": "scripted", **fields}
    )


def play_find_then_email(scripted_model: Any, *between: Answer) -> None:
    """The model's side of QUESTION: look the order up, (`between`), email the customer, say it is done."""
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
        *between,
        Answer(tool_calls=[Call("send_email", EMAIL)]),
        "Done: I emailed you.",
    )


def case_plan(
    agent: Agent, *, turns: list[TurnPlan], mocks: list[MockSpec] | None = None,
    assertions: list[AssertionPlan] | None = None, initial_state: dict[str, Any] | None = None,
) -> CasePlan:
    return CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state=initial_state or {},
        turns=turns, mocks=mocks or [], assertions=assertions or [],
    )


def find_order_mocked(agent: Agent) -> CasePlan:
    """QUESTION as a case: find_order mocked "lost" and asserted called; send_email left to be blocked."""
    return case_plan(
        agent, turns=[TurnPlan(QUESTION)], mocks=[MockSpec("find_order", '{"status": "lost"}')],
        assertions=[AssertionPlan("toolCalled", {"function": "find_order"})],
    )


def execute_on(scripted_model: Any, plan: CasePlan) -> Any:
    """`plan` run under test on the scripted model, in this process: nothing extra-allowed or force-blocked."""
    return execute_case(
        plan=plan, model=get_model(scripted_model.key),
        suite=suite_plan(),
    )


def assert_mocked_then_blocked(execution: Any, root: Path) -> None:
    """find_order_mocked's case as every runtime must end it: find_order answered by its mock, send_email blocked
    (nothing sent: no marker under `root`), the case failed naming the blocked tool."""
    assert markers(root) == []
    assert execution.status == "failed", execution.reason
    assert [(c["name"], c["outcome"]) for c in execution.tool_calls] == [
        ("find_order", "mocked"), ("send_email", "blocked")
    ]
    assert "send_email" in execution.reason


def record_then_replay(suite: Suite, stub: Any) -> tuple[CaseResult, CaseResult]:
    """The suite's case recorded on the stub, then replayed with the stub stopped: both passed, nothing sent again."""
    recorded = execute_suite(suite, Run.Mode.RECORD)
    assert recorded.status == "passed", recorded.reason
    sent = len(stub.requests)
    stub.stop()

    replayed = execute_suite(suite, Run.Mode.REPLAY)

    assert replayed.status == "passed", replayed.reason
    assert len(stub.requests) == sent == 2
    return recorded, replayed


def replayed_after_a_change(suite: Suite, entry: str) -> str:
    """The reason the suite's replay gives once its agent runs the code at `entry`: stale, at the first request."""
    Agent.objects.filter(pk=suite.agent_id).update(entry=entry)
    stale = execute_suite(suite, Run.Mode.REPLAY)
    assert stale.status == "error"
    assert stale.reason.startswith("stale recording: the request at turn 0 step 0 differs from the recording")
    return stale.reason


def without_stub_ids(requests: list[dict]) -> list[dict]:
    text = json.dumps(requests)
    for position, stub_id in enumerate(dict.fromkeys(_STUB_IDS.findall(text))):
        text = text.replace(f'"{stub_id}"', f'"id-{position}"')
    return json.loads(text)


def assert_sent_alike(through_agenttest: list[dict], on_its_own: list[dict]) -> None:
    """The requests the team's code sent through agenttest are, field for field, those it sent on its own (the ids
    the stub numbered aside)."""
    assert len(through_agenttest) == len(on_its_own) == 2
    for mine, theirs in zip(without_stub_ids(through_agenttest), without_stub_ids(on_its_own), strict=True):
        assert sorted(mine) == sorted(theirs)
        for field in theirs:
            assert mine[field] == theirs[field], field
