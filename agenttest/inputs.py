"""Checks every way into agenttest shares for untrusted input: JSON nesting, non-finite numbers and ids.

Each returns a message (or a value) instead of raising deep inside a decoder, so callers can answer a 400 that names
the field before anything is stored.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Deeper than any agent, case or mock needs, far below where Python's recursive JSON decoding and encoding fail.
MAX_JSON_DEPTH = 64

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")
# ids are at most a signed 64-bit integer: every database agenttest runs on stores them so.
MAX_ID = 2**63 - 1
_ASCII_DIGITS = re.compile(r"[0-9]{1,19}")


def json_text_too_deep(text: str | bytes, *, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when JSON text nests arrays/objects more than `limit` deep. Scans the text without decoding it, so it
    cannot itself hit the recursion limit; brackets inside strings do not count."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _BRACKETS.finditer(_JSON_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def too_deep_path(value: Any, *, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The path of the first place a decoded value nests deeper than `limit`, or None. Iterative, never recursive."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth + 1 > limit:
                return path or "(top level)"
            children = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in children:
                stack.append((child, _join(path, key), depth + 1))
    return None


def nonfinite_path(value: Any) -> str | None:
    """The path of the first NaN or infinite number in a decoded value (e.g. "state_writes.total"), or None.
    JSON has no such numbers; Python's decoder accepts `NaN`, `Infinity` and `1e999` all the same."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return path or "(top level)"
        elif isinstance(item, dict):
            stack.extend((child, _join(path, key)) for key, child in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((child, _join(path, index)) for index, child in enumerate(item))
    return None


def json_value_problem(value: Any, *, limit: int = MAX_JSON_DEPTH) -> str | None:
    """One message for a decoded JSON value agenttest cannot store, naming where the problem is; None when fine."""
    deep = too_deep_path(value, limit=limit)
    if deep is not None:
        return f"nested more than {limit} levels deep at {deep}"
    bad = nonfinite_path(value)
    if bad is not None:
        return f"{bad}: numbers must be finite (NaN and Infinity are not JSON)" if bad != "(top level)" else (
            "numbers must be finite (NaN and Infinity are not JSON)"
        )
    return None


def parse_id(raw: Any) -> int | None:
    """A positive database id from a query string, form field or JSON value; None for anything else.

    Only ASCII digits count ("³" and "٣" are digits to Python's int() but not ids), booleans are not numbers, and an
    id beyond a 64-bit integer cannot exist."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str):
        text = raw.strip()
        if not _ASCII_DIGITS.fullmatch(text):
            return None
        value = int(text)
    else:
        return None
    return value if 0 < value <= MAX_ID else None


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


# PostgreSQL refuses NUL in any text it is sent, a filter's included; a lone surrogate is not Unicode at all.
_UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")


def text_is_storable(text: str) -> bool:
    """Whether `text` can be stored in, or compared with, a text column on every database agenttest runs on. No stored
    text holds such characters, so a filter that contains one matches nothing."""
    return not _UNSTORABLE_TEXT.search(text)
