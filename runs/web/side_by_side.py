"""Results of one case side by side: a flipped case's baseline result beside the current one, or the case on every
model of a run. Columns are aligned by turn, and within a turn by content (issue 37): the messages and tool calls of
each column are aligned with the first column's as sequences (difflib), a step matching a step of the same kind — a
tool call one of the same name — so one skipped call reads as one skipped row, not as every row after it differing.
Each row of another column says how it differs from the first: skipped, added, different arguments, different result
(or a different message); assertion outcomes are aligned in order. The first row that differs is the divergence,
marked and linked from the top with the field that differs.

Each column is read as the result page reads it (the host's transcript of the stored result, runs.web.readable),
so a tool call shows its arguments, outcome and result the same way on both pages, through the host's partial. Every
value reaches the page through the template engine, escaped.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from agenthost.seams import TranscriptEntry
from common.inputs import parse_id
from runs.models import CaseResult
from runs.web.comparison import change_anchor, is_same_case, same_case, shows_best, with_default_baseline
from runs.web.matrix import short_reason
from runs.web.readable import assertion_outcomes, readable, result_transcript

CASE_SCOPE = "case"
# How much of a message, or of a tool call's arguments, the divergence summary quotes.
QUOTED_CHARS = 80


@dataclass
class Column:
    result: CaseResult
    note: str = ""
    # Columns of different runs are titled by run and model; columns of one run by model alone.
    show_run: bool = True

    @property
    def title(self) -> str:
        model = self.result.model
        return f"Run #{self.result.run_id} · {model}" if self.show_run else model

    @property
    def url(self) -> str:
        return reverse("runs:result", kwargs={"run_id": self.result.run_id, "result_id": self.result.pk})


# How a step of another column differs from the first column's at its row.
SKIPPED, ADDED, DIFFERENT_ARGUMENTS, DIFFERENT_RESULT, DIFFERENT_MESSAGE, DIFFERENT_OUTCOME = (
    "skipped", "added", "different arguments", "different result", "different message", "different outcome"
)


@dataclass
class Step:
    """One column's step at one row of a block: a transcript entry or an assertion outcome; None where that column
    has no step there. `difference` says how it differs from the first column's step on the row ("" when alike, and
    always for the first column)."""

    column: str
    kind: str
    # A transcript entry (a TranscriptEntry of the host's) or an assertion outcome.
    entry: Any = None
    difference: str = ""
    # The fields that differ (argument or result keys), for the divergence summary.
    fields: list[str] = field(default_factory=list)

    @property
    def signature(self) -> tuple[Any, ...] | None:
        """What must be equal for two steps to be the same: never the model's name or its latency."""
        entry = self.entry
        if entry is None:
            return None
        if self.kind == "user":
            return ("user", entry.text)
        if self.kind == "assistant":
            return ("assistant", entry.agent, entry.text)
        if self.kind == "tool":
            call = entry.call
            return ("tool", call.name, call.arguments, call.outcome, call.result, entry.agent)
        return ("assertion", entry.get("type"), entry.get("status"), entry["expected_text"])

    def describe(self) -> str:
        """The step in a few words, for the divergence summary."""
        entry = self.entry
        if entry is None:
            return "nothing at this step" if self.kind == "message" else "no such assertion"
        if self.kind == "user":
            return f"the user said “{short_reason(entry.text, QUOTED_CHARS)}”"
        if self.kind == "assistant":
            return f"{entry.agent or 'the agent'} answered “{short_reason(entry.text, QUOTED_CHARS)}”"
        if self.kind == "tool":
            call = entry.call
            arguments = short_reason(readable(call.arguments), QUOTED_CHARS) if call.shows_arguments else ""
            outcome = f" ({call.outcome})" if call.outcome else ""
            return f"called {call.name}{' with ' + arguments if arguments else ''}{outcome}"
        return f"{entry.get('type')} {entry.get('status')}"


def _anchor_key(entry: TranscriptEntry) -> tuple[Any, ...]:
    """What two steps must share to be aligned on one row: their kind, and a tool call's name."""
    return ("tool", entry.call.name) if entry.call is not None else (entry.kind,)


