"""Reads of the traces app: the conversations the stored spans make up (as the traces page lists and filters them),
one conversation's spans in order, and the ingest token a key names."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, F, Func, JSONField, Max, Min, OuterRef, Q, QuerySet, Subquery
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce, Right, Substr

from agenthost.seams import Conversation, Message
from traces.models import INGEST_KEY_PREFIX, IngestToken, TraceSpan, ingest_key_hash
from traces.spans import TRUNCATED, SpanEvent, SpanRecord, StoredValue

FIRST_QUESTION_CHARS = 160


@dataclass(frozen=True)
class TraceConversation:
    key: str
    services: tuple[str, ...]  # the service names of its spans, sorted
    trace_ids: tuple[str, ...]  # sorted
    span_count: int
    first_ns: int  # the earliest start
    last_ns: int  # the latest end
    received_at: datetime | None = None  # when its newest span arrived
    models: tuple[str, ...] = ()  # the models its model calls name, sorted
    history_cut: bool = False  # a model call's messages were over the attribute limit and cut


# What a conversation page is filtered by: bound (an imported conversation holds it) or not; and its status.
BINDINGS = ("bound", "unbound")
STATUSES = {"imported": "Imported", "incomplete": "Incomplete (history cut)", "unimported": "Not imported"}
_MESSAGE_ATTRIBUTES = ("gen_ai.input.messages", "gen_ai.output.messages", "events")
# The model a call names, in each dialect (the request's first: what the service asked for).
_MODEL_ATTRIBUTES = ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name")


def history_cut() -> Q:
    """Spans whose messages the receiver cut at its attribute limit (traces.dialects reads only their whole ones)."""
    cut = Q()
    for name in _MESSAGE_ATTRIBUTES:
        cut |= Q(**{f"attributes__{name}__endswith": TRUNCATED})
    return cut


def _imported_keys() -> QuerySet:
    return Conversation.objects.filter(source=Conversation.Source.TRACE).values("trace_key")


def _conversation_rows(*, service: str = "", binding: str = "", status: str = "") -> QuerySet[TraceSpan]:
    rows = TraceSpan.objects.order_by()
    if service:
        rows = rows.filter(
            conversation_key__in=TraceSpan.objects.filter(service_name=service).values("conversation_key")
        )
    if binding == "bound" or status in ("imported", "incomplete"):
        rows = rows.filter(conversation_key__in=_imported_keys())
    elif binding == "unbound" or status == "unimported":
        rows = rows.exclude(conversation_key__in=_imported_keys())
    cut = TraceSpan.objects.filter(history_cut()).values("conversation_key")
    if status == "incomplete":
        rows = rows.filter(conversation_key__in=cut)
    elif status == "imported":
        rows = rows.exclude(conversation_key__in=cut)
    return rows


def trace_conversation_count(*, service: str = "", binding: str = "", status: str = "") -> int:
    return _conversation_rows(service=service, binding=binding, status=status).values(
        "conversation_key"
    ).distinct().count()


def trace_conversation_list(
    *, service: str = "", binding: str = "", status: str = "", limit: int = 50, offset: int = 0
) -> list[TraceConversation]:
    """Conversations (spans grouped by conversation key), the most recently active first; `service`: only those with
    a span of that service; `binding` (BINDINGS) and `status` (STATUSES) as the traces page filters them. A fixed
    number of queries, however many conversations the page holds."""
    page = list(
        _conversation_rows(service=service, binding=binding, status=status)
        .values("conversation_key")
        .annotate(
            span_count=Count("id"), first_ns=Min("start_ns"), last_ns=Max("end_ns"), received_at=Max("received_at")
        )
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
    models: dict[str, set[str]] = {key: set() for key in keys}
    named = TraceSpan.objects.filter(conversation_key__in=keys).order_by()
    model = Coalesce(*(KeyTextTransform(name, "attributes") for name in _MODEL_ATTRIBUTES))
    for key, name in named.annotate(model=model).filter(model__isnull=False).values_list(
        "conversation_key", "model"
    ).distinct():
        if name:
            models[key].add(name[:200])
    cut = set(named.filter(history_cut()).values_list("conversation_key", flat=True).distinct())
    return [
        TraceConversation(
            key=row["conversation_key"],
            services=tuple(sorted(services[row["conversation_key"]])),
            trace_ids=tuple(sorted(traces[row["conversation_key"]])),
            span_count=row["span_count"],
            first_ns=row["first_ns"],
            last_ns=row["last_ns"],
            received_at=row["received_at"],
            models=tuple(sorted(models[row["conversation_key"]])),
            history_cut=row["conversation_key"] in cut,
        )
        for row in page
    ]


def trace_service_names() -> list[str]:
    """Every service that sent spans, for the traces page's filter."""
    return list(
        TraceSpan.objects.exclude(service_name="").order_by("service_name").values_list("service_name", flat=True)
        .distinct()
    )


