"""Runs and results in the admin, read-only: runs are created, cancelled and deleted through the services (API,
pages, run_suite), which guard every transition — an admin edit or delete would bypass them."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin_ids import StrictIdsAdminMixin
from runs.models import CaseResult, Run


def _pretty_json(value: Any) -> SafeString:
    return format_html('<pre style="white-space: pre-wrap; margin: 0;">{}</pre>', json.dumps(
        value, indent=2, ensure_ascii=False, default=str
    ))


class ReadOnlyAdminMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CaseResultInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = CaseResult
    fields = (
        "position", "case_name", "model", "trial", "status", "reason", "duration_ms", "tokens", "cost", "conversation",
    )
    readonly_fields = fields
    ordering = ("position", "id")
    show_change_link = True
    extra = 0

    @admin.display(description="tokens")
    def tokens(self, result: CaseResult) -> int:
        return result.total_tokens


@admin.register(Run)
class RunAdmin(StrictIdsAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "suite", "status", "models", "counts", "triggered_by", "created_at")
    list_filter = ("status", "suite")
    list_select_related = ("suite", "triggered_by")
    date_hierarchy = "created_at"
    inlines = (CaseResultInline,)
    fields = (
        "suite", "status", "reason", "models", "case_filter", "mode", "trials", "budget_tokens", "budget_cost",
        "counts", "current", "cancel_requested", "triggered_by", "created_at", "started_at", "finished_at", "snapshot",
        "blessed_at", "blessed_by",
    )
    readonly_fields = fields

    @admin.display(description="models")
    def models(self, run: Run) -> str:
        return ", ".join(run.model_keys)

    @admin.display(description="passed / failed / error / cancelled of total")
    def counts(self, run: Run) -> str:
        return f"{run.passed} / {run.failed} / {run.errored} / {run.cancelled} of {run.total}"

    @admin.display(description="agent snapshot")
    def snapshot(self, run: Run) -> SafeString:
        return _pretty_json(run.agent_snapshot)


@admin.register(CaseResult)
class CaseResultAdmin(StrictIdsAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "run", "case_name", "model", "status", "duration_ms", "created_at")
    list_filter = ("status", "model")
    list_select_related = ("run", "run__suite")
    search_fields = ("case_name", "reason")
    fields = (
        "run", "case", "case_name", "case_changed", "model", "trial", "position", "status", "reason", "conversation",
        "duration_ms", "model_latency_ms", "input_tokens", "output_tokens", "cost", "created_at", "assertions_json",
        "tool_calls_json", "transcript_json", "final_state_json", "final_tables_json",
    )
    readonly_fields = fields

    @admin.display(description="case changed since")
    def case_changed(self, result: CaseResult) -> str:
        if not result.case_hash or result.case_id is None:
            return "unknown (ran before cases had a content hash)" if result.case_id else "the case was deleted"
        return "yes: this result tells of an earlier version of the case" if result.case_changed_since else "no"

    @admin.display(description="assertions")
    def assertions_json(self, result: CaseResult) -> SafeString:
        return _pretty_json(result.assertions)

    @admin.display(description="tool calls")
    def tool_calls_json(self, result: CaseResult) -> SafeString:
        return _pretty_json(result.tool_calls)

    @admin.display(description="transcript")
    def transcript_json(self, result: CaseResult) -> SafeString:
        return _pretty_json(result.transcript)

    @admin.display(description="final state")
    def final_state_json(self, result: CaseResult) -> SafeString:
        return _pretty_json(result.final_state)

    @admin.display(description="tables at the end")
    def final_tables_json(self, result: CaseResult) -> SafeString:
        return _pretty_json(result.final_tables)
