"""Panels other apps add to the conversation page. The page is this app's; an app that sits above it (traces, whose
bind form belongs on the page of a conversation it imported) registers a panel here instead of this app's template
naming the other's URLs, so the page holds to the same directions as the imports (decision 0040)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest

from agenthost.seams import Conversation

PanelContext = Callable[[HttpRequest, Conversation], dict[str, Any] | None]


@dataclass(frozen=True)
class ConversationPanel:
    template_name: str
    context: PanelContext


_panels: dict[str, ConversationPanel] = {}


def conversation_panel_register(*, template_name: str, context: PanelContext) -> None:
    """Shows `template_name` on the conversation page, given `panel` (what `context` returns for the request and the
    conversation) — not shown when that is None. Registering the same template again replaces it (a second ready())."""
    _panels[template_name] = ConversationPanel(template_name=template_name, context=context)


def conversation_panels(*, request: HttpRequest, conversation: Conversation) -> list[dict[str, Any]]:
    """The panels to show, in the order they were registered."""
    shown = []
    for panel in _panels.values():
        context = panel.context(request, conversation)
        if context is not None:
            shown.append({"template_name": panel.template_name, "panel": context})
    return shown
