"""Reads of the traces app: the conversations the stored spans make up, one conversation's spans in order, and the
ingest token a key names."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Max, Min, QuerySet

from traces.models import INGEST_KEY_PREFIX, IngestToken, TraceSpan, ingest_key_hash
from traces.spans import SpanEvent, SpanRecord


@dataclass(frozen=True)
class TraceConversation:
    key: str
    services: tuple[str, ...]  # the service names of its spans, sorted
    trace_ids: tuple[str, ...]  # sorted
    span_count: int
    first_ns: int  # the earliest start
    last_ns: int  # the latest end


def _conversation_rows(*, service: str = "") -> QuerySet[TraceSpan]:
    rows = TraceSpan.objects.order_by()
    if service:
        rows = rows.filter(
            conversation_key__in=TraceSpan.objects.filter(service_name=service).values("conversation_key")
        )
    return rows


def trace_conversation_count(*, service: str = "") -> int:
    return _conversation_rows(service=service).values("conversation_key").distinct().count()


def trace_conversation_list(*, service: str = "", limit: int = 50, offset: int = 0) -> list[TraceConversation]:
    """Conversations (spans grouped by conversation key), the most recently active first; `service`: only those with
    a span of that service."""
    page = list(
        _conversation_rows(service=service)
        .values("conversation_key")
        .annotate(span_count=Count("id"), first_ns=Min("start_ns"), last_ns=Max("end_ns"))
        .order_by("-last_ns", "conversation_key")[offset : offset + limit]
    )
    keys = [row["conversation_key"] for row in page]
    traces: dict[str, set[str]] = {key: set() for key in keys}
    services: dict[str, set[str]] = {key: set() for key in keys}
    for key, trace_id, service_name in (
        TraceSpan.objects.filter(conversation_key__in=keys)
        .order_by()
        .values_list("conversation_key", "trace_id", "service_name")
        .distinct()
    ):
        traces[key].add(trace_id)
        if service_name:
            services[key].add(service_name)
    return [
        TraceConversation(
            key=row["conversation_key"],
            services=tuple(sorted(services[row["conversation_key"]])),
            trace_ids=tuple(sorted(traces[row["conversation_key"]])),
            span_count=row["span_count"],
            first_ns=row["first_ns"],
            last_ns=row["last_ns"],
        )
        for row in page
    ]


def trace_conversation_spans(*, key: str) -> list[SpanRecord]:
    """The conversation's spans by start time; of spans starting at once, a parent before its children."""
    records = [_record(row) for row in TraceSpan.objects.filter(conversation_key=key).order_by("start_ns", "id")]
    parents = {(record.trace_id, record.span_id): (record.trace_id, record.parent_span_id) for record in records}
    depths: dict[tuple[str, str], int] = {}
    for record in records:
        # Up the chain of parents present here (a missing parent ends it; a cycle, which only bad data makes, too).
        chain: dict[tuple[str, str], None] = {}
        span = (record.trace_id, record.span_id)
        while span in parents and span not in depths and span not in chain:
            chain[span] = None
            span = parents[span]
        depth = depths.get(span, -1)
        for span in reversed(chain):
            depth += 1
            depths[span] = depth
    return sorted(records, key=lambda record: (record.start_ns, depths[(record.trace_id, record.span_id)]))


def _record(row: TraceSpan) -> SpanRecord:
    return SpanRecord(
        trace_id=row.trace_id,
        span_id=row.span_id,
        parent_span_id=row.parent_span_id,
        name=row.name,
        start_ns=row.start_ns,
        end_ns=row.end_ns,
        service_name=row.service_name,
        scope_name=row.scope_name,
        kind=row.kind,
        status_code=row.status_code,
        status_message=row.status_message,
        attributes=row.attributes,
        resource=row.resource,
        events=tuple(
            SpanEvent(name=event["name"], time_ns=event["time_ns"], attributes=event["attributes"])
            for event in row.events
        ),
    )


def ingest_token_for_key(key: str) -> IngestToken | None:
    """The active (not revoked) ingest token whose key this is, else None."""
    if not key.startswith(INGEST_KEY_PREFIX):
        return None
    return IngestToken.objects.filter(key_hash=ingest_key_hash(key), revoked_at__isnull=True).first()
