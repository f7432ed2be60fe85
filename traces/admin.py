"""Stored spans in the admin: read-only (they are what an exporter sent), deletable (a privacy request)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin_ids import StrictIdsAdminMixin
from traces.models import TraceSpan


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
