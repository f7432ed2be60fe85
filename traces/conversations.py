"""A conversation mapped from a team's spans (traces.dialects) becomes a conversation of the host, bound to one of
agenttest's agents, where the recording pipeline takes it like a chat: recorded into a disabled draft whose mocks are
the real tool results.

Binding: the agent chosen, else the agent named as the trace's agent (`gen_ai.agent.name`), else the agent named as
its service (`service.name`). A conversation that binds to none is refused, and so is one whose spans carry no
message content: a draft of it would be half empty.
"""

from __future__ import annotations

from typing import Any

from agenthost.seams import Agent, Conversation, InvalidInput, conversation_import
from traces.spans import MappedConversation


class ConversationImportError(ValueError):
    """The conversation cannot be imported; nothing was written. `field` names the input to change."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def conversation_from_mapped(
    *, mapped: MappedConversation, agent: Agent | None = None, owner: Any = None
) -> Conversation:
    """Write `mapped` as an imported conversation (again: update the one imported before under its key), bound to
    `agent` or to the agent its trace names."""
    where = f"conversation {mapped.key!r} of service {mapped.service_name or '(unnamed)'}"
    if mapped.content_missing:
        raise ConversationImportError(
            f"{where} carries no message content, so it cannot become a draft: {mapped.content_missing}",
            field="conversation",
        )
    agent, bound_by = _bound(mapped, agent, where)
    try:
        return conversation_import(agent=agent, mapped=mapped, bound_by=bound_by, owner=owner)
    except InvalidInput as exc:
        raise ConversationImportError(f"{where}: {exc}", field="conversation") from None


def _bound(mapped: MappedConversation, chosen: Agent | None, where: str) -> tuple[Agent, str]:
    if chosen is not None:
        return chosen, "chosen"
    for name, bound_by in ((mapped.agent_name, "agent name"), (mapped.service_name, "service name")):
        agent = Agent.objects.filter(name=name).first() if name else None
        if agent is not None:
            return agent, bound_by
    names = " or ".join(
        f"{name!r} ({attribute})"
        for name, attribute in ((mapped.agent_name, "gen_ai.agent.name"), (mapped.service_name, "service.name"))
        if name
    )
    named = f"no agent is named {names}" if names else "its spans name no agent and no service"
    raise ConversationImportError(f"{where} is bound to no agent: {named}; choose one", field="agent")
