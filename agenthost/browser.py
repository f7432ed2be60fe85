"""The conversation browser's seam. The host lists conversations (`views.conversations`) and shows each one on its
page (`views.conversation_page`): the transcript with its tool calls and the state timeline. Other apps add panels to
that page — the harness its record and extract form, the link back to the result a test conversation belongs to, an
imported conversation's source — by registering them here: the host never names them, and with none installed its
page is whole."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from django.urls import reverse

from agenthost.models import Conversation

PanelContext = Callable[[HttpRequest, Conversation], dict[str, Any] | None]


@dataclass(frozen=True)
class ConversationPanel:
    template_name: str
    context: PanelContext
    order: int
    stylesheet: str


_panels: dict[str, ConversationPanel] = {}


def conversation_panel_register(
    *, template_name: str, context: PanelContext, order: int = 0, stylesheet: str = ""
) -> None:
    """Shows `template_name` on the conversation page, given `panel` (what `context` returns for the request and the
    conversation) — not shown when that is None. Panels go by ascending `order`, then as registered; `stylesheet` (a
    static path) is linked in the page's head. Registering the same template again replaces it (a second ready())."""
    _panels[template_name] = ConversationPanel(
        template_name=template_name, context=context, order=order, stylesheet=stylesheet
    )


def conversation_panels(*, request: HttpRequest, conversation: Conversation) -> list[dict[str, Any]]:
    """The panels to show, in order: each one's template, its `panel` context and its stylesheet."""
    shown = []
    for panel in sorted(_panels.values(), key=lambda panel: panel.order):
        context = panel.context(request, conversation)
        if context is not None:
            shown.append({"template_name": panel.template_name, "panel": context, "stylesheet": panel.stylesheet})
    return shown


def conversation_page_url(*, conversation_id: int) -> str:
    """The conversation's page."""
    return reverse("agents:conversation", kwargs={"conversation_id": conversation_id})


# The host's pages another app links to, by these helpers rather than by the host's URL names (decision 0040).


def conversation_chat_url(*, conversation_id: int) -> str:
    """The chat, opened on the conversation."""
    return f"{reverse('agents:chat')}?conversation={conversation_id}"


def conversation_list_url() -> str:
    """The conversation list."""
    return reverse("agents:conversations")


def conversation_admin_url(*, conversation_id: int) -> str:
    """The conversation's page in the admin."""
    return reverse("admin:agenthost_conversation_change", args=[conversation_id])


# An id no conversation has yet: reversed in its place, then swapped for the placeholder.
_ID_MARKER = 2_147_483_646


def conversation_page_url_pattern() -> str:
    """conversation_page_url with `{id}` where the id goes, for a page's script that learns the id later (the chat's
    "Conversation #N" link)."""
    return conversation_page_url(conversation_id=_ID_MARKER).replace(str(_ID_MARKER), "{id}")
