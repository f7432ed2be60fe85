"""Template helpers for the conversation page's state panel."""

from __future__ import annotations

from typing import Any

from django import template

from common.inputs import printable_json

register = template.Library()


@register.filter
def as_json(value: Any) -> str:
    """A state value as indented JSON: a string keeps its quotes, so "42" and 42 differ."""
    return printable_json(value, indent=2)
