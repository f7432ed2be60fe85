"""Writes of the traces app: a request's spans stored in one transaction (deduplicated, keyed to their conversation),
the retention sweep, and ingest-only tokens made and revoked."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count, Exists, F, Max, Min, OuterRef, Q
from django.utils import timezone

from agenthost.seams import Conversation, Message
from cases.models import Case
from runs.models import CaseResult, CaseSnapshot
from traces.models import INGEST_KEY_PREFIX, IngestToken, TraceSpan, ingest_key_hash

if TYPE_CHECKING:
    # Imported where a request is decoded: every worker and command imports this module at start-up (the apps'
    # tasks), and protobuf with OpenTelemetry's messages cost each about 55 ms that only an ingest uses.
    from traces.otlp import DecodedRequest, Limits

_BATCH = 500


@dataclass(frozen=True)
class StoreReport:
    new: int = 0
    duplicate: int = 0  # already stored, or sent twice in the request: accepted, stored once
    rejected: int = 0
    rejection_message: str = ""
    conversations: tuple[str, ...] = ()  # the conversation keys of the spans accepted


def traces_ingest(
    *,
    body: bytes,
    content_type: str,
    content_encoding: str = "",
    kept: Callable[[str], bool] | None = None,
    limits: Limits | None = None,
    only_service: str = "",
) -> StoreReport:
    """One OTLP request body decoded and stored whole, or refused whole (traces.otlp.OtlpRefused) with nothing
    stored. With `only_service` (an ingest token's service), a request holding a span of another service is refused
    (403)."""
    from traces.otlp import OtlpRefused, request_decode

    decoded = request_decode(
        body=body, content_type=content_type, content_encoding=content_encoding, kept=kept, limits=limits
    )
    if only_service:
        others = sorted({span.record.service_name for span in decoded.spans} - {only_service})
        if others:
            raise OtlpRefused(
                403, f"this ingest token posts spans of service {only_service!r} only; the request has spans of "
                f"{', '.join(repr(name[:100]) for name in others[:3])}{' and more' if len(others) > 3 else ''}",
            )
    return spans_store(decoded=decoded)


@transaction.atomic
def spans_store(*, decoded: DecodedRequest) -> StoreReport:
    """The request's spans, each (trace id, span id) once: a span stored before, or twice in the request, counts as a
    duplicate and is accepted. A span that names no conversation joins the one another span of its trace names —
    stored before or in this request —, else its trace's own; spans stored under their trace id are moved to the
    conversation once a span of the trace names one."""
    seen: set[tuple[str, str]] = set()
    unique = []
    for span in decoded.spans:
        pair = (span.record.trace_id, span.record.span_id)
        if pair not in seen:
            seen.add(pair)
            unique.append(span)
    trace_ids = sorted({span.record.trace_id for span in unique})
    stored_keys: dict[str, str] = {}  # trace → the conversation a stored span of it names
    unnamed: set[str] = set()  # traces with spans stored under the trace's own id
    existing: set[tuple[str, str]] = set()
    own_key = Q(conversation_key=F("trace_id"))
    # In batches: SQLite takes a bounded number of parameters in one statement.
    for start in range(0, len(trace_ids), _BATCH):
        for trace_id, key, under_trace in (
            TraceSpan.objects.filter(trace_id__in=trace_ids[start : start + _BATCH])
            .order_by()
            .values("trace_id")
            .annotate(key=Min("conversation_key", filter=~own_key), under_trace=Count("id", filter=own_key))
            .values_list("trace_id", "key", "under_trace")
        ):
            if key:
                stored_keys[trace_id] = key
            if under_trace:
                unnamed.add(trace_id)
    for start in range(0, len(unique), _BATCH):
        batch = unique[start : start + _BATCH]
        existing.update(
            TraceSpan.objects.filter(
                trace_id__in={span.record.trace_id for span in batch},
                span_id__in={span.record.span_id for span in batch},
            ).values_list("trace_id", "span_id")
        )
    named: dict[str, str] = {}
    for span in unique:
        if span.conversation_id:
            named.setdefault(span.record.trace_id, span.conversation_id)
    trace_keys = {trace_id: stored_keys.get(trace_id) or named.get(trace_id) or trace_id for trace_id in trace_ids}
    now = timezone.now()
    rows = []
    for span in unique:
        record = span.record
        if (record.trace_id, record.span_id) in existing:
            continue
        rows.append(TraceSpan(
            trace_id=record.trace_id,
            span_id=record.span_id,
            parent_span_id=record.parent_span_id,
            name=record.name,
            start_ns=record.start_ns,
            end_ns=record.end_ns,
            service_name=record.service_name,
            scope_name=record.scope_name,
            kind=record.kind,
            status_code=record.status_code,
            status_message=record.status_message,
            attributes=record.attributes,
            resource=record.resource,
            events=[{"name": event.name, "time_ns": event.time_ns, "attributes": event.attributes}
                    for event in record.events],
            conversation_key=span.conversation_id or trace_keys[record.trace_id],
            received_at=now,
        ))
    # ignore_conflicts: a concurrent request storing the same span is a duplicate too, not an error.
    TraceSpan.objects.bulk_create(rows, batch_size=_BATCH, ignore_conflicts=True)
    for trace_id in unnamed:
        if trace_keys[trace_id] != trace_id:
            TraceSpan.objects.filter(conversation_key=trace_id, trace_id=trace_id).update(
                conversation_key=trace_keys[trace_id]
            )
    return StoreReport(
        new=len(rows),
        duplicate=len(decoded.spans) - len(rows),
        rejected=len(decoded.rejected),
        rejection_message=decoded.rejection_message(),
        conversations=tuple(sorted({span.conversation_id or trace_keys[span.record.trace_id] for span in unique})),
    )


DELETED_TRACE = "[deleted trace]"


@dataclass(frozen=True)
class PurgeReport:
    """Rows deleted: spans, imported conversations and their messages, drafts recorded from them and never enabled
    (with their recordings); and enabled cases kept — a person reviewed them — without their trace ids or key."""

    spans: int = 0
    conversations: int = 0
    messages: int = 0
    drafts: int = 0
    cases_kept: int = 0

    def __str__(self) -> str:
        return (
            f"deleted {self.spans} span(s), {self.conversations} imported conversation(s) with {self.messages} "
            f"message(s), {self.drafts} draft(s) never enabled; {self.cases_kept} enabled case(s) kept without their "
            "trace ids"
        )


def spans_sweep_expired(*, now: datetime | None = None, retention_days: int | None = None) -> PurgeReport:
    """Deletes everything held of each conversation whose newest span was received more than the retention period ago
    (settings.AGENTTEST_TRACES_RETENTION_DAYS; 0 keeps them for ever) — a conversation goes whole, never in part —,
    and the imported conversations whose spans are gone (deleted before this sweep took their conversations too) and
    that were not updated within the period."""
    days = settings.AGENTTEST_TRACES_RETENTION_DAYS if retention_days is None else retention_days
    if days <= 0:
        return PurgeReport()
    cutoff = (now or timezone.now()) - timedelta(days=days)
    expired = list(
        TraceSpan.objects.order_by()
        .values("conversation_key")
        .annotate(last=Max("received_at"))
        .filter(last__lt=cutoff)
        .values_list("conversation_key", flat=True)
    )
    orphans = list(
        Conversation.objects.filter(source=Conversation.Source.TRACE, updated_at__lt=cutoff)
        .filter(~Exists(TraceSpan.objects.filter(conversation_key=OuterRef("trace_key"))))
        .values_list("pk", flat=True)
    )
    return traces_purge(keys=expired, conversation_ids=orphans, received_before=cutoff)


@transaction.atomic
def traces_purge(
    *,
    keys: Collection[str] = (),
    service: str = "",
    conversation_ids: Collection[int] = (),
    received_before: datetime | None = None,
) -> PurgeReport:
    """Everything held of the conversations `keys`, of every conversation of `service`, and of the imported
    conversations `conversation_ids`: their spans, the imported conversations and their messages, the drafts
    recorded from them that were never enabled; an enabled case is kept, its trace ids and key replaced by
    DELETED_TRACE. With `received_before` (the sweep), a span received since stays, and so does its conversation."""
    keys = set(keys)
    if service:
        keys.update(TraceSpan.objects.filter(service_name=service).order_by().values_list(
            "conversation_key", flat=True
        ).distinct())
    ordered = sorted(keys)
    trace_ids: set[str] = set()
    spans = 0
    for start in range(0, len(ordered), _BATCH):
        chunk = TraceSpan.objects.filter(conversation_key__in=ordered[start : start + _BATCH])
        if received_before is not None:
            chunk = chunk.filter(received_at__lt=received_before)
        trace_ids.update(chunk.order_by().values_list("trace_id", flat=True).distinct())
        spans += chunk.delete()[0]
    # A conversation with a span left (one received while the sweep ran) is not expired after all.
    kept = set(TraceSpan.objects.filter(conversation_key__in=ordered).order_by().values_list(
        "conversation_key", flat=True
    ).distinct()) if received_before is not None else set()
    gone = keys - kept
    imported = Conversation.objects.filter(source=Conversation.Source.TRACE)
    chosen = Q(pk__in=list(conversation_ids))
    if service:
        chosen |= Q(trace_service=service)
    ids: set[int] = set(imported.filter(chosen).values_list("pk", flat=True))
    # Imported under its conversation key, or under its trace id while no span named the conversation yet.
    named = sorted(gone | (trace_ids - kept))
    for start in range(0, len(named), _BATCH):
        ids.update(imported.filter(trace_key__in=named[start : start + _BATCH]).values_list("pk", flat=True))
    conversations = Conversation.objects.filter(pk__in=sorted(ids))
    for conversation in conversations.only("trace_key", "trace_ids"):
        trace_ids.update(conversation.trace_ids)
        gone.add(conversation.trace_key)
    made = Case.objects.filter(source_conversation__in=conversations)
    unreviewed = made.filter(enabled=False)
    # What a draft tested is also in the content-addressed snapshot its recording run planned (and any run of it
    # since): the customer's messages and tool results, which outlive the draft unless they go with it.
    tested = {*unreviewed.values_list("content_hash", flat=True),
              *CaseResult.objects.filter(case__in=unreviewed).values_list("case_hash", flat=True)} - {""}
    drafts = unreviewed.delete()[1].get(Case._meta.label, 0)
    reviewed = list(made.filter(enabled=True))
    for case in reviewed:
        case.description = _scrubbed(case.description, gone | trace_ids)
        case.warnings = [_scrubbed(warning, gone | trace_ids) if isinstance(warning, str) else warning
                         for warning in case.warnings]
        case.source_conversation = None
        case.save(update_fields=["description", "warnings", "source_conversation", "updated_at"])
    _, deleted = conversations.delete()
    # A snapshot a remaining case still tests, or a remaining case's result names, is that case's (a person kept it).
    CaseSnapshot.objects.filter(content_hash__in=tested).exclude(
        content_hash__in=Case.objects.filter(content_hash__in=tested).values("content_hash")
    ).exclude(
        content_hash__in=CaseResult.objects.filter(case_hash__in=tested, case__isnull=False).values("case_hash")
    ).delete()
    return PurgeReport(
        spans=spans,
        conversations=deleted.get(Conversation._meta.label, 0),
        messages=deleted.get(Message._meta.label, 0),
        drafts=drafts,
        cases_kept=len(reviewed),
    )


def _scrubbed(text: str, identifiers: set[str]) -> str:
    for identifier in sorted((item for item in identifiers if item), key=len, reverse=True):
        text = text.replace(identifier, DELETED_TRACE)
    return text


@dataclass(frozen=True)
class IssuedToken:
    token: IngestToken
    key: str  # the only time the key exists outside the exporter's configuration


@transaction.atomic
def ingest_token_create(
    *, name: str, service_name: str = "", created_by: User | None = None
) -> IssuedToken:
    """A new ingest-only token; its key is returned here once and never stored."""
    name, service_name = name.strip(), service_name.strip()
    if not name:
        raise ValueError("name: say who holds the token, e.g. the service's production deployment")
    for field, value in (("name", name), ("service_name", service_name)):
        if len(value) > 200:
            raise ValueError(f"{field}: at most 200 characters, got {len(value)}")
    key = INGEST_KEY_PREFIX + secrets.token_urlsafe(32)
    token = IngestToken.objects.create(
        name=name, service_name=service_name, key_hash=ingest_key_hash(key),
        key_prefix=key[: len(INGEST_KEY_PREFIX) + 6], created_by=created_by,
    )
    return IssuedToken(token=token, key=key)


@transaction.atomic
def ingest_token_revoke(*, token: IngestToken) -> IngestToken:
    """From now on the token's key is refused (401); revoking twice keeps the first time."""
    token = IngestToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token
