"""A property over random MCP listings and refreshes, suite settings and tool names: whatever the server listed when
the cache was refreshed (refreshes refused for name clashes included), whatever it lists at the run, whatever the suite
extra-allows or force-blocks (even as a row no validation checked) and whichever functions the model calls, no tool
that is not effect-free *now* — as its server lists it at the run — runs for real under test, and nothing runs that the
suite did not extra-allow. A real stdio server, whose listing a file decides, leaves a marker for every real call."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from agenthost.functions import annotations_effect_free
from agenthost.llm.scripted import Answer, Call
from agenthost.mcp.tools import function_name, refresh
from agenthost.models import Agent, Conversation, McpToolList
from cases.models import Assertion, Case, Suite, Turn
from runs.models import Run
from runs.services import run_create, run_execute
from tests.properties import SUPPRESSED_WITH_FIXTURES

# What these tests answer hangs on MCP servers in processes of their own, not on the database
# engine: the PostgreSQL pass runs them, once.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.production_engine]

# Names that sanitise to the same function name (peek.ticket, peek_ticket) and names that do not (peek-ticket).
NAMES = st.sampled_from(
    ["peek.ticket", "peek_ticket", "peek-ticket", "close.ticket", "close_ticket", "look"]
) | st.text(alphabet="ab._-", min_size=1, max_size=3)
ANNOTATIONS = st.sampled_from([
    None,
    {"readOnlyHint": True},
    {"readOnlyHint": True, "destructiveHint": True},
    {"readOnlyHint": False},
    {"destructiveHint": True},
    {"readOnlyHint": True, "openWorldHint": True},
    {"readOnlyHint": True, "destructiveHint": False},
])
LISTING = st.lists(st.fixed_dictionaries({"name": NAMES, "annotations": ANNOTATIONS}), max_size=4,
                   unique_by=lambda tool: tool["name"])


def functions_of(listing: list[dict[str, Any]]) -> list[str]:
    return [function_name("orders", tool["name"]) for tool in listing]


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    refreshes = draw(st.lists(LISTING, min_size=1, max_size=2))
    live = draw(st.one_of(LISTING, st.just(refreshes[-1]), st.builds(
        lambda tools, annotations: [{**tool, "annotations": annotations} for tool in tools],
        st.just(refreshes[-1]), ANNOTATIONS,
    )))
    names = sorted({*(name for listing in refreshes for name in functions_of(listing)), *functions_of(live),
                    "orders__lookup_order"})
    extra_allowed = draw(st.lists(st.sampled_from(names), unique=True, min_size=1, max_size=4))
    return {
        "refreshes": refreshes,
        "live": live,
        "extra_allowed": extra_allowed,
        "force_blocked": draw(st.lists(st.sampled_from(names), unique=True, max_size=1)),
        # Mostly what the suite allows: the calls that could run for real are the ones worth trying.
        "calls": draw(st.lists(st.sampled_from(extra_allowed) | st.sampled_from(names), min_size=1, max_size=4)),
        "cases": draw(st.integers(1, 2)),
        "concurrency": draw(st.integers(1, 2)),
    }


def clean() -> None:
    Run.objects.all().delete()
    Suite.objects.all().delete()
    Conversation.objects.all().delete()
    Agent.objects.all().delete()
    McpToolList.objects.all().delete()


@settings(max_examples=60, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(scenario=scenarios())
def test_it_never_runs_for_real_a_tool_that_is_not_effect_free_now(scenario, scripted_model, mcp_servers, markers):
    clean()
    for listing in scenario["refreshes"]:
        markers.list(extra=listing)
        refresh(["orders"])
    markers.list(extra=scenario["live"])
    markers.clear()
    agent = Agent.objects.create(name="desk", instruction="x", provider="scripted", model="scripted",
                                 functions=[{"mcp": "orders"}])
    # As a row no validation checked could hold them.
    suite = Suite.objects.create(
        name="desk", agent=agent, case_timeout_seconds=30, case_concurrency=scenario["concurrency"],
        extra_allowed_functions=scenario["extra_allowed"], force_blocked_functions=scenario["force_blocked"],
    )
    for index in range(scenario["cases"]):
        case = Case.objects.create(suite=suite, name=f"case {index}")
        Turn.objects.create(case=case, position=0, user_message="go")
        Assertion.objects.create(case=case, type="outputContains", params={"text": "done"})

    def respond(request: Any) -> Any:
        if request.messages[-1].get("role") == "user":
            return Answer(tool_calls=[Call(name, {}) for name in scenario["calls"]])
        return "done"

    scripted_model.respond_with(respond)

    run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key]).pk)

    event(f"a tool ran for real: {bool(markers.called())}")
    live_by_function: dict[str, list[dict[str, Any]]] = {}
    for tool in scenario["live"]:
        live_by_function.setdefault(function_name("orders", tool["name"]), []).append(tool)
    for marker in markers.called():
        tool = marker.name[len("called-"):].rsplit("-", 1)[0]
        function = function_name("orders", tool)
        live = live_by_function.get(function, [])
        assert len(live) == 1 and live[0]["name"] == tool, (tool, scenario)
        assert annotations_effect_free(live[0]["annotations"]), (tool, scenario)
        assert function in scenario["extra_allowed"] and function not in scenario["force_blocked"], (tool, scenario)
        assert function in scenario["calls"], (tool, scenario)
