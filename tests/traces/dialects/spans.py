"""Real exporters' spans as the receiver hands them over: the OpenTelemetry SDK's `ReadableSpan`s turned into
`SpanRecord`s, the way the OTLP decoder turns them (ids as lowercase hex, AnyValue arrays as lists)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from traces.dialects import attribute_kept
from traces.spans import SpanEvent, SpanRecord


def _value(value: Any) -> Any:
    return [_value(item) for item in value] if isinstance(value, (tuple, list)) else value


def _attributes(attributes: Any) -> dict[str, Any]:
    return {key: _value(value) for key, value in (attributes or {}).items()}


def records(spans: Iterable[ReadableSpan]) -> list[SpanRecord]:
    return [
        SpanRecord(
            trace_id=f"{span.context.trace_id:032x}",
            span_id=f"{span.context.span_id:016x}",
            parent_span_id=f"{span.parent.span_id:016x}" if span.parent else "",
            name=span.name,
            start_ns=span.start_time or 0,
            end_ns=span.end_time or 0,
            service_name=str(span.resource.attributes.get("service.name", "")),
            scope_name=span.instrumentation_scope.name if span.instrumentation_scope else "",
            kind=span.kind.value,
            status_code=span.status.status_code.value,
            status_message=span.status.description or "",
            attributes=_attributes(span.attributes),
            resource=_attributes(span.resource.attributes),
            events=tuple(SpanEvent(name=e.name, time_ns=e.timestamp, attributes=_attributes(e.attributes))
                         for e in span.events),
        )
        for span in spans
    ]


def span(
    span_id: str,
    *,
    parent: str = "",
    trace: str = "a",
    start: int = 0,
    name: str = "span",
    scope: str = "",
    attributes: dict[str, Any] | None = None,
    events: tuple[SpanEvent, ...] = (),
) -> SpanRecord:
    """A span as a test writes it by hand: ids padded to OTLP's lengths, one service."""
    return SpanRecord(
        trace_id=trace.rjust(32, "0"), span_id=span_id.rjust(16, "0"), parent_span_id=parent.rjust(16, "0") if parent
        else "", name=name, start_ns=start, end_ns=start + 1, service_name="shop", scope_name=scope,
        attributes=attributes or {}, events=events,
    )


def transcript(conversation: Any) -> list[tuple]:
    """A conversation's messages as (role, text or function name, arguments, agent), ids and usage left out."""
    return [
        (m.role, m.function_name or m.content, m.arguments if m.role == "tool_call" else None, m.agent_name)
        for m in conversation.messages
    ]


def kept_only(spans: list[SpanRecord]) -> list[SpanRecord]:
    """The spans as the store keeps them: only the attributes the mapping reads."""
    def kept(attributes: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in attributes.items() if attribute_kept(key)}

    return [
        replace(s, attributes=kept(s.attributes),
                events=tuple(replace(e, attributes=kept(e.attributes)) for e in s.events))
        for s in spans
    ]
