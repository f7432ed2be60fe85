"""The conversation browser's seam. The host lists conversations (`views.conversations`) and opens each one in the
chat; an installed app may register a page of its own that opens a conversation instead — the harness registers its
transcript page, which carries the record and extract panel. The host never knows which app that is: with none
registered, the browser is whole and its rows open the chat."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

_conversation_page: dict[str, str] = {}


def conversation_page_register(*, url_name: str) -> None:
    """Rows of the conversation list open `url_name`, reversed with the conversation's `conversation_id`. One app
    owns that page: a second, different registration is a configuration error, not a silent override."""
    registered = _conversation_page.setdefault("url_name", url_name)
    if registered != url_name:
        raise ImproperlyConfigured(
            f"The conversation page is already {registered!r}; {url_name!r} cannot take it over. "
            "Install only one app that opens conversations from the conversation list."
        )


def conversation_page_url(*, conversation_id: int) -> str:
    """Where the conversation list opens a conversation: the registered page, else the chat."""
    if (url_name := _conversation_page.get("url_name")) is not None:
        return reverse(url_name, kwargs={"conversation_id": conversation_id})
    return conversation_chat_url(conversation_id=conversation_id)


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
