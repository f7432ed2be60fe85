"""What the agents under test can call: every function name of a mock, an assertion or a suite is checked against it,
because a name that matches nothing would silently mock, allow or block nothing."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from agenthost.seams import (
    Agent,
    agent_callable_functions,
    declared_functions,
    function_is_effect_free,
    get_function,
    runtime_tool_declarations,
)
from cases.models import Case, Suite


@dataclass(frozen=True)
class CallableFunctions:
    """The functions a conversation can call: what every agent it can reach from its entry agent (sub-agents, their
    sub-agents, …) declares, and the five control-flow functions. Rules, too, call only these (the host resolves a
    rule's function among them).

    `declarations` holds, per name, each reaching agent's own declaration of it (None for a control-flow function
    the agent does not declare)."""

    agents: tuple[str, ...]
    declarations: dict[str, tuple[dict[str, Any] | None, ...]]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.declarations)

    def effect_free(self, name: str) -> bool:
        """Free of outside effects however it is reached: a static output in one agent does not make another agent's
        real implementation safe."""
        return all(function_is_effect_free(name, declaration) for declaration in self.declarations.get(name, (None,)))

    @property
    def listing(self) -> str:
        return f"callable functions (agents: {', '.join(self.agents)}): {', '.join(sorted(self.names))}"

    def parameters(self, name: str) -> frozenset[str] | None:
        """The arguments `name` takes, when every declaration of it lists them (its JSON Schema's properties, else the
        registered function's); None when one does not, and no argument name can be checked against them."""
        found: set[str] = set()
        for declaration in self.declarations.get(name, (None,)):
            schema = (declaration or {}).get("parameters")
            if not isinstance(schema, dict) and (registered := get_function(name)) is not None:
                schema = registered.parameters
            properties = schema.get("properties") if isinstance(schema, dict) else None
            if not isinstance(properties, dict) or not properties:
                return None
            found.update(properties)
        return frozenset(found)

    def not_callable(self, name: str) -> str:
        """Why `name` is refused, with a near match and the whole list (`listing`, last), so the fix is obvious."""
        near = _near_match(name, self.names)
        hint = f"did you mean {near!r}? " if near is not None else ""
        return f"{name!r} is not a function the agent under test can call; {hint}{self.listing}"


def _near_match(name: str, names: frozenset[str]) -> str | None:
    folded = {candidate.casefold(): candidate for candidate in names}
    wanted = name.strip().casefold()
    if wanted in folded:
        return folded[wanted]
    close = difflib.get_close_matches(wanted, list(folded), n=1, cutoff=0.8)
    return folded[close[0]] if close else None


def callable_functions(entry_agents: list[Agent]) -> CallableFunctions:
    """What conversations starting with any of `entry_agents` can call (see CallableFunctions)."""
    reached: dict[int, Agent] = {}
    waiting = list(entry_agents)
    while waiting:
        agent = waiting.pop(0)
        if agent.pk in reached:
            continue
        reached[agent.pk] = agent
        waiting.extend(agent.sub_agents.all())
    declarations: dict[str, list[dict[str, Any] | None]] = {}
    for agent in reached.values():
        declared = [item for item in declared_functions(agent.functions or []) if isinstance(item, dict)]
        # A runtime agent's tools are its code's, discovered from the framework object.
        from_code = runtime_tool_declarations(agent)
        declared += from_code
        for name in [*agent_callable_functions(agent), *(item["name"] for item in from_code)]:
            own = [item for item in declared if item.get("name") == name]
            declarations.setdefault(name, []).extend(own or [None])
    return CallableFunctions(
        agents=tuple(agent.name for agent in reached.values()),
        declarations={name: tuple(found) for name, found in declarations.items()},
    )


def case_callable_functions(*, suite: Suite | None, entry_agent: Agent | None = None) -> CallableFunctions | None:
    """What a case of `suite` entering through `entry_agent` (None: the suite's agent) can call; None when there is
    no agent to ask yet (an unsaved or agent-less suite), and the checks that need it are skipped."""
    agent = entry_agent or (suite.agent if suite is not None and suite.agent_id else None)
    return callable_functions([agent]) if agent is not None else None


def suite_callable_functions(*, agent: Agent, suite: Suite | None = None) -> CallableFunctions:
    """What any case of the suite can call: through the suite's agent, or the entry agent a case names."""
    entry_agents = [agent]
    if suite is not None and suite.pk is not None:
        entry_agents += list(Agent.objects.filter(pk__in=Case.objects.filter(suite=suite).values("entry_agent")))
    return callable_functions(entry_agents)

