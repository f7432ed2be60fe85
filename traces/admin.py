"""Stored spans in the admin: read-only (they are what an exporter sent), deletable (a privacy request). Ingest-only
tokens: made here (the key shown once, on the page after saving), revoked with an action, never edited."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin_ids import StrictIdsAdminMixin
from traces.models import IngestToken, TraceSpan
from traces.services import ingest_token_create, ingest_token_revoke


def _pretty_json(value: Any) -> SafeString:
    return format_html('<pre style="white-space: pre-wrap; margin: 0;">{}</pre>', json.dumps(
        value, indent=2, ensure_ascii=False, default=str
    ))


@admin.register(TraceSpan)
class TraceSpanAdmin(StrictIdsAdminMixin, admin.ModelAdmin):
    list_display = ("name", "service_name", "conversation_key", "trace_id", "span_id", "status_code", "received_at")
    list_filter = ("service_name", "status_code", "kind")
    search_fields = ("=conversation_key", "=trace_id", "=span_id", "name")
    date_hierarchy = "received_at"
    ordering = ("-received_at", "-id")
    fields = (
        "conversation_key", "trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns",
        "service_name", "scope_name", "status_code", "status_message", "received_at", "attributes_json",
        "events_json", "resource_json",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="attributes")
    def attributes_json(self, span: TraceSpan) -> SafeString:
        return _pretty_json(span.attributes)

    @admin.display(description="events")
    def events_json(self, span: TraceSpan) -> SafeString:
        return _pretty_json(span.events)

    @admin.display(description="resource")
    def resource_json(self, span: TraceSpan) -> SafeString:
        return _pretty_json(span.resource)


@admin.register(IngestToken)
class IngestTokenAdmin(StrictIdsAdminMixin, admin.ModelAdmin):
    list_display = ("name", "service_name", "key_prefix", "created_at", "created_by", "revoked_at")
    list_filter = ("service_name",)
    search_fields = ("name", "service_name", "=key_prefix")
    actions = ("revoke_selected",)

    def get_fields(self, request: HttpRequest, obj: IngestToken | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("name", "service_name")
        return ("name", "service_name", "key_prefix", "created_at", "created_by", "revoked_at")

    def get_readonly_fields(self, request: HttpRequest, obj: IngestToken | None = None) -> tuple[str, ...]:
        # A token is never edited: what it may post is what it was made for; another scope is another token.
        return () if obj is None else self.get_fields(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: IngestToken, form: Any, change: bool) -> None:
        # The admin's user is signed in; the check is what tells the checker it is no AnonymousUser.
        user = request.user if request.user.is_authenticated else None
        issued = ingest_token_create(name=obj.name, service_name=obj.service_name, created_by=user)
        obj.pk = issued.token.pk
        obj.refresh_from_db()
        messages.warning(
            request,
            f"The key of ingest token {obj.name!r}, shown this once (only its hash is kept): {issued.key} — set it "
            "as the exporter's header: OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<key>",
        )

    @admin.action(description="Revoke selected tokens (their exporters get 401 from now on)")
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[IngestToken]) -> None:
        tokens = list(queryset.filter(revoked_at__isnull=True))
        for token in tokens:
            ingest_token_revoke(token=token)
        self.message_user(request, f"Revoked {len(tokens)} ingest token(s).", messages.SUCCESS)
