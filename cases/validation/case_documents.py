"""A case document, whole or one part at a time (the admin's inlines): its shape from the JSON Schema `case-document`
of cases/schema.py, then its meaning (cases/validation/parts.py); and the warnings a stored case may earn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agenthost.seams import Agent
from cases.models import Assertion, Case, Suite
from cases.schema import NAME_MAX_LENGTH, fields_problems, part_problems, schema_problems
from cases.tool_schemas import mock_schema_problems
from cases.validation.callable_functions import CallableFunctions, case_callable_functions
from cases.validation.parts import (
    GOAL_AT_TURN_MESSAGE,
    NO_ASSERTIONS_WARNING,
    _check_goals,
    _check_routing,
    _mean_assertion,
    _mean_case_fields,
    _mean_list,
    _mean_mock,
    _mean_simulated_user,
    _Prepared,
)
from cases.validation.problems import CaseValidationError, Problem, _Problems, _storable
from common.inputs import path_join

# The shape of a case document — keys, types, required fields, allowed values, each assertion type's parameters — is
# the JSON Schema of cases/schema.py, the one the files are checked against too. What is checked here by hand is what
# a schema cannot know: storable text, JSON written as text, names the database must hold, regular expressions that
# compile, and the rules across parts (routing cases).
CASE_KIND = "case-document"
CASE_PARTS = ("history", "turns", "assertions", "mocks")
SNAPSHOT_AT_TURN_MESSAGE = (
    "snapshotMatches compares everything the agent's program said in the case: put it in the case's assertions, "
    "not a turn's"
)


def snapshot_runtime_message(agent: Agent) -> str:
    return (
        f"snapshotMatches compares what a process agent's program says over its protocol (runtime 'process'); "
        f"agent {agent.name!r} runs on runtime {agent.runtime!r}"
    )


def _clean_document(
    document: Any, *, suite: Suite | None, instance: Case | None
) -> tuple[dict[str, Any], list[Problem]]:
    problems = _Problems()
    data = _storable(document, what="a case document", problems=problems)
    if data is None:
        return {}, problems.items
    prepared = _Prepared(problems)
    data = prepared.case(data)
    prepared.add_schema_problems(schema_problems(CASE_KIND, data))
    cleaned = _mean_case_fields(data, problems=problems)
    name = cleaned["name"]
    if suite is not None and suite.pk is not None and isinstance(name, str) and 0 < len(name) <= NAME_MAX_LENGTH:
        taken = Case.objects.filter(suite=suite, name=name)
        if instance is not None and instance.pk is not None:
            taken = taken.exclude(pk=instance.pk)
        if taken.exists():
            problems.add("name", f"suite {suite.name!r} already has a case named {name!r}")
    entry = cleaned["entry_agent"]
    entry_agent = Agent.objects.filter(name=entry).first() if isinstance(entry, str) else None
    functions = case_callable_functions(suite=suite, entry_agent=entry_agent)
    if entry is not None and entry_agent is None:
        # Whose functions to check names against is unknown until the entry agent exists: that problem comes first.
        functions = None

    # Checked against the tables as given, even when they broke a rule of their own: one wrong row must not make
    # every mock of the case "no such table" too.
    tables = cleaned["tables"] if isinstance(cleaned["tables"], dict) else None

    def assertion(item: dict[str, Any], where: str) -> dict[str, Any]:
        return _mean_assertion(item, prefix=where, suite=suite, functions=functions, problems=problems, tables=tables)

    def case_assertion(item: dict[str, Any], where: str) -> dict[str, Any]:
        if item.get("type") == Assertion.Type.SNAPSHOT_MATCHES:
            # Whose program is compared: the case's entry agent, else the suite's (unknown for a suite not stored yet).
            agent = entry_agent if entry is not None else (
                suite.agent if suite is not None and suite.agent_id is not None else None
            )
            if agent is not None and agent.runtime != Agent.Runtime.PROCESS:
                problems.add(path_join(where, "type"), snapshot_runtime_message(agent))
        return assertion(item, where)

    def turn_assertion(item: dict[str, Any], where: str) -> dict[str, Any]:
        if item.get("type") == Assertion.Type.GOAL_REACHED:
            problems.add(path_join(where, "type"), GOAL_AT_TURN_MESSAGE)
        elif item.get("type") == Assertion.Type.SNAPSHOT_MATCHES:
            problems.add(path_join(where, "type"), SNAPSHOT_AT_TURN_MESSAGE)
        return assertion(item, where)

    def turn(item: dict[str, Any], where: str) -> dict[str, Any]:
        return {
            "user_message": item.get("user_message"),
            "assertions": _mean_list(
                item.get("assertions", []), field=path_join(where, "assertions"), mean=turn_assertion
            ),
        }

    cleaned["history"] = [
        {"role": item.get("role"), "content": item.get("content")}
        for item in data.get("history", []) if isinstance(item, dict)
    ] if isinstance(data.get("history", []), list) else []
    cleaned["turns"] = _mean_list(data.get("turns", []), field="turns", mean=turn)
    cleaned["assertions"] = _mean_list(data.get("assertions", []), field="assertions", mean=case_assertion)
    draft = is_draft(cleaned)
    cleaned["mocks"] = _mean_list(
        data.get("mocks", []), field="mocks",
        mean=lambda item, where: _mean_mock(item, prefix=where, functions=functions, problems=problems,
                                            tables=tables, draft=draft),
    )
    cleaned["simulated_user"] = _mean_simulated_user(
        data.get("simulated_user"), suite=suite, functions=functions, problems=problems
    )
    _check_goals(cleaned, problems=problems)
    if cleaned["type"] == Case.Type.ROUTING:
        _check_routing(cleaned, problems=problems)
    return cleaned, problems.items


def validate_case_document(document: Any, *, suite: Suite | None, instance: Case | None = None) -> list[Problem]:
    """Every problem with a case document; empty when it may be stored.

    `suite` None skips the checks that need one (name taken, judge model). `instance` is the case being replaced, so
    keeping its own name is not a clash.
    """
    return _clean_document(document, suite=suite, instance=instance)[1]


def clean_case_document(document: Any, *, suite: Suite | None, instance: Case | None = None) -> dict[str, Any]:
    """The document with defaults filled in and JSON text parsed; raises CaseValidationError listing every problem."""
    cleaned, problems = _clean_document(document, suite=suite, instance=instance)
    if problems:
        raise CaseValidationError(problems)
    return cleaned


def validate_case_fields(fields: dict[str, Any]) -> list[Problem]:
    """Problems with the case's own fields only (no history, turns, mocks or assertions, no name clash): for forms
    that edit those parts separately."""
    problems = _Problems()
    data = _storable(fields, what="a case", problems=problems)
    if data is None:
        return problems.items
    prepared = _Prepared(problems)
    data = dict(data)
    prepared.simulated_user(data)
    prepared.field(data, "initial_state", at="initial_state", expected=dict)
    prepared.field(data, "tables", at="tables", expected=dict)
    for key in ("tags", "warnings"):
        prepared.field(data, key, at=key, expected=list)
    prepared.add_schema_problems(fields_problems(CASE_KIND, data, without=CASE_PARTS))
    _mean_case_fields(data, problems=problems)
    return problems.items


def _part(definition: str, value: Any, *, what: str, prepare: Callable[[_Prepared, dict[str, Any]], None],
          problems: _Problems) -> dict[str, Any] | None:
    data = _storable(value, what=what, problems=problems)
    if data is None:
        return None
    prepared = _Prepared(problems)
    data = dict(data)
    prepare(prepared, data)
    prepared.add_schema_problems(part_problems(CASE_KIND, definition, data))
    return data


def validate_assertion(
    assertion: dict[str, Any], *, suite: Suite | None, functions: CallableFunctions | None = None,
    tables: dict[str, Any] | None = None,
) -> list[Problem]:
    """Problems with one assertion: its type, its params for that type, a judge model for llmJudge, for
    toolCalled/toolNotCalled a function in `functions` (see case_callable_functions; None skips that check), and for
    tableEquals a table of the case's `tables` (None skips that check)."""
    problems = _Problems()
    data = _part("AssertionEntry", assertion, what="an assertion", problems=problems,
                 prepare=lambda prepared, item: prepared.assertion(item, ""))
    if data is not None:
        _mean_assertion(data, prefix="", suite=suite, functions=functions, problems=problems, tables=tables)
    return problems.items


