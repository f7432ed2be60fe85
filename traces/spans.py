"""The two shapes the traces app is built around: a span as the receiver decodes it from OTLP (protobuf or JSON,
whichever exporter sent it), and a conversation as a dialect module maps a group of spans into the host's terms.

The receiver and `agenttest traces import` produce `SpanRecord`s; `traces.dialects` turns the spans of one
conversation into a `MappedConversation`. Neither side knows the other's wire format or attribute names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# What the receiver stores in place of what it does not keep whole: the end of a text (or the last item of a list,
# the last key of an object) cut to the per-attribute limit, and an array or key-value list nested too deep.
TRUNCATED = "…[truncated]"
CUT = "[cut: nested too deep]"


@dataclass(frozen=True)
class StoredValue:
    """An attribute value left where it is stored until a dialect reads it: a model call's history, which every later
    call of the conversation repeats, so reading each one whenever a span arrives would re-read the conversation
    many times over. `cut`: whether the receiver cut it (traces.dialects reads only its whole messages then)."""

    load: Callable[[], Any] = field(compare=False, repr=False)
    cut: bool = False


@dataclass(frozen=True)
class SpanEvent:
    name: str
    time_ns: int
    # OTLP AnyValues decoded to JSON values (str, int, float, bool, None, list, dict); bytes as base64 text.
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanRecord:
    trace_id: str  # 32 lowercase hex digits
    span_id: str  # 16 lowercase hex digits
    parent_span_id: str  # "" for a root span
    name: str
    start_ns: int
    end_ns: int
    service_name: str = ""  # the resource's service.name
    scope_name: str = ""  # the instrumentation scope's name, e.g. "pydantic-ai", "openinference.instrumentation…"
    kind: int = 0  # OTLP SpanKind
    status_code: int = 0  # OTLP Status.code: 0 unset, 1 ok, 2 error
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()


@dataclass(frozen=True)
class MappedMessage:
    """One message in the host's conversation shape (agenthost.models.Message): role is "user", "assistant",
    "tool_call" or "tool_result"; a tool call carries function_name, arguments (a JSON object, or None when the
    model's text did not parse — raw_arguments keeps the text) and tool_call_id, its result the same tool_call_id and
    the result text as content."""

    role: str
    content: str = ""
    function_name: str = ""
    arguments: dict[str, Any] | None = None
    raw_arguments: str = ""
    tool_call_id: str = ""
    agent_name: str = ""  # which agent made it (invoke_agent / the agent's name attribute), "" if not known
    model: str = ""  # "provider:model" for an assistant message, as the call's span names them
    input_tokens: int = 0
    output_tokens: int = 0
    span_id: str = ""  # the span it was read from, so a page can link to it
    # A tool call the model provider ran itself (no local span executed it): named, never mocked as a local tool.
    provider_executed: bool = False


@dataclass(frozen=True)
class Resume:
    """Where a conversation's mapping stands after its last turn began, so a later span re-maps only that turn (and
    any turn after it) instead of every span of the conversation: what the turns before it left behind."""

    last_trace: str  # the trace of the last turn, which later spans may still change
    prefix: tuple[str, ...]  # the transcript before the last turn, as message fingerprints (hashed)
    seq: int  # how many mapped messages the turns before the last one made
    users_before: int  # how many of those are user messages (the host numbers turns by them)
    has_tools: bool  # whether the conversation has tool spans (an unexecuted call is then the provider's)
    agent_name: str  # the entry agent so far
    agent_from_span: bool  # whether an invoke_agent span named it (later spans cannot change it then)
    prior_max_start: int  # the latest start of the spans of the turns before the last one
    max_start: int  # the latest start of every span mapped


@dataclass(frozen=True)
class MappedConversation:
    key: str  # gen_ai.conversation.id when the spans carry one, else the trace id
    dialect: str  # "genai", "openinference" or "openllmetry"
    service_name: str = ""
    trace_ids: tuple[str, ...] = ()
    agent_name: str = ""  # the entry agent (the first invoke_agent), "" if not known
    system_instruction: str = ""
    messages: tuple[MappedMessage, ...] = ()
    # Tool definitions the model was offered ({"name", "description", "parameters"}), when the spans carry them.
    tools: tuple[dict[str, Any], ...] = ()
    # Set when the spans carry no message content (content capture was off): which setting of which exporter turns
    # it on. Such a conversation is listed with this note and never recorded into a draft.
    content_missing: str = ""
    # What a reviewer must know before trusting it: a turn whose history was cut at the receiver is incomplete.
    warnings: tuple[str, ...] = ()
    # Where the mapping stands, for the next span to continue from; None when it cannot be continued (its last turn
    # is interleaved with another).
    resume: Resume | None = field(default=None, compare=False)
