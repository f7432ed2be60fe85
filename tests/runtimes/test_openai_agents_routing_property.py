"""A team's Agents SDK code composed from random parts — tools on the entry agent, static hand-offs, hand-offs appended
at run time to clones, agents exposed as tools nested two deep — run under test with random mocks: no tool of the
team's runs for real (zero side effects in marker files and at the listener), and every call of one is answered by
its mock or blocked, by the agent that made it (issue 33, item 2)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult
from runs.services import run_create, run_execute
from tests.runtimes.conftest import markers
from tests.runtimes.test_openai_agents_routing import EFFECTS

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = ("tool", "handoff", "appended", "as_tool")


@dataclass
class Part:
    """An agent of the team's code: its side-effecting tool (or none) and the agents it reaches, each by a kind."""

    tool: bool
    children: list[tuple[str, Part]] = field(default_factory=list)


def parts(depth: int = 0) -> st.SearchStrategy[Part]:
    if depth >= 2:
        return st.builds(Part, tool=st.just(True))
    return st.builds(
        Part, tool=st.booleans(),
        children=st.lists(st.tuples(st.sampled_from(KINDS[1:]), st.deferred(lambda: parts(depth + 1))), max_size=2),
    )


def source(root: Part) -> tuple[str, list[str], list[str]]:
    """The team's module for `root`, the names of its side-effecting tools, and of its agents exposed as tools."""
    lines = [EFFECTS, "from agents import Agent, function_tool", ""]
    effect_tools: list[str] = []
    agent_tools: list[str] = []
    counter = iter(range(100))

    def agent(part: Part) -> str:
        number = next(counter)
        name = f"a{number}"
        tools, handoffs, appended = [], [], []
        if part.tool:
            tool = f"act_{number}"
            effect_tools.append(tool)
            lines.extend([
                "@function_tool",
                f"def {tool}(what: str) -> str:",
                '    """Act on the outside world."""',
                f'    happen("{tool}", detail=what)',
                '    return "acted for real"',
                "",
            ])
            tools.append(tool)
        for kind, child in part.children:
            inner = agent(child)
            if kind == "handoff":
                handoffs.append(inner)
            elif kind == "appended":
                appended.append(inner)
            else:
                tool = f"ask_{inner}"
                agent_tools.append(tool)
                tools.append(f'{inner}.as_tool(tool_name="{tool}", tool_description="Ask {inner}.")')
        lines.extend([
            f"def {name}_instructions(context, agent) -> str:",
            *[f'    if not any(getattr(h, "name", "") == "{inner}_clone" for h in agent.handoffs):\n'
              f'        agent.handoffs.append({inner}.clone(name="{inner}_clone"))' for inner in appended],
            f'    return "You are {name}."',
            "",
            f'{name} = Agent(name="{name}", instructions={name}_instructions, tools=[{", ".join(tools)}],'
            f' handoffs=[{", ".join(handoffs)}])',
            "",
        ])
        return name

    entry = agent(root)
    lines.append(f"entry = {entry}")
    return "\n".join(lines), effect_tools, agent_tools


def _called(request: ModelRequest) -> set[str]:
    return {call["function"]["name"] for message in request.messages if message["role"] == "assistant"
            for call in message.get("tool_calls") or []}


def _every_tool_once(request: ModelRequest) -> Answer | str:
    """The model: calls each tool it is offered once, last offered first — hand-offs and agents as tools before the
    agent's own tool, so that the run reaches the deepest agents before a blocked call stops it — then says it is
    done."""
    called = _called(request)
    for tool in reversed(request.tools):
        name = tool["function"]["name"]
        if name not in called:
            properties = tool["function"].get("parameters", {}).get("properties", {})
            return Answer(tool_calls=[Call(name, {key: "go" for key in properties})])
    return "done"


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(root=parts(), mask=st.lists(st.booleans(), max_size=8))
# The reproductions among them: a hand-off appended at run time to a clone with an unmocked tool, and an
# agent exposed as a tool whose inner agent is itself exposed as a tool, its tool mocked.
@example(root=Part(tool=False, children=[("appended", Part(tool=True))]), mask=[])
@example(root=Part(tool=False, children=[("as_tool", Part(tool=False, children=[("as_tool", Part(tool=True))]))]),
         mask=[True])
def test_it_runs_no_tool_of_any_agent_in_the_run_for_real_under_test(
    root, mask, scripted_model, team_repo, tmp_path, listener
):
    module, effect_tools, agent_tools = source(root)
    # Which of the side-effecting tools the case mocks; the others are unmocked (blocked when called).
    mocked = [tool for tool, is_mocked in zip(effect_tools, mask, strict=False) if is_mocked]
    package = team_repo(module)
    agent = Agent.objects.create(
        name=f"team-{uuid.uuid4().hex[:8]}", runtime="openai-agents", entry=f"{package}.bot:entry",
        provider="scripted", model="scripted", outside_effects=dict.fromkeys(agent_tools, False),
    )
    suite = Suite.objects.create(name=agent.name, agent=agent, extra_allowed_functions=agent_tools)
    case = Case.objects.create(suite=suite, name="acts")
    Turn.objects.create(case=case, position=0, user_message="Go.")
    for position, name in enumerate(mocked):
        Mock.objects.create(case=case, position=position, function_name=name, result="acted (mock)")
    Assertion.objects.create(case=case, position=0, type="outputContains", params={"text": "done"})
    scripted_model.respond_with(_every_tool_once)

    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key]).pk)
    result = CaseResult.objects.get(run=run)

    assert markers(tmp_path) == [] and listener.received == []
    answered = [(row["function"], row["agent"], row["outcome"]) for row in result.transcript
                if row["role"] == "tool_result" and row["function"] in effect_tools]
    for name, by, outcome in answered:
        assert outcome == ("mocked" if name in mocked else "blocked"), (name, outcome, module)
        # Each call is its own agent's (a clone's hand-off keeps the clone's name).
        assert by.split("_clone")[0] == f"a{name.split('_')[1]}", (name, by)
    if any(outcome == "blocked" for *_, outcome in answered):
        assert result.status in ("failed", "error"), result.reason
