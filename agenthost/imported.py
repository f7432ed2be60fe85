"""Conversations a team's service had, as the host takes them: plain data in the shape below (the host knows no
traces: any objects with these attributes will do), written by `services.conversation_import`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from agenthost.calls import storable_raw_arguments, stored_name
from agenthost.held import PRE_TURN
from agenthost.models import Agent, Conversation, Message
from agenthost.redaction import redact, redact_text
from agenthost.turns import InvalidInput


class ImportedMessage(Protocol):
    """One message of a conversation held elsewhere, in the host's terms (any object with these attributes, read
    only: a frozen dataclass will do)."""

    # user, assistant, tool_call or tool_result
    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...

    @property
    def function_name(self) -> str: ...

    @property
    def arguments(self) -> dict[str, Any] | None: ...

    @property
    def raw_arguments(self) -> str: ...

    @property
    def tool_call_id(self) -> str: ...

    @property
    def agent_name(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def input_tokens(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...

    @property
    def span_id(self) -> str: ...

    @property
    def provider_executed(self) -> bool: ...


class ImportedConversation(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def service_name(self) -> str: ...

    @property
    def trace_ids(self) -> Sequence[str]: ...

    @property
    def agent_name(self) -> str: ...

    @property
    def messages(self) -> Sequence[ImportedMessage]: ...

    @property
    def content_missing(self) -> str: ...


# The outcome of a tool call the model provider ran itself: no local tool ran, so nothing may stand in for one.
PROVIDER_EXECUTED = "provider"
BOUND_BY = ("agent name", "service name", "chosen")
# What makes a stored message the same as an imported one: a re-import keeps the messages it already holds.
SAME_MESSAGE = ("role", "content", "function_name", "arguments", "raw_arguments", "tool_call_id", "span_id")


def imported_messages(
    messages: Sequence[ImportedMessage], *, agent: Agent, named: dict[str, Agent], seq: int = 0, users_before: int = 0
) -> list[Message]:
    """The messages as rows of the host (unsaved, seq from `seq`, after `users_before` user messages): each user
    message opens a turn; a message names its agent by FK when `named` holds one of its name, else by name under
    `agent`."""
    rows = []
    turn = PRE_TURN + users_before
    # A result names its function, as the host's own results do; the trace may give it only the call's id.
    called: dict[str, str] = {}
    for number, message in enumerate(messages, start=seq):
        if message.role == Message.Role.USER:
            turn += 1
        function_name = message.function_name
        if message.role == Message.Role.TOOL_CALL:
            called[message.tool_call_id] = function_name
        elif message.role == Message.Role.TOOL_RESULT and not function_name:
            function_name = called.get(message.tool_call_id, "")
        author = named.get(message.agent_name, agent)
        provider_executed = message.provider_executed and message.role in (
            Message.Role.TOOL_CALL, Message.Role.TOOL_RESULT
        )
        rows.append(
            Message(
                seq=number,
                turn=max(turn, 0),
                role=message.role,
                content=redact_text(message.content or ""),
                function_name=stored_name(function_name),
                arguments=redact(message.arguments) if isinstance(message.arguments, dict) else None,
                raw_arguments=storable_raw_arguments(message.raw_arguments or ""),
                tool_call_id=stored_name(message.tool_call_id),
                agent=author,
                agent_name="" if message.agent_name == author.name else stored_name(message.agent_name),
                trigger="model" if message.role == Message.Role.TOOL_CALL else "",
                outcome=_outcome(message.role, provider_executed),
                model=redact_text(message.model or "")[:300],
                input_tokens=_count(message.input_tokens),
                output_tokens=_count(message.output_tokens),
                span_id=(message.span_id or "")[:16],
            )
        )
    return rows


def _outcome(role: str, provider_executed: bool) -> str:
    """How a call was answered, as the host's own results say it: a result the trace holds is what the team's tool
    returned when it ran in production (a page would otherwise show the call as having no result)."""
    if provider_executed:
        return PROVIDER_EXECUTED
    return "executed" if role == Message.Role.TOOL_RESULT else ""


def _count(value: object) -> int:
    return min(max(value, 0), 2**31 - 1) if isinstance(value, int) and not isinstance(value, bool) else 0


def refuse_imported(conversation: Conversation) -> None:
    """An imported conversation happened in the team's service: nothing is sent to it here."""
    if conversation.source == Conversation.Source.TRACE:
        service = conversation.trace_service or "a service"
        raise InvalidInput(
            f"conversation #{conversation.pk} was imported from the traces of {service}: it happened there, and "
            "nothing can be sent to it here"
        )


def check_imported(mapped: ImportedConversation, bound_by: str) -> None:
    """InvalidInput for a conversation that cannot be imported: no content, an unknown binding or role."""
    if mapped.content_missing:
        raise InvalidInput(f"the conversation has no message content: {mapped.content_missing}")
    if bound_by not in BOUND_BY:
        raise InvalidInput(f"bound_by must be one of {', '.join(BOUND_BY)}")
    roles = set(Message.Role.values)
    for index, message in enumerate(mapped.messages):
        if message.role not in roles:
            raise InvalidInput(f"messages[{index}]: role must be one of {', '.join(sorted(roles))}")


def imported_rows(mapped: ImportedConversation, *, agent: Agent, seq: int = 0, users_before: int = 0) -> list[
    Message
]:
    """`mapped`'s messages as rows of the host (imported_messages), each naming its agent by FK where one exists."""
    named = {a.name: a for a in Agent.objects.filter(name__in={m.agent_name for m in mapped.messages if m.agent_name})}
    return imported_messages(mapped.messages, agent=agent, named=named, seq=seq, users_before=users_before)


def imported_fields(
    mapped: ImportedConversation, *, agent: Agent, bound_by: str, trace_ids: Iterable[Any], turn_count: int,
    message_count: int,
) -> dict[str, Any]:
    """What an import writes on the conversation itself."""
    return {
        "agent": agent,
        "current_agent": None,
        "title": f"Imported from {mapped.service_name or 'a trace'}"[:200],
        "trace_ids": [str(trace_id) for trace_id in trace_ids],
        "trace_agent": stored_name(mapped.agent_name),
        "bound_by": bound_by,
        "turn_count": turn_count,
        "message_count": message_count,
    }
