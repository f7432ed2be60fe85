"""Template filters of the run pages."""

from __future__ import annotations

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.filter
def breakable_key(key: str) -> SafeString:
    """A provider:model key that a narrow column wraps after its separators rather than inside a word."""
    text: str = escape(key)
    for separator in (":", "/"):
        text = text.replace(separator, f"{separator}<wbr>")
    return mark_safe(text)


# A token this long or longer may break anywhere (overflow-wrap); a shorter one never breaks inside.
LONG_TOKEN_CHARS = 40
_TOKENS = re.compile(r"\S+")


@register.filter
def token_wrapped(text: str) -> SafeString:
    """JSON (or any text) that a narrow column wraps between its tokens — at whitespace — and never inside a token
    short enough to fit a line: each such run of non-space characters is kept whole (a browser would otherwise also
    break after a hyphen, inside `"util-email-handle_email_sender"`). A longer token may break anywhere."""

    def kept(match: re.Match[str]) -> str:
        token = escape(match.group(0))
        return token if len(match.group(0)) >= LONG_TOKEN_CHARS else f'<span class="tok">{token}</span>'

    return mark_safe(_TOKENS.sub(kept, str(text)))
