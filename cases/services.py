"""Writes of suites and cases. A case is always written from its document (see cases/validation/), whichever door
it came through — API, import, copy or recording — so every stored case met the same rules."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from agenthost.seams import Agent, Conversation
from cases.models import Assertion, Case, HistoryMessage, Mock, Suite, Turn
from cases.schema import NAME_MAX_LENGTH
from cases.selectors import case_list
from cases.validation.case_documents import clean_case_document, validate_case_document
from cases.validation.problems import CaseValidationError, Problem, SuiteValidationError
from cases.validation.suites import clean_suite_data
from common.inputs import parse_id

# --- Suites -------------------------------------------------------------------------------------------------------


def suite_to_document(*, suite: Suite) -> dict[str, Any]:
    return {
        "name": suite.name,
        "description": suite.description,
        "agent": suite.agent.name,
        "judge_model": suite.judge_model,
        "extra_allowed_functions": list(suite.extra_allowed_functions),
        "force_blocked_functions": list(suite.force_blocked_functions),
        "network_allow": list(suite.network_allow),
        "case_timeout_seconds": suite.case_timeout_seconds,
        "enabled": suite.enabled,
        "isolation_group": suite.isolation_group,
        "case_concurrency": suite.case_concurrency,
        "mock_rules": dict(suite.mock_rules or {}),
    }


def _save_suite(suite: Suite, cleaned: dict[str, Any]) -> Suite:
    for field, value in cleaned.items():
        setattr(suite, field, value)
    try:
        with transaction.atomic():
            suite.save()
    except IntegrityError as exc:
        if Suite.objects.filter(name=suite.name).exclude(pk=suite.pk).exists():
            # Another request took the name between validation and the insert.
            raise SuiteValidationError([Problem("name", f"a suite named {suite.name!r} already exists")]) from exc
        raise SuiteValidationError([_refused(exc)]) from exc
    return suite


def _refused(exc: IntegrityError) -> Problem:
    # Validation should have caught it; saying what the database refused beats blaming the name.
    detail = str(exc).strip().splitlines()
    return Problem("document", f"the database refused it: {detail[0] if detail else type(exc).__name__}")


@transaction.atomic
def suite_create(*, data: dict[str, Any]) -> Suite:
    """A suite from a suite document (`agent` by name or as an Agent); raises SuiteValidationError."""
    return _save_suite(Suite(), clean_suite_data(data))


@transaction.atomic
def suite_update(*, suite: Suite, data: dict[str, Any]) -> Suite:
    """Changes only the fields in `data`; raises SuiteValidationError."""
    merged = {**suite_to_document(suite=suite), **data} if isinstance(data, dict) else data
    return _save_suite(suite, clean_suite_data(merged, instance=suite))


@transaction.atomic
def suite_delete(*, suite: Suite) -> None:
    """Deletes the suite with its cases and runs."""
    suite.delete()


# --- Cases --------------------------------------------------------------------------------------------------------


def _assertion_document(assertion: Assertion) -> dict[str, Any]:
    return {"type": assertion.type, "params": assertion.params, "fatal": assertion.fatal}


def case_to_document(*, case: Case) -> dict[str, Any]:
    """The case as a document; uses prefetched parts when the case came from a selector."""
    assertions = list(case.assertions.all())
    return {
        "name": case.name,
        "description": case.description,
        "enabled": case.enabled,
        "source": case.source,
        "source_conversation": case.source_conversation_id,
        "type": case.type,
        "entry_agent": case.entry_agent.name if case.entry_agent is not None else None,
        "initial_state": case.initial_state,
        "tables": case.tables,
        "priority": case.priority,
        "tags": list(case.tags),
        "unmocked_policy": case.unmocked_policy,
        "warnings": list(case.warnings),
        "history": [{"role": message.role, "content": message.content} for message in case.history.all()],
        "turns": [
            {
                "user_message": turn.user_message,
                "assertions": [_assertion_document(item) for item in assertions if item.turn_id == turn.pk],
            }
            for turn in case.turns.all()
        ],
        "assertions": [_assertion_document(item) for item in assertions if item.turn_id is None],
        "mocks": [
            {
                "function_name": mock.function_name,
                "arguments": mock.arguments,
                "call_index": mock.call_index,
                "result": mock.result,
                "stop": mock.stop,
                "state_writes": mock.state_writes,
                "table": mock.table,
            }
            for mock in case.mocks.all()
        ],
        "simulated_user": case.simulated_user,
    }


# What decides how a case runs and is judged; its name, tags, priority or enabled flag do not.
CONTENT_KEYS = (
    "type", "entry_agent", "initial_state", "history", "turns", "assertions", "mocks", "unmocked_policy", "tables",
)
# Parts added after hashes were first kept, with the value that means "not used": left out of the content then, so a
# case that does not use them keeps the hash (and the snapshot) it had, and its results do not read "case changed".
UNUSED_CONTENT: dict[str, Any] = {"tables": {}}
UNUSED_MOCK_FIELDS: dict[str, Any] = {"table": None}


def case_content(document: dict[str, Any]) -> dict[str, Any]:
    """What of a case document decides how the case runs and is judged (CONTENT_KEYS)."""
    content: dict[str, Any] = {
        key: document.get(key) for key in CONTENT_KEYS
        if key not in UNUSED_CONTENT or document.get(key, UNUSED_CONTENT[key]) != UNUSED_CONTENT[key]
    }
    if isinstance(content.get("mocks"), list):
        content["mocks"] = [
            {key: value for key, value in mock.items()
             if key not in UNUSED_MOCK_FIELDS or value != UNUSED_MOCK_FIELDS[key]} if isinstance(mock, dict) else mock
            for mock in content["mocks"]
        ]
    if document.get("simulated_user"):
        # Left out otherwise, so every scripted case keeps the hash it had before simulated users existed.
        content["simulated_user"] = document["simulated_user"]
    return content


def case_content_hash(document: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(case_content(document), sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@transaction.atomic
def case_content_hash_refresh(*, case: Case) -> Case:
    """Stores the hash of what the case holds now, after an edit written part by part (the admin's inlines) rather
    than from one document: results keep the hash of the case they ran, so a stale one hides the edit."""
    case.content_hash = case_content_hash(case_to_document(case=case))
    Case.objects.filter(pk=case.pk).update(content_hash=case.content_hash)
    return case


_CASE_SCALARS = (
    "name", "description", "enabled", "source", "type", "initial_state", "tables", "priority", "tags",
    "unmocked_policy", "warnings", "simulated_user",
)


def _store(case: Case, document: dict[str, Any]) -> Case:
    """Writes a cleaned document onto `case`, replacing its history, turns, mocks and assertions wholesale."""
    for field in _CASE_SCALARS:
        setattr(case, field, document[field])
    case.source_conversation_id = document["source_conversation"]
    case.entry_agent = Agent.objects.get(name=document["entry_agent"]) if document["entry_agent"] else None
    case.content_hash = case_content_hash(document)
    try:
        with transaction.atomic():
            case.save()
    except IntegrityError as exc:
        if Case.objects.filter(suite_id=case.suite_id, name=case.name).exclude(pk=case.pk).exists():
            # Another request took the name between validation and the insert.
            raise CaseValidationError(
                [Problem("name", f"suite {case.suite.name!r} already has a case named {case.name!r}")]
            ) from exc
        raise CaseValidationError([_refused(exc)]) from exc
    for part in (case.history, case.turns, case.mocks, case.assertions):
        part.all().delete()
    HistoryMessage.objects.bulk_create(
        HistoryMessage(case=case, position=position, role=message["role"], content=message["content"])
        for position, message in enumerate(document["history"])
    )
    assertions = [
        Assertion(case=case, position=position, **item) for position, item in enumerate(document["assertions"])
    ]
    for position, turn_document in enumerate(document["turns"]):
        turn = Turn.objects.create(case=case, position=position, user_message=turn_document["user_message"])
        assertions.extend(
            Assertion(case=case, turn=turn, position=index, **item)
            for index, item in enumerate(turn_document["assertions"])
        )
    Assertion.objects.bulk_create(assertions)
    Mock.objects.bulk_create(
        Mock(case=case, position=position, **item) for position, item in enumerate(document["mocks"])
    )
    # Also drops parts prefetched before the write, so the returned case reads what was stored.
    case.refresh_from_db()
    return case


@transaction.atomic
def case_create(*, suite: Suite, document: dict[str, Any]) -> Case:
    """A case in `suite` from a document; raises CaseValidationError listing every problem."""
    return _store(Case(suite=suite), clean_case_document(document, suite=suite))


@transaction.atomic
def case_update(*, case: Case, document: dict[str, Any]) -> Case:
    """Replaces the case with the document: fields, history, turns, mocks and assertions."""
    return _store(case, clean_case_document(document, suite=case.suite, instance=case))


def _copy_name(case: Case) -> str:
    number = 1
    while True:
        suffix = " (copy)" if number == 1 else f" (copy {number})"
        name = case.name[: NAME_MAX_LENGTH - len(suffix)] + suffix
        if not Case.objects.filter(suite_id=case.suite_id, name=name).exists():
            return name
        number += 1


@transaction.atomic
def case_copy(*, case: Case) -> Case:
    """A disabled copy named "<name> (copy)" (or "(copy 2)", … when taken), to edit without touching the original.

    Not re-validated: a copy of a draft is a draft, and it must be enabled (and validated) before it runs.
    """
    document = {**case_to_document(case=case), "name": _copy_name(case), "enabled": False}
    return _store(Case(suite=case.suite), document)


@transaction.atomic
def case_enable(*, case: Case) -> Case:
    """Enables the case once it passes whole-case validation; raises CaseValidationError otherwise."""
    # Checked as the enabled case it becomes: a draft's mocks that only warned while it was disabled now refuse it.
    document = {**case_to_document(case=case), "enabled": True}
    problems = validate_case_document(document, suite=case.suite, instance=case)
    if problems:
        raise CaseValidationError(problems)
    case.enabled = True
    case.save(update_fields=["enabled", "updated_at"])
    return case


@transaction.atomic
def case_disable(*, case: Case) -> Case:
    case.enabled = False
    case.save(update_fields=["enabled", "updated_at"])
    return case


@transaction.atomic
def case_delete(*, case: Case) -> None:
    case.delete()


# --- Import -------------------------------------------------------------------------------------------------------


@dataclass
class SuiteImport:
    suite: Suite
    suite_created: bool
    cases: list[Case]


def _import_plan(
    *, suite: Suite, documents: Any, replace: bool
) -> tuple[list[tuple[Case, dict[str, Any]]], list[Problem]]:
    """Each document checked against `suite` (saved or about to be), paired with the case it creates or replaces."""
    if not isinstance(documents, list):
        return [], [Problem("cases", "must be a list of case documents")]
    documents = [_without_missing_conversation(document) for document in documents]
    existing = {case.name: case for case in Case.objects.filter(suite=suite)} if suite.pk else {}
    plan: list[tuple[Case, dict[str, Any]]] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for index, document in enumerate(documents):
        name = document.get("name") if isinstance(document, dict) else None
        label = name.strip() if isinstance(name, str) else ""
        target = existing.get(label) if replace else None
        found: list[Problem] = []
        if label in seen:
            found.append(Problem("name", f"is used twice in this import (also by cases[{seen[label]}])"))
        elif label:
            seen[label] = index
        try:
            cleaned = clean_case_document(document, suite=suite, instance=target)
        except CaseValidationError as exc:
            found.extend(exc.problems)
        else:
            plan.append((target or Case(suite=suite), cleaned))
        problems.extend(
            Problem(f"cases[{index}].{problem.field}", problem.message, label, problem.shared) for problem in found
        )
    return plan, problems


def _without_missing_conversation(document: Any) -> Any:
    """Files move between installations, where the recorded conversation a case came from may not exist: the link is
    dropped, and a warning says so, rather than refusing the case."""
    if not isinstance(document, dict):
        return document
    conversation_id = document.get("source_conversation")
    if not (isinstance(conversation_id, int) and parse_id(conversation_id) is not None) or (
        Conversation.objects.filter(pk=conversation_id).exists()
    ):
        # Not an id at all is for validation to report, naming the field.
        return document
    warnings = given if isinstance(given := document.get("warnings"), list) else []
    note = f"source conversation #{conversation_id} did not exist where this case was imported; the link was dropped"
    return {**document, "source_conversation": None, "warnings": [*warnings, note]}


@transaction.atomic
def cases_import(*, suite: Suite, documents: list[dict[str, Any]], replace: bool = False) -> list[Case]:
    """Stores every document in `suite`, or none: any problem raises CaseValidationError listing all of them, each
    field prefixed `cases[<index>].` and carrying the case name.

    A document whose name the suite already has is a problem, unless `replace`: then it replaces that case in place
    (same id, so earlier run results still point at it). Cases the documents do not name are left alone.
    """
    plan, problems = _import_plan(suite=suite, documents=documents, replace=replace)
    if problems:
        raise CaseValidationError(problems)
    return [_store(case, cleaned) for case, cleaned in plan]


# The keys of an export file (suite_export).
SUITE_IMPORT_KEYS = ("suite", "cases")


@transaction.atomic
def suite_import(*, document: dict[str, Any], suite_name: str = "", replace: bool = False) -> SuiteImport:
    """Imports an export file's content ({"suite": {...}, "cases": [...]}) into the suite `suite_name` (default: the
    file's suite name). An existing suite keeps its settings; a missing one is created from the file's. All or
    nothing: raises CaseValidationError with every problem of the suite and of every case."""
    if not isinstance(document, dict):
        raise CaseValidationError([Problem("document", 'must be an object with "suite" and "cases"')])
    # Every key is read or refused, as in each case: a misspelt "case" would otherwise import no cases, silently.
    problems: list[Problem] = [
        Problem(str(key), f"unknown field {str(key)!r}; known fields: {', '.join(SUITE_IMPORT_KEYS)}")
        for key in document
        if key not in SUITE_IMPORT_KEYS
    ]
    suite_data = given if isinstance(given := document.get("suite"), dict) else {}
    name = suite_name or suite_data.get("name") or ""
    suite = Suite.objects.filter(name=name).first() if isinstance(name, str) and name else None
    created = suite is None
    if suite is None:
        try:
            suite = suite_create(data={**suite_data, "name": name})
        except SuiteValidationError as exc:
            problems += [
                Problem(f"suite.{problem.field}", problem.message, shared=problem.shared) for problem in exc.problems
            ]
            # An unsaved stand-in, so the cases are still checked and every problem comes back in one go.
            judge_model = suite_data.get("judge_model")
            suite = Suite(name=str(name), judge_model=judge_model if isinstance(judge_model, str) else "")
    documents = document.get("cases", [])
    if problems:
        problems += _import_plan(suite=suite, documents=documents, replace=replace)[1]
        raise CaseValidationError(problems)
    cases = cases_import(suite=suite, documents=documents, replace=replace)
    return SuiteImport(suite=suite, suite_created=created, cases=cases)


def suite_export(*, suite: Suite) -> dict[str, Any]:
    """The suite and all its cases (enabled or not) as one document, the shape `suite_import` reads."""
    cases = case_list(filters={"suite": suite.pk})
    return {"suite": suite_to_document(suite=suite), "cases": [case_to_document(case=case) for case in cases]}