def _parsed(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _differing_fields(before: Any, after: Any) -> list[str]:
    """The top-level keys whose values differ, when both are JSON objects; else none named."""
    old, new = _parsed(before), _parsed(after)
    if not isinstance(old, dict) or not isinstance(new, dict):
        return []
    return [key for key in dict.fromkeys([*old, *new]) if old.get(key) != new.get(key)]


def _difference(first: TranscriptEntry, other: TranscriptEntry) -> tuple[str, list[str]]:
    """How `other` differs from `first`, two steps aligned on one row, and the fields that do."""
    before, after = first.call, other.call
    if before is None or after is None:
        same = first.text == other.text and first.agent == other.agent
        return ("", []) if same else (DIFFERENT_MESSAGE, [])
    if before.arguments != after.arguments:
        return DIFFERENT_ARGUMENTS, _differing_fields(before.arguments, after.arguments)
    if (before.outcome, before.result) != (after.outcome, after.result):
        if before.outcome != after.outcome:
            return DIFFERENT_OUTCOME, []
        return DIFFERENT_RESULT, _differing_fields(before.result, after.result)
    return ("", []) if first.agent == other.agent else (DIFFERENT_MESSAGE, [])


# Past this many cells (steps of one column × steps of the other) the table of common lengths costs more than a page
# should: difflib's matching, which may read one step left out as more rows differing, takes over.
ALIGNMENT_CELLS = 250_000


def _matched(first: list[Any], other: list[Any]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of two lists of keys: the fewest rows skipped and added. difflib
    matches the longest block first, which is not the fewest: one call left out of L L C L C L read as a row added and
    two skipped."""
    n, m = len(first), len(other)
    if n * m > ALIGNMENT_CELLS:
        matcher = difflib.SequenceMatcher(None, first, other, autojunk=False)
        return [(i + k, j + k) for i, j, size in matcher.get_matching_blocks() for k in range(size)]
    # longest[i][j]: the length of a longest common subsequence of first[i:] and other[j:].
    longest = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        here, below = longest[i], longest[i + 1]
        for j in range(m - 1, -1, -1):
            here[j] = below[j + 1] + 1 if first[i] == other[j] else max(below[j], here[j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if first[i] == other[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif longest[i + 1][j] >= longest[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _aligned_rows(columns: list[Column], lists: list[list[TranscriptEntry]]) -> list[list[Step]]:
    """The columns' messages and tool calls on rows, each other column aligned with the first by content. A step
    only another column has gets a row of its own, where the first column's step would have been."""
    reference = lists[0]
    # Per other column: the step matched to each of the first column's, and the steps it has before each of them.
    matched: list[dict[int, TranscriptEntry]] = []
    inserted: list[dict[int, list[TranscriptEntry]]] = []
    for items in lists[1:]:
        pairs: dict[int, TranscriptEntry] = {}
        extra: dict[int, list[TranscriptEntry]] = {}
        # An unmatched step goes right after the last matched one before it (before any skipped there).
        position, pairs_left = 0, iter(_matched([_anchor_key(item) for item in reference],
                                                [_anchor_key(item) for item in items]))
        pair = next(pairs_left, None)
        for j, item in enumerate(items):
            if pair is not None and pair[1] == j:
                pairs[pair[0]] = item
                position = pair[0] + 1
                pair = next(pairs_left, None)
            else:
                extra.setdefault(position, []).append(item)
        matched.append(pairs)
        inserted.append(extra)
    rows = []
    for position in range(len(reference) + 1):
        for index, extra in enumerate(inserted, start=1):
            for entry in extra.get(position, []):
                rows.append([
                    Step(column.title, entry.kind if number == index else "message",
                         entry if number == index else None, difference=ADDED if number == index else "")
                    for number, column in enumerate(columns)
                ])
        if position == len(reference):
            break
        first = reference[position]
        row = [Step(columns[0].title, first.kind, first)]
        for column, pairs in zip(columns[1:], matched, strict=True):
            other = pairs.get(position)
            if other is None:
                row.append(Step(column.title, "message", None, difference=SKIPPED))
            else:
                difference, fields = _difference(first, other)
                row.append(Step(column.title, other.kind, other, difference=difference, fields=fields))
        rows.append(row)
    return rows


@dataclass
class Row:
    steps: list[Step]
    differs: bool = False
    diverges: bool = False


@dataclass
class Block:
    label: str
    rows: list[Row] = field(default_factory=list)


@dataclass
class Turn:
    key: Any
    blocks: list[Block] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.key == CASE_SCOPE:
            return "Case assertions"
        return f"Turn {self.key}" if isinstance(self.key, int) else "Messages without a turn"

    @property
    def anchor(self) -> str:
        return f"turn-{self.key}"


@dataclass
class Divergence:
    turn: Turn
    block: Block
    position: int
    row: Row

    @property
    def what(self) -> list[str]:
        """Per column that differs from the first on the row, what does, naming the field."""
        first = self.row.steps[0]
        said = []
        for step in self.row.steps[1:]:
            if not step.difference:
                continue
            fields = f" ({', '.join(step.fields)})" if step.fields else ""
            shown = step.entry or first.entry
            name = shown.call.name if isinstance(shown, TranscriptEntry) and shown.call is not None else ""
            if step.difference == SKIPPED:
                text = f"skipped what {first.column} did: {first.describe()}"
            elif step.difference == ADDED:
                text = f"added a step {first.column} did not take: {step.describe()}"
            elif step.difference == DIFFERENT_ARGUMENTS:
                text = f"called {name} with different arguments{fields}"
            elif step.difference == DIFFERENT_RESULT:
                text = f"got a different result from {name}{fields}"
            elif step.difference == DIFFERENT_OUTCOME and step.kind == "tool":
                # A tool step that differs in outcome has its entry on both sides.
                assert step.entry is not None and first.entry is not None
                text = f"{name} was {step.entry.call.outcome or 'run'} where it was {first.entry.call.outcome or 'run'}"
            elif step.difference == DIFFERENT_OUTCOME:
                text = f"a different assertion outcome: {step.describe()} where {first.column} has {first.describe()}"
            else:
                text = "a different message"
            said.append(f"{step.column}: {text}")
        return said


def _scope_turn(scope: Any) -> Any:
    """An assertion's scope ("turn 2", "case") → the turn it belongs with."""
    number = scope.removeprefix("turn ") if isinstance(scope, str) and scope.startswith("turn ") else ""
    return int(number) if number.isascii() and number.isdigit() else CASE_SCOPE


def _steps_by_turn(result: CaseResult) -> tuple[dict[Any, list[TranscriptEntry]], dict[Any, list[dict[str, Any]]]]:
    """A result's transcript entries and assertion outcomes, each by turn."""
    messages = {turn.index: turn.entries for turn in result_transcript(result).turns}
    checks: dict[Any, list[dict[str, Any]]] = {}
    for item in assertion_outcomes(result):
        checks.setdefault(_scope_turn(item.get("scope")), []).append(item)
    return messages, checks


def _turn_order(key: Any) -> tuple[int, int]:
    if key == CASE_SCOPE:
        return (2, 0)
    return (0, key) if isinstance(key, int) else (1, 0)


def _block(label: str, kind: str, columns: list[Column], lists: list[list[Any]]) -> Block:
    block = Block(label)
    if kind == "message":
        for steps in _aligned_rows(columns, lists):
            block.rows.append(Row(steps, differs=any(step.difference for step in steps)))
        return block
    for position in range(max((len(items) for items in lists), default=0)):
        steps = []
        for column, items in zip(columns, lists, strict=True):
            entry = items[position] if position < len(items) else None
            steps.append(Step(column.title, kind, entry))
        first = steps[0].signature
        for step in steps[1:]:
            if step.signature != first:
                step.difference = SKIPPED if step.entry is None else ADDED if first is None else DIFFERENT_OUTCOME
        block.rows.append(Row(steps, differs=any(step.difference for step in steps)))
    return block


def aligned(columns: list[Column]) -> tuple[list[Turn], Divergence | None]:
    """The columns' results aligned by turn (messages, then assertion outcomes), and the first step where they
    differ, marked on its row."""
    read = [_steps_by_turn(column.result) for column in columns]
    keys = sorted({key for messages, checks in read for key in (*messages, *checks)}, key=_turn_order)
    turns, divergence = [], None
    for key in keys:
        turn = Turn(key)
        conversation = [messages.get(key, []) for messages, _ in read]
        outcomes = [checks.get(key, []) for _, checks in read]
        if any(conversation):
            turn.blocks.append(_block("Messages and tool calls", "message", columns, conversation))
        if any(outcomes):
            turn.blocks.append(_block("Assertions", "assertion", columns, outcomes))
        for block in turn.blocks:
            for position, row in enumerate(block.rows):
                if row.differs and divergence is None:
                    row.diverges = True
                    divergence = Divergence(turn, block, position, row)
        turns.append(turn)
    return turns, divergence


def _changed_case(columns: list[Column]) -> dict[str, Any] | None:
    """When two results of different runs ran different contents of the case: where the compare page shows how."""
    if len(columns) != 2:
        return None
    before, after = (column.result for column in columns)
    if not (before.case_hash and after.case_hash and before.case_hash != after.case_hash):
        return None
    url = reverse("runs:compare", kwargs={"run_id": after.run_id})
    return {"url": f"{url}?baseline={before.run_id}#{change_anchor(before.case_hash, after.case_hash)}"}


def _render(
    request: HttpRequest,
    result: CaseResult,
    *,
    heading: str,
    columns: list[Column],
    notice: str = "",
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    turns, divergence = aligned(columns) if len(columns) > 1 else ([], None)
    context = {
        "run": result.run,
        "result": result,
        "heading": heading,
        "columns": columns if len(columns) > 1 else [],
        "column_count": len(columns),
        "turns": turns,
        "divergence": divergence,
        "changed_case": _changed_case(columns),
        "notice": notice,
        "error": error,
        "models_url": reverse("runs:result-models", kwargs={"run_id": result.run_id, "result_id": result.pk}),
    }
    return render(request, "runs/side_by_side.html", context, status=status)


def _result(run_id: int, result_id: int) -> Any:
    """The result, annotated with its run's default baseline (`baseline_id`, `baseline_rank`)."""
    queryset = with_default_baseline(CaseResult.objects.select_related("run__suite"), run="run")
    # run__pk, not run_id: Django keeps an id beyond the column's range out of a pk lookup, not out of a foreign key's.
    return get_object_or_404(queryset, run__pk=run_id, pk=result_id)


def _other(result: CaseResult, wanted: str) -> tuple[CaseResult | None, str]:
    """The result `?with=` names, if it is another result of the same case in the same suite; else why not."""
    other_id = parse_id(wanted.strip())
    if other_id is None:
        shown = wanted if len(wanted) <= QUOTED_CHARS else wanted[:QUOTED_CHARS] + "…"
        return None, f"with: {shown!r} is not a result id (a whole number from 1)."
    other = CaseResult.objects.select_related("run").filter(pk=other_id).first()
    if other is None:
        return None, f"with: there is no result #{other_id}."
    if other.pk == result.pk:
        return None, f"with: result #{other_id} is this result; pick another result of “{result.case_name}”."
    if other.run.suite_id != result.run.suite_id or not is_same_case(other, result):
        return None, (
            f"with: result #{other_id} is of another case (“{other.case_name}”); pick a result of “{result.case_name}”."
        )
    return other, ""


def _baseline_result(result: Any) -> CaseResult | None:
    """The same case on the same model in the run's default baseline, the trial that shows its verdict best."""
    candidates = list(
        same_case(CaseResult.objects.filter(run_id=result.baseline_id, model=result.model), result=result)
        .select_related("run")
        .order_by("position", "id")
    )
    best = shows_best([candidate.status for candidate in candidates])
    return None if best is None else candidates[best]


@login_required
@require_GET
def result_side_by_side_page(request: HttpRequest, run_id: int, result_id: int) -> HttpResponse:
    """A result beside another result of its case: `?with=<result id>`, by default the same case on the same model
    in the run's baseline (the suite's blessed run, else the previous run). The earlier run is on the left."""
    result = _result(run_id, result_id)
    heading = f"{result.case_name}: side by side"
    other, notice = None, ""
    if "with" in request.GET:
        other, error = _other(result, request.GET["with"])
        if other is None:
            return _render(request, result, heading=heading, columns=[], error=error, status=400)
    elif result.baseline_id is None:
        notice = f"Run #{result.run_id} is the first run of {result.run.suite.name}: there is no baseline to show."
    else:
        other = _baseline_result(result)
        if other is None:
            notice = f"Baseline #{result.baseline_id} did not run “{result.case_name}” on {result.model}."
    baseline_note = "the blessed baseline" if result.baseline_rank == 0 else "the baseline: the previous run"
    columns = [
        Column(shown, "this result" if shown == result else baseline_note if shown.run_id == result.baseline_id else "")
        for shown in sorted([result, *([other] if other else [])], key=lambda item: (item.run_id, item.position))
    ]
    return _render(request, result, heading=heading, columns=columns, notice=notice)


@login_required
@require_GET
def result_models_page(request: HttpRequest, run_id: int, result_id: int) -> HttpResponse:
    """A result's case on every model of its run, side by side (the same trial of each), in the run's model order."""
    result = get_object_or_404(CaseResult.objects.select_related("run__suite"), run__pk=run_id, pk=result_id)
    order = {model: index for index, model in enumerate(result.run.model_keys)}
    results = sorted(
        same_case(CaseResult.objects.filter(run_id=result.run_id, trial=result.trial), result=result),
        key=lambda item: (order.get(item.model, len(order)), item.model),
    )
    columns = [Column(item, "this result" if item == result else "", show_run=False) for item in results]
    notice = "" if len(columns) > 1 else f"Only {result.model} ran “{result.case_name}” in run #{result.run_id}."
    trial = f" (trial {result.trial + 1})" if result.run.trials > 1 else ""
    heading = f"{result.case_name}: every model of run #{result.run_id}{trial}"
    return _render(request, result, heading=heading, columns=columns, notice=notice)
