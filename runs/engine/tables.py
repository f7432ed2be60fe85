"""Stateful mocks: the tables a case declares, read and updated by its mocks, never by anything real.

A table mock (cases/schema.py TableMock) finds one record by its key — literal values, or "$args.<argument>" for an
argument of the call — then either answers it (a read) or, when the record holds what `when` asks, writes `update`
into it and answers the record as it now is. Not found and refused each answer a JSON error the agent can read, and
change nothing. Everything here is a pure function of the tables and the call, so a replayed conversation, making the
same calls, gets the same answers; each trial starts from the case's own tables (the session holds a copy).

Answers are JSON with sorted keys: a record's key order is whatever its database kept (PostgreSQL's jsonb reorders
keys), and a recording made on one database must replay on another.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from cases.schema import ARGS_PREFIX

Tables = dict[str, list[dict[str, Any]]]
_MISSING = object()


@dataclass(frozen=True)
class TableAnswer:
    content: str
    # The call found its record and (for an update) changed it: only then do the mock's state writes apply.
    succeeded: bool


def tables_copy(tables: Tables | None) -> Tables:
    """The case's tables as a trial starts from them: its own copy, so no trial sees another's updates."""
    return copy.deepcopy(tables) if isinstance(tables, dict) else {}


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))


def _error(message: str) -> str:
    return _text({"error": message})


def _argument(path: str, arguments: Any) -> Any:
    value = arguments
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _resolved(value: Any, arguments: Any) -> Any:
    if isinstance(value, str) and value.startswith(ARGS_PREFIX):
        return _argument(value.removeprefix(ARGS_PREFIX), arguments)
    return value


def same_value(stored: Any, given: Any) -> bool:
    """Equal as JSON — or a number and its text, since a model sends an order id as "1042" or 1042 whichever way the
    table holds it. True is never 1."""
    if isinstance(stored, bool) or isinstance(given, bool):
        return stored is given
    number_and_text = {type(stored), type(given)} in ({int, str}, {float, str})
    if number_and_text:
        return str(stored) == str(given)
    return _text(stored) == _text(given)


def _shown(key: dict[str, Any]) -> str:
    return ", ".join(f"{field} {_text(value)}" for field, value in key.items())


def _part(spec: dict[str, Any], name: str) -> dict[str, Any]:
    # Validation stores only objects here; a row edited around it must not crash the seam.
    value = spec.get(name)
    return value if isinstance(value, dict) else {}


def _holds(row: dict[str, Any], key: dict[str, Any]) -> bool:
    return all(field in row and same_value(row[field], value) for field, value in key.items())


def _needed(spec: dict[str, Any], arguments: Any) -> str:
    """The first "$args.<argument>" of the mock that the call did not give; "" when it gave them all."""
    for part in ("key", "when", "update"):
        for value in _part(spec, part).values():
            for item in value if part == "when" and isinstance(value, list) else [value]:
                if _resolved(item, arguments) is _MISSING:
                    missing: str = item.removeprefix(ARGS_PREFIX)
                    return missing
    return ""


def table_call(tables: Tables, spec: dict[str, Any], arguments: Any, *, function: str) -> TableAnswer:
    """One call of a table mock against `tables`, which an update changes in place."""
    name = spec.get("name", "")
    rows = tables.get(name)
    if not isinstance(rows, list):
        # Validation refuses a mock of a table the case does not declare; a case stored before that rule says so.
        return TableAnswer(_error(f"{function}: the case has no table {name!r}"), False)
    if needed := _needed(spec, arguments):
        return TableAnswer(_error(f"{function} needs the argument {needed}"), False)
    key = {field: _resolved(value, arguments) for field, value in _part(spec, "key").items()}
    record = next((row for row in rows if isinstance(row, dict) and _holds(row, key)), None)
    if record is None:
        return TableAnswer(spec.get("not_found") or _error(f"no {name} record with {_shown(key)}"), False)
    for field, wanted in _part(spec, "when").items():
        allowed = [_resolved(item, arguments) for item in (wanted if isinstance(wanted, list) else [wanted])]
        if not any(field in record and same_value(record[field], item) for item in allowed):
            has = f"is {_text(record[field])}" if field in record else "is not set"
            expected = " or ".join(_text(item) for item in allowed)
            why = f"{name} record with {_shown(key)}: {field} {has}, it must be {expected}"
            return TableAnswer(spec.get("refused") or _error(why), False)
    record.update({field: _resolved(value, arguments) for field, value in _part(spec, "update").items()})
    return TableAnswer(_text(record), True)


def table_differences(
    actual: list[dict[str, Any]], *, name: str, key: str, rows: list[dict[str, Any]], exact: bool
) -> list[str]:
    """How `actual` differs from the expected `rows` (tableEquals): each expected row, found by `key`, holds its
    values (compared as a mock's key is: a number and its text are the same); with `exact`, nothing else is there.
    Empty when it matches."""
    differences: list[str] = []
    matched: list[int] = []
    for expected in rows:
        wanted = expected.get(key)
        at = next((index for index, row in enumerate(actual) if key in row and same_value(row[key], wanted)), None)
        label = f"{name} {key} {_text(wanted)}"
        if at is None:
            differences.append(f"{label}: no such row")
            continue
        matched.append(at)
        row = actual[at]
        for field, value in expected.items():
            if field not in row:
                differences.append(f"{label}: {field} is not set, expected {_text(value)}")
            elif not same_value(row[field], value):
                differences.append(f"{label}: {field} is {_text(row[field])}, expected {_text(value)}")
        if exact:
            differences += [
                f"{label}: {field} is {_text(value)}, which is not expected"
                for field, value in row.items()
                if field not in expected
            ]
    if exact:
        differences += [
            f"{name}: an unexpected row with {key} {_text(row.get(key))}"
            if key in row
            else f"{name}: an unexpected row without {key}: {_text(row)}"
            for index, row in enumerate(actual)
            if index not in matched
        ]
    return differences
