"""How the transcript partials (agenthost/templates/agenthost/transcript/) show a call's arguments and result, and the
conversation page its state."""

from __future__ import annotations

import json
from typing import Any

from django import template

from common.durations import format_ms
from common.inputs import json_loads, printable_json

register = template.Library()


@register.filter
def as_json(value: Any) -> str:
    """A call's arguments or a state value as indented JSON: a string keeps its quotes, so "42" and 42 differ."""
    return printable_json(value, indent=2)


@register.filter
def readable_result(text: str | None) -> str:
    """A tool result: indented when it is a JSON object or list, as it was otherwise."""
    # A tool's result is any text: an integer of 5,000 digits made json.loads raise ValueError, and an escaped lone
    # surrogate made the page unencodable (both a 500).
    try:
        value = json_loads(text or "")
    except json.JSONDecodeError:
        return text or ""
    if not isinstance(value, dict | list):
        return text or ""
    try:
        return printable_json(value, indent=2)
    except TypeError:
        return text or ""


@register.filter
def latency(value: float | None) -> str:
    return format_ms(value)
