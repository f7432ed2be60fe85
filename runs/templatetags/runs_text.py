"""Template filters of the run pages."""

from __future__ import annotations

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.filter
def breakable_key(key: str) -> SafeString:
    """A provider:model key that a narrow column wraps after its separators rather than inside a word."""
    text = escape(key)
    for separator in (":", "/"):
        text = text.replace(separator, f"{separator}<wbr>")
    return mark_safe(text)
