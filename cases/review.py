"""One case as a reviewer reads it on its admin page: each turn with its assertions and the mocks of its calls, the
case-level assertions apart, and JSON short enough to read at a glance or folded away.

Mocks belong to the case, not to a turn — at run time any turn's call may use any mock. For reading, each mock is
shown with the turn whose toolCalled assertion names its function with arguments it matches (in call order, so a
function called in two turns shows its first mock with the first); a mock no such assertion names is listed with
"any turn". A recorded draft generates one toolCalled per mock, in the turn that made the call, so there every mock
lands where it was recorded.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from cases.models import Assertion, Case, HistoryMessage, Mock, MockVerification, Turn
from cases.services import case_to_document
from cases.validation.case_documents import mock_schema_warnings
from cases.verification import FAILING, diff_line, mock_key
from common.inputs import json_loads, printable_json

# JSON longer than this, or on more than one line, is folded under its first characters.
SHORT_JSON_LENGTH = 80
PREVIEW_LENGTH = 90


@dataclass(frozen=True)
class ShownJSON:
    """A value as the review shows it: `text` in full; `preview` when it is folded (empty: shown as is)."""

    text: str
    preview: str = ""

    @property
    def folded(self) -> bool:
        return bool(self.preview)


@dataclass
class TurnReview:
    turn: Turn
    number: int
    assertions: list[Assertion] = field(default_factory=list)
    mocks: list[Mock] = field(default_factory=list)


@dataclass
class CaseReview:
    case: Case
    history: list[HistoryMessage]
    turns: list[TurnReview]
    case_assertions: list[Assertion]
    # Mocks no turn's toolCalled assertion names: they answer whichever call matches them.
    any_turn_mocks: list[Mock]
    # The stored notes, then each mock its tool's schemas refuse as they stand now (cases/validation/case_documents.py).
    warnings: list[str] = field(default_factory=list)
    # Mocks whose last verification of what they say now drifted or failed: the panel offers "Refresh drifted".
    drifted: list[Mock] = field(default_factory=list)


def case_review(*, case: Case) -> CaseReview:
    turns = list(case.turns.all())
    assertions = list(case.assertions.all())
    mocks = list(case.mocks.all())
    document = case_to_document(case=case)
    verifications = {item.mock_key: item for item in case.mock_verifications.all()}
    for mock, mock_document in zip(mocks, document["mocks"], strict=True):
        # Its last verification against the real tool, if what it says now was ever verified (`mocks verify`).
        mock.verification = verifications.get(mock_key(mock_document))
    reviews = [TurnReview(turn=turn, number=number) for number, turn in enumerate(turns)]
    by_turn = {turn.pk: review for turn, review in zip(turns, reviews, strict=True)}
    case_level: list[Any] = []
    for assertion in assertions:
        review = by_turn.get(assertion.turn_id) if assertion.turn_id else None
        (review.assertions if review is not None else case_level).append(assertion)

    unplaced: dict[str, list[Mock]] = defaultdict(list)
    for mock in sorted(mocks, key=lambda mock: (mock.call_index is None, mock.call_index or 0, mock.position)):
        unplaced[mock.function_name].append(mock)
    for review in reviews:
        for assertion in review.assertions:
            if assertion.type != Assertion.Type.TOOL_CALLED or not isinstance(assertion.params, dict):
                continue
            candidates = unplaced.get(str(assertion.params.get("function", "")), [])
            matched = next((mock for mock in candidates if _matches(mock, assertion.params.get("arguments"))), None)
            if matched is not None:
                candidates.remove(matched)
                review.mocks.append(matched)
    placed = {mock.pk for review in reviews for mock in review.mocks}
    return CaseReview(
        case=case,
        history=list(case.history.all()),
        turns=reviews,
        case_assertions=case_level,
        any_turn_mocks=[mock for mock in mocks if mock.pk not in placed],
        warnings=[*case.warnings, *mock_schema_warnings(document, suite=case.suite)],
        drifted=[mock for mock in mocks if mock.verification is not None and mock.verification.verdict in FAILING],
    )


@dataclass(frozen=True)
class ShownAssertion:
    """What an assertion checks, in a line: its subject (a function, a state key) and the rest of its parameters."""

    subject: str
    rest: ShownJSON | None


def shown_assertion(assertion: Assertion) -> ShownAssertion:
    params = assertion.params if isinstance(assertion.params, dict) else {}
    if assertion.type in (Assertion.Type.TOOL_CALLED, Assertion.Type.TOOL_NOT_CALLED) and "function" in params:
        arguments = params.get("arguments")
        return ShownAssertion(subject=str(params["function"]), rest=shown_json(arguments) if arguments else None)
    if assertion.type == Assertion.Type.STATE_EQUALS and "key" in params:
        return ShownAssertion(subject=f"{params['key']} =", rest=shown_json(params.get("value")))
    return ShownAssertion(subject="", rest=shown_json(params) if params else None)


def _matches(mock: Mock, arguments: Any) -> bool:
    """Could this mock answer the call the assertion expects? A mock without arguments answers any call."""
    if not isinstance(mock.arguments, dict) or not mock.arguments:
        return True
    return isinstance(arguments, dict) and all(arguments.get(key) == value for key, value in mock.arguments.items())


def verification_lines(verification: MockVerification) -> list[str]:
    """A verification's diff, one line per path, as `agenttest mocks verify` prints it."""
    return [diff_line(item) for item in verification.diff if isinstance(item, dict)]


def shown_json(value: Any) -> ShownJSON:
    """`value` as compact JSON when short, else indented and folded under a preview."""
    return _folded_json(value) or ShownJSON(text=str(value))


def shown_result(text: str) -> ShownJSON:
    """A mock's result (any text): JSON shown as JSON, other text as it is; long ones folded."""
    try:
        shown = _folded_json(json_loads(text))
    except ValueError:
        shown = None
    if shown is not None:
        return shown
    if len(text) <= SHORT_JSON_LENGTH and "\n" not in text:
        return ShownJSON(text=text)
    return ShownJSON(text=text, preview=" ".join(text.split())[:PREVIEW_LENGTH].rstrip() + "…")


def _folded_json(value: Any) -> ShownJSON | None:
    """None when the value cannot be written as JSON (an integer too long to convert, kept as stored)."""
    try:
        compact = printable_json(value, separators=(", ", ": "))
        indented = printable_json(value, indent=2)
    except (TypeError, ValueError):
        return None
    if len(compact) <= SHORT_JSON_LENGTH:
        return ShownJSON(text=compact)
    return ShownJSON(text=indented, preview=compact[:PREVIEW_LENGTH].rstrip() + "…")
