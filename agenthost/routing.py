"""Handing the rest of a turn to another agent: a sub-agent of the current one, or back to the entry agent."""

from __future__ import annotations

from agenthost.functions import FunctionResult
from agenthost.loading import LoadedAgent, load_agent
from agenthost.session import ConversationSession
from agenthost.turns import TurnResult


def route(
    session: ConversationSession, loaded: LoadedAgent, outcome: FunctionResult, result: TurnResult
) -> tuple[LoadedAgent, FunctionResult]:
    target_name = outcome.route_to or ""
    entry = session.entry_agent
    allowed = {name for name, _ in loaded.sub_agents} | {entry.name}
    if entry.name == loaded.name:
        allowed |= {sub.name for sub in entry.sub_agents.all()}
    target = session.agent_named(target_name) if target_name in allowed else None
    if target is None:
        choices = ", ".join(sorted(allowed - {loaded.name})) or "none"
        return loaded, FunctionResult(
            content=f"Cannot route to {target_name!r}: not a sub-agent of {loaded.name}. Choose one of: {choices}.",
            error=True,
            outcome=outcome.outcome,
        )
    new_loaded = load_agent(target, session.conversation)
    result.agent_chain.append(new_loaded.name)
    return new_loaded, outcome
