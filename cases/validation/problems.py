"""What is wrong with a suite or a case, said so a person can fix it: each Problem with the path of its field
(`turns[1].assertions[0].params.pattern`), every one of a document at once, and the building blocks every check
here shares (JSON given as text, depth, storable text)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from common.inputs import (
    INT_RANGE_PROBLEM,
    MAX_JSON_DEPTH,
    UNSTORABLE_MESSAGE,
    int_out_of_range_path,
    json_loads,
    json_text_too_deep,
    nonfinite_path,
    path_join,
    text_is_storable,
    too_deep_path,
)

DEPTH_MESSAGE = f"nests more than {MAX_JSON_DEPTH} levels deep (the most a JSON value may)"
NONFINITE_MESSAGE = "must hold only finite numbers: NaN and Infinity (or 1e999) are not JSON"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document. `case` names the case document it belongs to when several are checked."""

    field: str
    message: str
    case: str = ""
    # The tail of `message` that other problems of the same document may repeat word for word (the functions an
    # agent can call): a summary of several problems says it once.
    shared: str = ""

    @property
    def own_message(self) -> str:
        return self.message.removesuffix(self.shared).rstrip("; ") if self.shared else self.message

    def as_dict(self) -> dict[str, str]:
        data = {"field": self.field, "message": self.message}
        if self.case:
            data["case"] = self.case
        return data

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class CaseValidationError(Exception):
    """A case (or a batch of case documents) that breaks the rules; `problems` lists every reason."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(problems_summary(self.problems))


def problems_summary(problems: list[Problem]) -> str:
    """Every problem once, for a person to read: what several share (the list of callable functions) at the end,
    said once, rather than after each of them."""
    own = [f"{problem.field}: {problem.own_message}" for problem in problems]
    shared = [problem.shared for problem in problems if problem.shared]
    return "; ".join(dict.fromkeys([*own, *shared]))


class SuiteValidationError(CaseValidationError):
    """A suite that breaks the rules."""


class _Problems:
    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, field: str, message: str, *, shared: str = "") -> None:
        self.items.append(Problem(field, message, shared=shared))


def _under(field: str, path: str) -> str:
    """`field` joined with a path from common.inputs ("a.b[0]", "[2].c" or "(top level)")."""
    if path == "(top level)":
        return field or "document"
    if not field or path.startswith("["):
        return f"{field}{path}" or "document"
    return f"{field}.{path}"


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)


_INVALID = object()


def _object_or_problem(value: Any, *, field: str, what: str, problems: _Problems) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    problems.add(field or "document", f"must be {what} (a JSON object), not {_json_type(value)}")
    return None


def _too_deep(data: dict[str, Any], *, problems: _Problems) -> bool:
    """Refuses a document nested deeper than any case needs, before the recursive checks below walk it."""
    deep = too_deep_path(data)
    if deep is not None:
        problems.add(_under("", deep), DEPTH_MESSAGE)
    return deep is not None


def _unstorable_problems(value: Any, *, field: str, problems: _Problems) -> None:
    """Every string (or object key) holding text no database stores (common.inputs.text_is_storable)."""
    if isinstance(value, str):
        if not text_is_storable(value):
            problems.add(field or "document", UNSTORABLE_MESSAGE)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not text_is_storable(str(key)):
                problems.add(field or "document", f"has a key that {UNSTORABLE_MESSAGE}")
            else:
                _unstorable_problems(item, field=path_join(field, str(key)), problems=problems)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _unstorable_problems(item, field=path_join(field, index), problems=problems)


def _from_text(value: Any, *, field: str, expected: type, nullable: bool, problems: _Problems) -> Any:
    """A JSON-valued field, parsed when it came as JSON text; `_INVALID` (with a problem) when it cannot be stored.
    Whether it has the right type is the schema's to say."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None if nullable else expected()
        if json_text_too_deep(text):
            # Decoding it would exhaust Python's recursion limit before it could be refused.
            problems.add(field, DEPTH_MESSAGE)
            return _INVALID
        try:
            # Not json.loads: an integer of more than 4,300 digits made int() raise ValueError, not this.
            value = json_loads(text)
        except json.JSONDecodeError as exc:
            wanted = "a JSON object" if expected is dict else "a JSON list"
            problems.add(
                field,
                f"must be {wanted}; as text it is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
            )
            return _INVALID
        # The document was checked for unstorable text before; what the text escaped was not.
        found = len(problems.items)
        _unstorable_problems(value, field=field, problems=problems)
        if len(problems.items) > found:
            return _INVALID
    if (deep := too_deep_path(value)) is not None:
        problems.add(_under(field, deep), DEPTH_MESSAGE)
        return _INVALID
    if (bad := nonfinite_path(value)) is not None:
        # Python reads 1e999, Infinity and NaN, but no JSON column stores them.
        problems.add(_under(field, bad), NONFINITE_MESSAGE)
        return _INVALID
    if (bad := int_out_of_range_path(value)) is not None:
        problems.add(_under(field, bad), f"must hold only {INT_RANGE_PROBLEM}")
        return _INVALID
    return value


def _storable(data: Any, *, what: str, problems: _Problems) -> dict[str, Any] | None:
    """The document, when it is an object the checks below can walk: not too deep and holding only storable text
    (those checks look names up in the database, which such text would break)."""
    data = _object_or_problem(data, field="", what=what, problems=problems)
    if data is None or _too_deep(data, problems=problems):
        return None
    _unstorable_problems(data, field="", problems=problems)
    return None if problems.items else data