def imported_conversations(*, keys: Collection[str]) -> list[Conversation]:
    """The imported conversations of these keys, with their agent and the start of their first user message."""
    first_question = Message.objects.filter(conversation=OuterRef("pk"), role=Message.Role.USER).order_by("seq")
    return list(
        Conversation.objects.filter(source=Conversation.Source.TRACE, trace_key__in=list(keys))
        .select_related("agent")
        .annotate(first_question=Subquery(first_question.annotate(
            start=Substr("content", 1, FIRST_QUESTION_CHARS)
        ).values("start")[:1]))
        .order_by("trace_service", "pk")
    )


@dataclass(frozen=True)
class TouchedTrace:
    """A trace of a conversation with spans newer than a given one: how many of its spans are older (`old`) and
    newer (`new`), when it began and when its newer spans began."""

    trace_id: str
    service_name: str
    old: int
    new: int
    first_ns: int
    first_new_ns: int


def trace_conversation_mark(*, key: str) -> tuple[int, int]:
    """How many spans the conversation key has, and the newest one's id (0 for none)."""
    row = TraceSpan.objects.filter(conversation_key=key).aggregate(total=Count("id"), newest=Max("id"))
    return row["total"], row["newest"] or 0


def trace_conversation_touched(*, key: str, after: int) -> list[TouchedTrace]:
    """The traces (by service) of the conversation key that have spans newer than span id `after`, in one query
    that reads only their spans."""
    newer = Q(pk__gt=after)
    rows = (
        TraceSpan.objects.filter(
            conversation_key=key,
            trace_id__in=TraceSpan.objects.filter(newer, conversation_key=key).values("trace_id"),
        )
        .order_by()
        .values("trace_id", "service_name")
        .annotate(old=Count("id", filter=~newer), new=Count("id", filter=newer), first_ns=Min("start_ns"),
                  first_new_ns=Min("start_ns", filter=newer))
        .order_by("first_ns", "trace_id", "service_name")
    )
    return [TouchedTrace(**row) for row in rows]


def spans_of(*, keys: Collection[str], services: Mapping[str, Collection[str]]) -> dict[str, list[SpanRecord]]:
    """In one query, the spans of each of `keys` (all its services), and of each key of `services` only those of the
    services named: what the traces page maps to say why they are in no conversation."""
    wanted = Q(conversation_key__in=list(keys))
    for key, names in services.items():
        wanted |= Q(conversation_key=key, service_name__in=list(names))
    found: dict[str, list[SpanRecord]] = {}
    if not keys and not services:
        return found
    for row in TraceSpan.objects.filter(wanted).order_by("start_ns", "id"):
        found.setdefault(row.conversation_key, []).append(_record(row))
    return found


class _Without(Func):
    """A JSON object without one of its keys, computed where it is stored (SQLite and PostgreSQL)."""

    output_field = JSONField()

    def __init__(self, expression: Any, key: str) -> None:
        super().__init__(expression)
        self.key = key

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, tuple]:
        sql, params = compiler.compile(self.source_expressions[0])
        return f"JSON_REMOVE({sql}, %s)", (*params, f'$."{self.key}"')

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, tuple]:
        sql, params = compiler.compile(self.source_expressions[0])
        return f"({sql} - %s)", (*params, self.key)


# The one attribute whose value repeats the conversation so far: left stored until the mapping reads it.
_HISTORY = "gen_ai.input.messages"
_TAIL_CHARS = 64  # enough of a value's end to see the receiver's cut marker in it, however it was cut


def trace_conversation_spans(*, key: str, trace_ids: Collection[str] | None = None) -> list[SpanRecord]:
    """The conversation's spans by start time (only those of `trace_ids`, when given); of spans starting at once, a
    parent before its children. Each model call's history (`gen_ai.input.messages`) is read from the database only if
    the mapping asks for it — the last call of each turn's —, so a span arriving reads the rest of its conversation
    once, not every history in it."""
    rows = TraceSpan.objects.filter(conversation_key=key)
    if trace_ids is not None:
        rows = rows.filter(trace_id__in=list(trace_ids))
    rows = (
        rows
        .defer("attributes")
        .annotate(rest=_Without(F("attributes"), _HISTORY),
                  history_tail=Right(KeyTextTransform(_HISTORY, "attributes"), _TAIL_CHARS))
        .order_by("start_ns", "id")
    )
    records = [_record(row, _history_left_stored(row)) for row in rows]
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


def _history_left_stored(row: Any) -> dict[str, Any]:
    # `row` is a TraceSpan annotated with `rest` and `history_tail` (trace_conversation_spans).
    attributes = dict(row.rest)
    if row.history_tail is not None:
        pk = row.pk
        attributes[_HISTORY] = StoredValue(
            load=lambda: TraceSpan.objects.values_list("attributes", flat=True).get(pk=pk).get(_HISTORY),
            cut=TRUNCATED in row.history_tail,
        )
    return attributes


def _record(row: TraceSpan, attributes: dict[str, Any] | None = None) -> SpanRecord:
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
        attributes=row.attributes if attributes is None else attributes,
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
