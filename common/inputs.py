"""Checks every way into agenttest shares for untrusted input: JSON nesting, non-finite numbers and ids.

Each returns a message (or a value) instead of raising deep inside a decoder, so callers can answer a 400 that names
the field before anything is stored.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Iterable
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


_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]', re.DOTALL)


def too_deep_text_where(text: str, *, limit: int = MAX_JSON_DEPTH) -> list[str | int] | None:
    """Where JSON text first nests arrays/objects more than `limit` deep, as the keys and indices leading to the
    container that is one too deep (`["description", "a", 0, 0, …]`; `[]` when the text itself is that container),
    or None. Scans tokens without decoding the text, so it cannot hit the recursion limit; meant for text
    json_text_too_deep has found too deep, whose decoding would."""
    # One frame per open container: [is an object, its current key or index, a key comes next].
    frames: list[list[Any]] = []
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            if len(frames) >= limit:
                return [frame[1] for frame in frames]
            frames.append([token == "{", None if token == "{" else 0, token == "{"])
        elif token in "]}":
            if frames:
                frames.pop()
        elif not frames:
            continue
        elif token == ",":
            frame = frames[-1]
            if frame[0]:
                frame[2] = True
            elif isinstance(frame[1], int):
                frame[1] += 1
        elif token == ":":
            frames[-1][2] = False
        elif frames[-1][0] and frames[-1][2]:
            try:
                frames[-1][1] = json.loads(token)
            except ValueError:
                frames[-1][1] = token[1:-1]
    return None


def path_of(parts: Iterable[str | int]) -> str:
    """Keys and indices as a path, e.g. `functions[0].description`, in the form every message uses."""
    path = ""
    for part in parts:
        path = path_join(path, part)
    return path


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
                stack.append((child, path_join(path, key), depth + 1))
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
            stack.extend((child, path_join(path, key)) for key, child in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((child, path_join(path, index)) for index, child in enumerate(item))
    return None


# The largest integer (in magnitude) agenttest stores in JSON: SQLite's JSON functions read a larger one as a
# float, JavaScript clients lose its digits, and a database id or a token count never needs more.
MAX_JSON_INT = 2**63 - 1
# A JSON integer of more digits than this is never given to int(), which refuses text of more than 4,300 digits
# (Python's default limit) with a ValueError that callers catching only json.JSONDecodeError turned into a 500.
_MAX_INT_DIGITS = 4300


class TooLongInteger:
    """Stands, in a value decoded by `json_loads`, for an integer whose text was too long to convert; every check
    here reports it as out of range. Never stored: json.dumps refuses it."""

    __slots__ = ("digits",)

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))

    def __repr__(self) -> str:
        return f"<integer of {self.digits} digits>"


def _parse_int(text: str) -> int | TooLongInteger:
    return TooLongInteger(text) if len(text.lstrip("-")) > _MAX_INT_DIGITS else int(text)


class SafeJSONDecoder(json.JSONDecoder):
    """Python's decoder, except that an integer too long for int() decodes to a TooLongInteger rather than raising
    ValueError: so decoding untrusted text raises only json.JSONDecodeError (once json_text_too_deep has ruled out
    nesting deep enough for RecursionError). NaN, Infinity and 1e999 still decode to floats, for nonfinite_path."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("parse_int", _parse_int)
        super().__init__(**kwargs)


def json_loads(text: str | bytes) -> Any:
    """Decodes untrusted JSON text with SafeJSONDecoder; check the result with json_value_problem before using it."""
    return json.loads(text, cls=SafeJSONDecoder)


