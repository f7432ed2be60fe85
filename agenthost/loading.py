"""Loading an agent into a conversation: a per-conversation copy of its config that agent-load hooks may rewrite."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agenthost.builtins.control import CONTROL_FLOW_FUNCTIONS
from agenthost.functions import get_function
from agenthost.mcp.tools import declared_functions
from agenthost.models import Agent, Conversation


def callable_function_names(functions: list[dict[str, Any]] | None) -> frozenset[str]:
    """The names an agent with these declarations may call: what it declares, exactly as written, plus the five
    control-flow functions. Any other name the model produces is refused without running anything. A declaration of
    an MCP server's tools counts as each tool's `<server>__<tool>` name, as last listed (agenthost/mcp/tools.py)."""
    names = (item.get("name") for item in declared_functions(functions) if isinstance(item, dict))
    return frozenset(name for name in names if isinstance(name, str) and name) | frozenset(CONTROL_FLOW_FUNCTIONS)


def agent_callable_functions(agent: Agent) -> frozenset[str]:
    return callable_function_names(agent.functions)


@dataclass
class LoadedAgent:
    id: int
    name: str
    description: str
    instruction: str
    provider: str
    model: str
    temperature: float | None
    functions: list[dict[str, Any]]
    rules: list[dict[str, Any]]
    sub_agents: list[tuple[str, str]] = field(default_factory=list)
    max_steps: int = 10
    # The model as its user configured it, when a hook runs the agent through another provider (a test harness's):
    # what reasons and the stored messages name, so they read the same whichever provider carried the call.
    shown_model_key: str = ""
    # Whose loop runs the agent: "native" (agenttest's, turn_run) or a runtime running the team's code at `entry`.
    runtime: str = "native"
    entry: str = ""
    # pydantic-ai: the factory ("module:attribute") of the run's deps, given the conversation's state.
    deps: str = ""
    # A process agent (runtime "process"): what to start and how to speak to it.
    command: str = ""
    args: list[str] = field(default_factory=list)
    cwd: str = ""
    env: list[str] = field(default_factory=list)
    protocol: str = ""
    # Tool name → whether it has effects outside agenttest, for the tools of the team's code (undeclared: it has).
    outside_effects: dict[str, bool] = field(default_factory=dict)
    # The agent of the team's framework that this copy acts as (a sub-agent the entry agent handed off to), when it is
    # not this agent itself: it has only a name, which the messages it writes carry (Message.agent_name).
    framework_agent: str = ""

    @property
    def model_key(self) -> str:
        return f"{self.provider}:{self.model}"

    @property
    def model_named(self) -> str:
        return self.shown_model_key or self.model_key

    def callable_names(self) -> frozenset[str]:
        return callable_function_names(self.functions)

    def declaration(self, name: str) -> dict[str, Any] | None:
        return next((item for item in self.functions if item.get("name") == name), None)

    def tools(self, *, entry_agent_name: str) -> list[dict[str, Any]]:
        """The tools offered to the model, in the OpenAI format."""
        tools = []
        declared = set()
        for item in self.functions:
            name = item.get("name", "")
            declared.add(name)
            registered = get_function(name)
            description = item.get("description") or (registered.description if registered else "")
            parameters = item.get("parameters") or (
                registered.parameters if registered else {"type": "object", "properties": {}}
            )
            tools.append(_tool(name, description, parameters))
        if self.sub_agents and "route_to_agent" not in declared:
            names = [name for name, _ in self.sub_agents]
            described = "; ".join(f"{name}: {description}" for name, description in self.sub_agents)
            tools.append(
                _tool(
                    "route_to_agent",
                    f"Hand this turn to the sub-agent best suited to the user's request. Sub-agents: {described}",
                    {
                        "type": "object",
                        "properties": {
                            "agent_name": {"type": "string", "enum": names},
                            "reason": {"type": "string"},
                        },
                        "required": ["agent_name"],
                    },
                )
            )
        if self.name != entry_agent_name and "util-routing-fallback_to_router" not in declared:
            registered = get_function("util-routing-fallback_to_router")
            assert registered is not None, "a built-in function, registered when agenthost is imported"
            tools.append(_tool(registered.name, registered.description, registered.parameters))
        return tools


def _tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


AgentLoadHook = Callable[[LoadedAgent, Conversation], None]
_hooks: list[AgentLoadHook] = []
_hooks_lock = threading.Lock()


def register_agent_load_hook(hook: AgentLoadHook) -> None:
    with _hooks_lock:
        if hook not in _hooks:
            _hooks.append(hook)


def unregister_agent_load_hook(hook: AgentLoadHook) -> None:
    with _hooks_lock:
        if hook in _hooks:
            _hooks.remove(hook)


def agent_as_stored(agent: Agent) -> LoadedAgent:
    """The agent as its row and its MCP servers' cached listings say, before any load hook: what a turn starts from,
    and what a run's snapshot records. Its lists are copies, so a hook may change them."""
    return LoadedAgent(
        id=agent.pk,
        name=agent.name,
        description=agent.description,
        instruction=agent.instruction,
        provider=agent.provider,
        model=agent.model,
        temperature=agent.temperature,
        functions=[dict(item) for item in declared_functions(agent.functions or [])],
        rules=[dict(item) for item in agent.rules or []],
        sub_agents=[(sub.name, sub.description) for sub in agent.sub_agents.all()],
        max_steps=agent.max_steps or settings.AGENTTEST_MAX_STEPS,
        runtime=agent.runtime or Agent.Runtime.NATIVE,
        entry=agent.entry,
        deps=agent.deps,
        command=agent.command,
        args=list(agent.args or []),
        cwd=agent.cwd,
        env=list(agent.env or []),
        protocol=agent.protocol,
        outside_effects=dict(agent.outside_effects or {}),
    )


def load_agent(agent: Agent, conversation: Conversation) -> LoadedAgent:
    """Every time an agent enters a conversation (turn start, routing) it is loaded here and the hooks run."""
    loaded = agent_as_stored(agent)
    with _hooks_lock:
        hooks = list(_hooks)
    for hook in hooks:
        hook(loaded, conversation)
    return loaded
