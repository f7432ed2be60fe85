"""Writes of the traces app: a request's spans stored in one transaction (deduplicated, keyed to their conversation),
the retention sweep, and ingest-only tokens made and revoked."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Count, F, Max, Min, Q
from django.utils import timezone

from traces.models import INGEST_KEY_PREFIX, IngestToken, TraceSpan, ingest_key_hash
from traces.otlp import DecodedRequest, Limits, OtlpRefused, request_decode

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


def spans_sweep_expired(*, now: datetime | None = None, retention_days: int | None = None) -> int:
    """Deletes the spans of every conversation whose newest span was received more than the retention period ago
    (settings.AGENTTEST_TRACES_RETENTION_DAYS; 0 keeps them for ever): a conversation goes whole, never in part.
    Returns how many spans were deleted."""
    days = settings.AGENTTEST_TRACES_RETENTION_DAYS if retention_days is None else retention_days
    if days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=days)
    expired = list(
        TraceSpan.objects.order_by()
        .values("conversation_key")
        .annotate(last=Max("received_at"))
        .filter(last__lt=cutoff)
        .values_list("conversation_key", flat=True)
    )
    deleted = 0
    for start in range(0, len(expired), _BATCH):
        # received_at too: a span that arrived since the conversation was found expired stays.
        count, _ = TraceSpan.objects.filter(
            conversation_key__in=expired[start : start + _BATCH], received_at__lt=cutoff
        ).delete()
        deleted += count
    return deleted


@dataclass(frozen=True)
class IssuedToken:
    token: IngestToken
    key: str  # the only time the key exists outside the exporter's configuration


@transaction.atomic
def ingest_token_create(
    *, name: str, service_name: str = "", created_by: AbstractBaseUser | None = None
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
