"""A team's pydantic-ai code composed from random parts — tools registered on the agent or in a toolset built per run,
sync or async, reading `deps`; tools delegating to other agents (nested two deep, `run` or `run_stream`) with the
run's deps and usage; tool
bodies with side effects, with their own openai client (sync and async, chat completions and the Responses API),
opening sockets by hand — run under test with random mocks and allow-lists: zero side effects at the listener and in
marker files, zero model requests bypassing the model layer, and every case that would have caused one an Error or a
Failed naming it (issue 33, Done when)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agenthost.models import Agent
from agenthost.seams import get_model
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.runtimes.conftest import markers
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, TurnPlan, execute_case, suite_plan
from tests.runtimes.sealed_parts import (
    HELPERS,
    MOCKED,
    bodies,
    body_call,
    case_choice,
    check_case,
    choices,
    effect_free,
    every_tool_once,
)

pytestmark = pytest.mark.django_db(transaction=True)

DEPS = '''
from dataclasses import dataclass

from pydantic_ai import Agent, RunContext
from pydantic_ai.toolsets import FunctionToolset


@dataclass
class Deps:
    customer_id: str


def make_deps(state):
    return Deps(customer_id=state.get("customer_id", "anonymous"))


def checked(ctx):
    # A tool written the docs' way reads its deps: without them it fails, and the case would say so.
    if ctx.deps.customer_id != "C-7":
        raise RuntimeError(f"no deps: {ctx.deps!r}")
'''


@dataclass
class Tool:
    body: str
    via: str  # "decorator" (@agent.tool) or "toolset" (a toolset the agent builds per run)
    is_async: bool
    choice: str


@dataclass
class Part:
    """An agent of the team's code: its tools, and the agents its tools delegate to."""

    tools: list[Tool]
    delegates: list[Part] = field(default_factory=list)
    # How a tool delegating to this agent runs it: `run` or `run_stream`.
    streamed: bool = False


def tool_parts() -> st.SearchStrategy[Tool]:
    return st.builds(Tool, body=bodies(), via=st.sampled_from(("decorator", "toolset")), is_async=st.booleans(),
                     choice=choices())


def parts(depth: int = 0) -> st.SearchStrategy[Part]:
    tools = st.lists(tool_parts(), max_size=2)
    if depth >= 2:
        return st.builds(Part, tools=tools, streamed=st.booleans())
    return st.builds(Part, tools=tools, delegates=st.lists(st.deferred(lambda: parts(depth + 1)), max_size=2),
                     streamed=st.booleans())


def source(root: Part) -> tuple[str, dict[str, tuple[str, str]]]:
    """The team's module for `root`, and its tools: name → (body, what the case does with it)."""
    lines = [HELPERS, DEPS]
    tools: dict[str, tuple[str, str]] = {}
    counter = iter(range(100))

    def agent(part: Part) -> str:
        name = f"a{next(counter)}"
        inner = [(agent(child), child.streamed) for child in part.delegates]
        lines.append(f'{name} = Agent("openai:gpt-4o-mini", defer_model_check=True, deps_type=Deps, name="{name}",'
                     f' instructions="You are {name}.")')
        per_run: list[str] = []
        for number, tool in enumerate(part.tools):
            tool_name = f"{name}_t{number}"
            tools[tool_name] = (tool.body, case_choice(tool.body, tool.choice))
            head = "async def" if tool.is_async else "def"
            if tool.via == "decorator":
                lines.append(f"@{name}.tool")
            else:
                per_run.append(tool_name)
            lines.extend([
                f"{head} {tool_name}(ctx: RunContext[Deps], what: str) -> str:",
                '    """A tool."""',
                "    checked(ctx)",
                f"    return {body_call(tool.body, tool_name, in_async=tool.is_async)}",
                "",
            ])
        for child, streamed in inner:
            tools[f"ask_{child}"] = ("delegate", "allowed")
            run = [
                f"    async with {child}.run_stream(what, deps=ctx.deps, usage=ctx.usage) as result:",
                "        return await result.get_output()",
            ] if streamed else [f"    return (await {child}.run(what, deps=ctx.deps, usage=ctx.usage)).output"]
            lines.extend([
                f"@{name}.tool",
                f"async def ask_{child}(ctx: RunContext[Deps], what: str) -> str:",
                f'    """Ask {child}."""',
                *run,
                "",
            ])
        if per_run:
            lines.extend([
                f"@{name}.toolset",
                f"def {name}_per_run(ctx: RunContext[Deps]):",
                "    checked(ctx)",
                "    toolset = FunctionToolset()",
                *[f'    toolset.add_function({tool_name}, name="{tool_name}")' for tool_name in per_run],
                "    return toolset",
                "",
            ])
        return name

    entry = agent(root)
    lines.append(f"entry = {entry}")
    return "\n".join(lines), tools


@settings(max_examples=15, deadline=None,
          suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(root=parts())
# A tool delegating to an agent whose per-run toolset has a tool with its own async Responses client, and another
# whose hand-opened socket the case allowed.
@example(root=Part(tools=[Tool("socket", "decorator", False, "allowed")],
                   delegates=[Part(tools=[Tool("own_async:responses", "toolset", True, "allowed")])]))
# A tool streaming another agent's run, whose tool streams its own chat completion.
@example(root=Part(tools=[], delegates=[Part(tools=[Tool("own_stream:chat", "decorator", False, "allowed")],
                                             streamed=True)]))
def test_it_lets_nothing_of_a_pydantic_ai_agent_reach_beyond_agenttest_under_test(
    root, scripted_model, team_repo, tmp_path, listener
):
    module, tools = source(root)
    package = team_repo(module)
    agent = Agent.objects.create(
        name=f"team-{uuid.uuid4().hex[:8]}", runtime="pydantic-ai", entry=f"{package}.bot:entry",
        deps=f"{package}.bot:make_deps", provider="scripted", model="scripted", max_steps=100,
        outside_effects={name: False for name, (body, _) in tools.items() if effect_free(body)},
    )
    issued: list[str] = []
    scripted_model.respond_with(every_tool_once(issued))
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={"customer_id": "C-7"},
        turns=[TurnPlan("Go.")], assertions=[AssertionPlan("outputContains", {"text": "done"})],
        mocks=[MockSpec(name, MOCKED) for name, (_, choice) in tools.items() if choice == "mocked"],
    )
    suite = suite_plan(extra_allowed=(name for name, (_, choice) in tools.items() if choice == "allowed"))

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite)

    context = f"{module}\n{tools}\n{outcome.status}: {outcome.reason}"
    assert listener.received == [] and markers(tmp_path) == [], context
    check_case(
        status=outcome.status, reason=outcome.reason,
        answered=[(call["name"], call["outcome"], call["result"]) for call in outcome.tool_calls],
        tools=tools, issued=issued, outside=set(), host_port=listener.url.removeprefix("http://"),
        model_requests=scripted_model.requests, context=context,
    )
