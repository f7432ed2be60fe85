"""A team's Agents SDK code composed from random parts — tools on an agent or added to it at run time, sync or async;
static hand-offs, hand-offs appended at run time to clones, agents exposed as tools and agents a tool runs itself
(`Runner.run`, `Runner.run_streamed`), nested two deep; tool bodies with side effects, with their own openai client
(sync and async, streamed or not, chat completions and the Responses API), opening sockets, or looping over the team's
own functions by hand — run under test with random mocks and allow-lists: no tool of the team's runs for real (zero
side effects in marker files and at the listener), no model request bypasses the model layer, every call of a tool is
answered by its mock, blocked or run as allowed, by the agent that made it, and every case that would have reached the
outside world is an Error naming it (issue 33, item 2 and Done when)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agenthost.models import Agent
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult
from runs.services import run_create, run_execute
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.runtimes.conftest import markers
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
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = ("handoff", "appended", "as_tool", "delegated", "streamed")


@dataclass
class Tool:
    body: str
    via: str  # "static" (the agent's tools) or "added" (appended to them by its instructions, at run time)
    is_async: bool
    choice: str


@dataclass
class Part:
    """An agent of the team's code: its tools and the agents it reaches, each by a kind."""

    tools: list[Tool] = field(default_factory=list)
    children: list[tuple[str, Part]] = field(default_factory=list)


def tool_parts() -> st.SearchStrategy[Tool]:
    return st.builds(Tool, body=bodies(), via=st.sampled_from(("static", "added")), is_async=st.booleans(),
                     choice=choices())


def parts(depth: int = 0) -> st.SearchStrategy[Part]:
    tools = st.lists(tool_parts(), max_size=2)
    if depth >= 2:
        return st.builds(Part, tools=tools)
    return st.builds(
        Part, tools=tools,
        children=st.lists(st.tuples(st.sampled_from(KINDS), st.deferred(lambda: parts(depth + 1))), max_size=2),
    )


def source(root: Part) -> tuple[str, dict[str, tuple[str, str]]]:
    """The team's module for `root`, and its tools: name → (body, what the case does with it)."""
    lines = [HELPERS, "from agents import Agent, Runner, function_tool", ""]
    tools: dict[str, tuple[str, str]] = {}
    counter = iter(range(100))

    def agent(part: Part) -> str:
        name = f"a{next(counter)}"
        static, added, handoffs, appended = [], [], [], []
        for number, tool in enumerate(part.tools):
            tool_name = f"{name}_t{number}"
            tools[tool_name] = (tool.body, case_choice(tool.body, tool.choice))
            (static if tool.via == "static" else added).append(tool_name)
            lines.extend([
                "@function_tool",
                f"{'async def' if tool.is_async else 'def'} {tool_name}(what: str) -> str:",
                '    """A tool."""',
                f"    return {body_call(tool.body, tool_name, in_async=tool.is_async)}",
                "",
            ])
        for kind, child in part.children:
            inner = agent(child)
            if kind == "handoff":
                handoffs.append(inner)
            elif kind == "appended":
                appended.append(inner)
            elif kind == "as_tool":
                tools[f"ask_{inner}"] = ("delegate", "allowed")
                static.append(f'{inner}.as_tool(tool_name="ask_{inner}", tool_description="Ask {inner}.")')
            else:
                tools[f"ask_{inner}"] = ("delegate", "allowed")
                static.append(f"ask_{inner}")
                run = (
                    [f"    return str((await Runner.run({inner}, what)).final_output)"] if kind == "delegated" else [
                        f"    streamed = Runner.run_streamed({inner}, what)",
                        "    async for _event in streamed.stream_events():",
                        "        pass",
                        "    return str(streamed.final_output)",
                    ]
                )
                lines.extend([
                    "@function_tool",
                    f"async def ask_{inner}(what: str) -> str:",
                    f'    """Ask {inner}."""',
                    *run,
                    "",
                ])
        lines.extend([
            f"def {name}_instructions(context, agent) -> str:",
            *[f'    if not any(getattr(h, "name", "") == "{inner}_clone" for h in agent.handoffs):\n'
              f'        agent.handoffs.append({inner}.clone(name="{inner}_clone"))' for inner in appended],
            *[f'    if not any(getattr(t, "name", "") == "{tool}" for t in agent.tools):\n'
              f"        agent.tools.append({tool})" for tool in added],
            f'    return "You are {name}."',
            "",
            f'{name} = Agent(name="{name}", instructions={name}_instructions, tools=[{", ".join(static)}],'
            f' handoffs=[{", ".join(handoffs)}])',
            "",
        ])
        return name

    entry = agent(root)
    lines.append(f"entry = {entry}")
    return "\n".join(lines), tools


