from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from agenthost.document import MAX_STEPS_MESSAGE, TEMPERATURE_MESSAGE
from agenthost.models import Agent, Conversation, McpToolList, Message, StateChange
from agenthost.runtimes.process import PROCESS_FIELDS
from agenthost.validation import agent_problems, agent_shape_problems
from common import admin_fields
from common.admin_ids import StrictIdsAdminMixin


class PrettyJSONWidget(admin_fields.PrettyJSONWidget):
    """Sized to its content."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs={"class": "vLargeTextField", "spellcheck": "false", **(attrs or {})})

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        text = context["widget"]["value"] or ""
        lines = text.count("\n") + 1
        context["widget"]["attrs"]["rows"] = min(max(lines + 1, 4), 40)
        context["widget"]["attrs"]["style"] = "font-family: monospace; width: 100%;"
        return context


# Every JSON column is edited as text through the shared safe field (depth and NaN/Infinity refused on the field).
JSON_FIELD_OVERRIDES: dict[type[models.Field], dict[str, Any]] = {
    models.JSONField: {"form_class": admin_fields.SafeJSONField, "widget": PrettyJSONWidget}
}


class AgentAdminForm(forms.ModelForm):
    """Reads the agent's fields as the model's columns do; its shape and limits are the agent document's
    (agenthost/document.py, checked by agent_shape_problems), its meaning agent_problems'."""

    # Without a bound of the column's own (a PositiveIntegerField would add one of 0): the document's is the bound.
    temperature = forms.FloatField(
        required=False, help_text=Agent._meta.get_field("temperature").help_text,
        error_messages={"invalid": TEMPERATURE_MESSAGE},
    )
    max_steps = forms.IntegerField(
        required=False, help_text=Agent._meta.get_field("max_steps").help_text,
        error_messages={"invalid": MAX_STEPS_MESSAGE},
    )

    class Meta:
        model = Agent
        fields = (
            "name", "description", "runtime", "entry", "deps", "outside_effects", "instruction", "provider", "model",
            "temperature", "max_steps", "functions", "rules", "sub_agents",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "runtime" in self.fields:
            # Left out (a form written before runtimes existed): agenttest's own loop, as before.
            self.fields["runtime"].required = False

    def clean_runtime(self) -> str:
        return self.cleaned_data.get("runtime") or Agent.Runtime.NATIVE

    def clean_outside_effects(self) -> Any:
        # Left empty: no tool declared, not a null the column cannot hold.
        value = self.cleaned_data.get("outside_effects")
        return {} if value in (None, "") else value

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        # Fields shown read-only (an agent whose runtime is the team's code) are not in the form: as stored.
        values = {
            field: cleaned[field] if field in self.fields else getattr(self.instance, field)
            for field in (
                "name", "instruction", "provider", "model", "functions", "rules", "runtime", "entry", "outside_effects",
                "deps",
            )
            if field in cleaned or field not in self.fields
        }
        # A process agent's program is set from its file or the API, never in this form: as stored.
        process = {field: getattr(self.instance, field) for field in PROCESS_FIELDS}
        numbers: dict[str, Any] = {field: cleaned[field] for field in ("temperature", "max_steps") if field in cleaned}
        # Fields that already failed their own validation are missing here: the shape of the others is checked, and
        # the meaning only when all are present.
        problems = agent_shape_problems({**values, **numbers}, partial=True)
        if not problems and len(values) == 10:
            subs = cleaned.get("sub_agents") if "sub_agents" in self.fields else self.instance.sub_agents.all()
            sub_agents = [agent.name for agent in subs or []]
            problems = agent_problems(**values, **process, sub_agents=sub_agents, instruction_required=True)
        for field, messages in problems.items():
            self.add_error(field if field in self.fields else None, messages)
        return cleaned


@admin.register(Agent)
class AgentAdmin(StrictIdsAdminMixin, admin.ModelAdmin):
    form = AgentAdminForm
    list_display = ("name", "runtime", "provider", "model", "temperature", "updated_at")
    list_filter = ("provider", "runtime")
    search_fields = ("name", "description", "instruction")
    filter_horizontal = ("sub_agents",)
    formfield_overrides = JSON_FIELD_OVERRIDES
    readonly_fields = ("created_at", "updated_at", *PROCESS_FIELDS)
    fieldsets = (
        (None, {"fields": ("name", "description", "runtime", "entry", "deps", "outside_effects", "instruction")}),
        ("Process (from the agent's file)", {"fields": PROCESS_FIELDS}),
        ("Model", {"fields": ("provider", "model", "temperature", "max_steps")}),
        ("Tools and routing", {"fields": ("functions", "rules", "sub_agents")}),
        ("History", {"fields": ("created_at", "updated_at")}),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> tuple[str, ...]:
        if obj is not None and obj.runtime != Agent.Runtime.NATIVE:
            # The team's code defines them (its entry point): there is nothing here to edit, and an edit here would
            # be a second copy that runs nowhere.
            return (*self.readonly_fields, "runtime", "entry", "deps", "instruction", "functions", "rules",
                    "sub_agents")
        return self.readonly_fields


def _pretty_json(value: Any) -> SafeString | str:
    if value is None:
        return "—"
    return format_html("<pre style=\"margin: 0; white-space: pre-wrap;\">{}</pre>", json.dumps(value, indent=2))


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MessageInline(ReadOnlyInline):
    model = Message
    fields = (
        "seq", "turn", "role", "agent", "content", "function_name", "pretty_arguments", "outcome", "trigger", "model",
        "input_tokens", "output_tokens", "latency_ms",
    )
    readonly_fields = fields

    @admin.display(description="arguments")
    def pretty_arguments(self, message: Message) -> SafeString | str:
        return _pretty_json(message.arguments)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("agent")


class StateChangeInline(ReadOnlyInline):
    model = StateChange
    fields = ("key", "pretty_value", "message", "created_at")
    readonly_fields = fields

    @admin.display(description="value")
    def pretty_value(self, change: StateChange) -> SafeString | str:
        return _pretty_json(change.value)

    def get_queryset(self, request: HttpRequest) -> QuerySet[StateChange]:
        return super().get_queryset(request).select_related("message")


@admin.register(Conversation)
class ConversationAdmin(StrictIdsAdminMixin, admin.ModelAdmin):
    list_display = ("id", "title", "agent", "owner", "turn_count", "created_at")
    list_filter = ("agent",)
    list_select_related = ("agent", "owner")
    search_fields = ("title", "tags")
    date_hierarchy = "created_at"
    fields = ("title", "tags", "agent", "current_agent", "owner", "turn_count", "created_at", "updated_at")
    readonly_fields = ("agent", "current_agent", "owner", "turn_count", "created_at", "updated_at")
    formfield_overrides = JSON_FIELD_OVERRIDES
    inlines = (MessageInline, StateChangeInline)

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A conversation begins through the conversation service (initial state, start-up rules), not a bare row.
        return False


@admin.register(McpToolList)
class McpToolListAdmin(StrictIdsAdminMixin, admin.ModelAdmin):
    """The cached tools/list of each MCP server: read here, refreshed by `agenttest mcp refresh` (or an agent save)."""

    list_display = ("server", "tool_count", "listed_at")
    fields = ("server", "listed_at", "tools")
    readonly_fields = ("server", "listed_at", "tools")

    @admin.display(description="tools")
    def tool_count(self, row: McpToolList) -> int:
        return len(row.tools or [])

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