def int_out_of_range_path(value: Any, *, bound: int | None = MAX_JSON_INT) -> str | None:
    """The path of the first integer beyond ±`bound` (or too long to have been converted at all: the only ones
    reported when `bound` is None), or None."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, TooLongInteger) or (
            bound is not None and isinstance(item, int) and not isinstance(item, bool) and abs(item) > bound
        ):
            return path or "(top level)"
        if isinstance(item, dict):
            stack.extend((child, path_join(path, key)) for key, child in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((child, path_join(path, index)) for index, child in enumerate(item))
    return None


def unstorable_text_path(value: Any, *, nul: bool = True) -> str | None:
    """The path of the first string or object key holding a lone surrogate (Python decodes "\\ud800", but it is
    not Unicode: encoding it for the database or a page raises UnicodeEncodeError) or, with `nul`, a NUL (which
    PostgreSQL refuses in any text or jsonb), or None. A bad key is named by its parent's path."""
    pattern = UNSTORABLE_TEXT if nul else _SURROGATE
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if pattern.search(item):
                return path or "(top level)"
        elif isinstance(item, dict):
            for key in item:
                if isinstance(key, str) and pattern.search(key):
                    return path or "(top level)"
            stack.extend((child, path_join(path, key)) for key, child in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((child, path_join(path, index)) for index, child in enumerate(item))
    return None


NONFINITE_PROBLEM = "numbers must be finite (NaN and Infinity are not JSON)"
INT_RANGE_PROBLEM = f"integers must be between -{MAX_JSON_INT} and {MAX_JSON_INT}"
# Worded as every field validator words it (cases/validation/, agent validation), so a message reads the same
# whichever check met the text first.
UNICODE_PROBLEM = "must not contain a lone surrogate (\\ud800-\\udfff): it is not Unicode"
UNSTORABLE_MESSAGE = "must not contain NUL (\\u0000) or a lone surrogate (\\ud800-\\udfff)"


def json_value_issue(
    value: Any, *, limit: int = MAX_JSON_DEPTH, nul: bool = True, int_range: bool = True
) -> tuple[str, str] | None:
    """(path, message) for the first reason a decoded JSON value cannot be stored, or None when fine: nested
    deeper than `limit`, a non-finite number, an integer beyond ±MAX_JSON_INT (without `int_range`, only one too
    long to have been converted), a lone surrogate or (with `nul`) a NUL in a string or key. The path is
    "(top level)" for the value itself."""
    if (path := too_deep_path(value, limit=limit)) is not None:
        return path, f"nested more than {limit} levels deep"
    if (path := nonfinite_path(value)) is not None:
        return path, NONFINITE_PROBLEM
    if (path := int_out_of_range_path(value, bound=MAX_JSON_INT if int_range else None)) is not None:
        return path, INT_RANGE_PROBLEM
    if (path := unstorable_text_path(value, nul=nul)) is not None:
        return path, UNSTORABLE_MESSAGE if nul else UNICODE_PROBLEM
    return None


def json_value_problem(
    value: Any, *, limit: int = MAX_JSON_DEPTH, nul: bool = True, int_range: bool = True
) -> str | None:
    """One message for a decoded JSON value agenttest cannot store, naming where the problem is; None when fine.
    See json_value_issue for what is refused."""
    issue = json_value_issue(value, limit=limit, nul=nul, int_range=int_range)
    if issue is None:
        return None
    path, message = issue
    if message.startswith("nested"):
        return f"{message} at {path}"
    return message if path == "(top level)" else f"{path}: {message}"


def printable_json(value: Any, **kwargs: Any) -> str:
    """json.dumps for a page: non-ASCII text as is, unless the value holds a lone surrogate (stored before such text
    was refused, or escaped inside a tool result's text), which no page can be encoded with: then all of it escaped,
    so the page renders. Raises TypeError on a TooLongInteger, as on anything else JSON cannot write."""
    text = json.dumps(value, ensure_ascii=False, **kwargs)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, **kwargs)
    return text


# A whole number written as text: ASCII digits, an optional sign, no more digits than any column holds needs.
_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]{1,30}")
WHOLE_NUMBER_PROBLEM = "must be a whole number written with the digits 0-9, e.g. 3"
NUMBER_TEXT_PROBLEM = "must be a number written with the digits 0-9, e.g. 0.5"


def parse_whole_number(raw: Any) -> int | None:
    """The one way agenttest reads an integer from a JSON value, a query string or a form field; None for anything
    else. A JSON integer, or text of ASCII digits with an optional sign: "³" and "٣" are digits to Python's int()
    (which reads "٣" as 3), not to agenttest; booleans and fractions are not whole numbers."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and _WHOLE_NUMBER.fullmatch(text := raw.strip()):
        return int(text)
    return None


def whole_number_argument(text: str) -> int:
    """An argparse `type` reading a command-line integer as every API does (parse_whole_number): `--trials ٣` is
    refused, not read as 3."""
    value = parse_whole_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{WHOLE_NUMBER_PROBLEM}, got {text!r}")
    return value


def number_text_is_ascii(raw: Any) -> bool:
    """False for text float() or Decimal() would read with digits other than 0-9 ("٠٫٥", "１.５"): a number written
    as text is read as agenttest reads integers (parse_whole_number)."""
    return not isinstance(raw, str) or raw.isascii()


def parse_id(raw: Any) -> int | None:
    """A positive database id from a query string, form field or JSON value; None for anything else.

    Read by parse_whole_number, unsigned when written as text, and an id beyond a 64-bit integer cannot exist."""
    if isinstance(raw, str) and not _ASCII_DIGITS.fullmatch(raw.strip()):
        return None
    value = parse_whole_number(raw)
    return value if value is not None and 0 < value <= MAX_ID else None


def path_join(path: str, key: Any) -> str:
    """`path` one key or index further: `turns` and 0 → `turns[0]`, `turns[0]` and `mocks` → `turns[0].mocks`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    # A path ends up in an error message, which must itself be storable and printable: bad characters escaped.
    key = UNSTORABLE_TEXT.sub(lambda match: f"\\u{ord(match.group()):04x}", str(key))
    return f"{path}.{key}" if path else key


# Text no database stores, the one rule every door applies: PostgreSQL refuses NUL in any text or jsonb it is sent, a
# filter's included; a lone surrogate (which JSON text may escape, "\ud800") is not Unicode at all.
UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


# Held to the whole text (fullmatch): `$` would also match before a final newline, letting "KEY\n" through.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_env_name(value: Any) -> bool:
    """Whether `value` is a name an environment variable can have (letters, digits and _, not starting with a digit)."""
    return isinstance(value, str) and ENV_NAME.fullmatch(value) is not None


def text_is_storable(text: str) -> bool:
    """Whether `text` can be stored in, or compared with, a text column on every database agenttest runs on. No stored
    text holds such characters, so a filter that contains one matches nothing."""
    return not UNSTORABLE_TEXT.search(text)


def unknown_field_message(key: str, known: list[str]) -> str:
    """The words every API (and cases/validation/, the forms and the tape files) use for a field it does not know."""
    if not known:
        return f"unknown field {key!r}; this request takes no fields"
    return f"unknown field {key!r}; known fields: {', '.join(known)}"
