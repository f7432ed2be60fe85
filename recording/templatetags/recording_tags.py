"""Template helpers for the conversation pages."""

from __future__ import annotations

import json
from typing import Any

from django import template

register = template.Library()


@register.filter
def as_json(value: Any) -> str:
    """A JSON value (arguments, a state value) as indented JSON: a string keeps its quotes, so "42" and 42 differ."""
    return json.dumps(value, indent=2, ensure_ascii=False)


@register.filter
def readable_result(text: str | None) -> str:
    """A tool result: indented when it is a JSON object or list, as it was otherwise."""
    try:
        value = json.loads(text or "")
    except json.JSONDecodeError:
        return text or ""
    return json.dumps(value, indent=2, ensure_ascii=False) if isinstance(value, dict | list) else text or ""