@settings(max_examples=15, deadline=None,
          suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(root=parts())
# The reproductions among them: a hand-off appended at run time to a clone with an unmocked tool, and an
# agent exposed as a tool whose inner agent is itself exposed as a tool, its tool mocked.
@example(root=Part(children=[("appended", Part(tools=[Tool("effect", "static", False, "neither")]))]))
@example(root=Part(children=[("as_tool", Part(children=[("as_tool", Part(
    tools=[Tool("effect", "static", False, "mocked")]))]))]))
# A tool that runs another agent itself, whose tool added at run time asks its own async Responses client; and an
# allowed tool looping over the team's side-effecting functions by hand.
@example(root=Part(tools=[Tool("loop", "static", False, "allowed")], children=[("delegated", Part(
    tools=[Tool("own_async:responses", "added", True, "allowed")]))]))
# Found by this test: a hand-off inside a run a tool starts itself was taken for a tool run outside agenttest.
@example(root=Part(children=[("delegated", Part(children=[("handoff", Part(
    tools=[Tool("effect", "static", False, "mocked")]))]))]))
# Found by this test: a run a tool streams (Runner.run_streamed) lost its tool calls — the SDK streams through the
# openai client's streaming-response wrapper — and the case passed with a socket it never opened.
@example(root=Part(children=[("streamed", Part(tools=[Tool("socket", "static", False, "allowed")]))]))
# A tool streaming another agent's run, whose tool streams its own Responses call.
@example(root=Part(children=[("streamed", Part(tools=[Tool("own_stream:responses", "static", False, "allowed")]))]))
def test_it_runs_no_tool_of_any_agent_in_the_run_for_real_under_test(
    root, scripted_model, team_repo, tmp_path, listener
):
    module, tools = source(root)
    package = team_repo(module)
    agent = Agent.objects.create(
        name=f"team-{uuid.uuid4().hex[:8]}", runtime="openai-agents", entry=f"{package}.bot:entry",
        provider="scripted", model="scripted", max_steps=100,
        outside_effects={name: False for name, (body, _) in tools.items() if effect_free(body)},
    )
    suite = Suite.objects.create(
        name=agent.name, agent=agent, case_timeout_seconds=int(WAIT_SECONDS),
        extra_allowed_functions=[name for name, (_, choice) in tools.items() if choice == "allowed"],
    )
    case = Case.objects.create(suite=suite, name="acts")
    Turn.objects.create(case=case, position=0, user_message="Go.")
    for position, name in enumerate(name for name, (_, choice) in tools.items() if choice == "mocked"):
        Mock.objects.create(case=case, position=position, function_name=name, result=MOCKED)
    Assertion.objects.create(case=case, position=0, type="outputContains", params={"text": "done"})
    issued: list[str] = []
    scripted_model.respond_with(every_tool_once(issued))

    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key]).pk)
    result = CaseResult.objects.get(run=run)

    context = f"{module}\n{tools}\n{result.status}: {result.reason}"
    assert markers(tmp_path) == [] and listener.received == [], context
    answered = [row for row in result.transcript if row["role"] == "tool_result" and row["function_name"] in tools]
    for row in answered:
        # Each call is its own agent's (a clone's keeps the clone's name).
        if not row["function_name"].startswith("ask_"):
            assert row["agent"].split("_clone")[0] == row["function_name"].split("_t")[0], (row, context)
    check_case(
        status=result.status, reason=result.reason,
        answered=[(row["function_name"], row["outcome"], row["content"]) for row in answered],
        tools=tools, issued=issued, outside=set(), host_port=listener.url.removeprefix("http://"),
        model_requests=scripted_model.requests, context=context,
    )
