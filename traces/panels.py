"""The traces app's panel on the conversation page (the recording app's): where an imported conversation came from,
and the form that binds it to another agent — a trace's names may point at the wrong one. For staff only, as the
traces pages are."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from agenthost.seams import Agent, Conversation

SOURCE_PANEL = "traces/_conversation_source.html"


def source_panel_context(request: HttpRequest, conversation: Conversation) -> dict[str, Any] | None:
    if not (request.user.is_staff and conversation.source == Conversation.Source.TRACE):
        return None
    return {"agents": Agent.objects.order_by("name")}