def validate_mock(
    mock: dict[str, Any], *, functions: CallableFunctions | None = None, tables: dict[str, Any] | None = None,
    draft: bool = False,
) -> list[Problem]:
    """Problems with one mock; its function must be in `functions`, a stateful mock's table in the case's `tables`
    (None skips either check), and its arguments and result fit the function's schemas unless it is a `draft`'s
    (is_draft)."""
    problems = _Problems()
    data = _part("MockEntry", mock, what="a mock", problems=problems,
                 prepare=lambda prepared, item: prepared.mock(item, ""))
    if data is not None:
        _mean_mock(data, prefix="", functions=functions, problems=problems, tables=tables, draft=draft)
    return problems.items


def is_draft(case: dict[str, Any] | Case) -> bool:
    """A recorded or extracted case not yet enabled: it keeps its mocks as the conversation had them even where the
    tools' schemas refuse them (recordings are evidence), and the reviewer is warned instead; enabling it holds them
    to the schemas like any case."""
    if isinstance(case, Case):
        return not case.enabled and case.source != Case.Source.MANUAL
    return not case.get("enabled", True) and case.get("source", Case.Source.MANUAL) != Case.Source.MANUAL


def mock_schema_warnings(document: dict[str, Any], *, suite: Suite | None) -> list[str]:
    """Each of the case's mocks whose arguments or result its function's schemas refuse, for a reviewer to read: a
    draft's recorded misfits, or the mocks of a case whose tool changed its schemas since they were written."""
    entry = document.get("entry_agent")
    entry_agent = Agent.objects.filter(name=entry).first() if isinstance(entry, str) else None
    functions = case_callable_functions(suite=suite, entry_agent=entry_agent)
    if functions is None or (entry is not None and entry_agent is None):
        return []
    warnings = []
    for index, mock in enumerate(document.get("mocks") or []):
        name = mock.get("function_name") if isinstance(mock, dict) else None
        if name not in functions.names:
            continue
        for field, message in mock_schema_problems(mock, functions.declarations[name]):
            warnings.append(
                f"mocks[{index}].{field}: {message} — the mock of {name} does not fit the tool's schema; fix it "
                "before enabling the case"
            )
    return warnings


def validate_history_message(message: dict[str, Any]) -> list[Problem]:
    problems = _Problems()
    _part("HistoryEntry", message, what="a history message", problems=problems, prepare=lambda *_: None)
    return problems.items


def validate_turn(turn: dict[str, Any]) -> list[Problem]:
    """Problems with a turn's user message (its assertions are checked one by one with `validate_assertion`)."""
    problems = _Problems()
    _part("TurnEntry", {**turn, "assertions": []}, what="a turn", problems=problems, prepare=lambda *_: None)
    return problems.items


def case_warnings(document: dict[str, Any]) -> list[str]:
    """What is worth telling whoever enables a case that may be stored but cannot tell anything: an enabled case with
    turns and no assertion passes or fails on nothing, so the runner ends it Error."""
    turns = document.get("turns") or []
    checks = [*(document.get("assertions") or []), *(item for turn in turns for item in turn.get("assertions") or [])]
    plays = turns or document.get("simulated_user")
    return [NO_ASSERTIONS_WARNING] if document.get("enabled") and plays and not checks else []

