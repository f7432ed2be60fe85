"""A run against an earlier run of the same suite: per model, the cases whose verdict flipped (with their reasons),
how the numbers moved, and what differs between the two runs (the agent as snapshotted, the models, the cases).

The default baseline is the suite's blessed run when it is earlier than the run, else the previous run that finished
with results. A run is never its own baseline.

A case is matched across runs by its id, or by its name once it has been deleted (its results keep the name). Error
counts as not passing, like Failed: a model that used to pass and now errors has regressed. A Cancelled result did not
run, so it neither flips nor counts as new or gone. With several trials a case passes on a model only when every trial
that ran passed.

What a case tested is compared as each run ran it: a result keeps the hash of its case's content, and the run stored
that content when it planned the case (runs.models.CaseSnapshot). An edit made after both runs changes neither.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.db import models
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Value, When

from cases.models import Case
from runs.models import CaseResult, CaseSnapshot, Run
from runs.selectors import ModelSummary

EARLIER_RUNS_LIMIT = 50

BROKE, FIXED, NEW, GONE = "broke", "fixed", "new", "gone"
FLIP_LABELS = {BROKE: "pass → fail", FIXED: "fail → pass", NEW: "new", GONE: "gone"}


_SHOWS_BEST = {"cancelled": 0, "passed": 1, "failed": 2, "error": 2}


class ComparisonError(Exception):
    pass


@dataclass
class Flip:
    case_name: str
    case_id: int | None
    kind: str
    model: str = ""
    baseline_status: str = ""
    baseline_result_id: int | None = None
    current_status: str = ""
    current_result_id: int | None = None
    baseline_reason: str = ""
    current_reason: str = ""
    baseline_hash: str = ""
    current_hash: str = ""
    # What changed between the two runs for this case on this model (CAUSES' words, in their order); empty when
    # nothing that agenttest keeps did — the model answered differently.
    causes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return FLIP_LABELS[self.kind]

    @property
    def case_changed(self) -> bool:
        """The two runs ran different contents of the case (unknown, so False, when one result kept no hash)."""
        return bool(self.baseline_hash and self.current_hash and self.baseline_hash != self.current_hash)

    @property
    def change_anchor(self) -> str:
        return change_anchor(self.baseline_hash, self.current_hash)

    @property
    def matrix_key(self) -> str:
        """The key of its row in the run's matrix (runs.selectors.matrix_case_key)."""
        return str(self.case_id) if self.case_id is not None else f"name:{self.case_name}"


@dataclass
class ModelComparison:
    model: str
    in_baseline: bool
    in_current: bool
    flips: dict[str, list[Flip]] = field(default_factory=lambda: {kind: [] for kind in FLIP_LABELS})
    unchanged: int = 0
    not_compared: int = 0

    @property
    def changed(self) -> int:
        return sum(len(items) for items in self.flips.values())

    def sections(self) -> list[tuple[str, str, list[Flip]]]:
        """(kind, label, flips) for every kind, regressions first."""
        return [(kind, FLIP_LABELS[kind], self.flips[kind]) for kind in FLIP_LABELS]


def earlier_runs(*, run: Run, limit: int = EARLIER_RUNS_LIMIT) -> QuerySet[Run]:
    """Runs of the same suite triggered before `run`, newest first: the baselines it can be compared with."""
    return (
        Run.objects.filter(suite_id=run.suite_id, pk__lt=run.pk)
        .only("id", "status", "model_keys", "created_at", "suite_id", "blessed_at")
        .order_by("-pk")[:limit]
    )


def _baseline_rank() -> models.Case:
    """How well an earlier run serves as the default baseline: the blessed run, then a run that finished with
    verdicts, then any; the most recent first within a rank."""
    return models.Case(
        When(blessed_at__isnull=False, then=Value(0)),
        When(status__in=[Run.Status.PASSED, Run.Status.FAILED], then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )


def default_baseline(*, run: Run) -> Run | None:
    """The suite's blessed run if it is earlier than `run`; else the most recent earlier run that finished with
    results; else the most recent earlier run. One query."""
    return (
        Run.objects.filter(suite_id=run.suite_id, pk__lt=run.pk)
        .select_related("suite")
        .annotate(rank=_baseline_rank())
        .order_by("rank", "-pk")
        .first()
    )


def with_default_baseline(queryset: QuerySet[Any], *, run: str = "") -> QuerySet[Any]:
    """`queryset` with, on each row, its run's default baseline (as default_baseline picks it) in the same query:
    `baseline_id` (None when the suite has no earlier run) and `baseline_rank` (0: it is the blessed run). `run` is the
    path from the rows to their run ("run" for results), empty for runs themselves."""
    prefix = f"{run}__" if run else ""
    earlier = (
        Run.objects.filter(suite_id=OuterRef(f"{prefix}suite_id"), pk__lt=OuterRef(f"{prefix}pk"))
        .annotate(rank=_baseline_rank())
        .order_by("rank", "-pk")
    )
    return queryset.annotate(
        baseline_id=Subquery(earlier.values("pk")[:1]),
        baseline_rank=Subquery(earlier.values("rank")[:1]),
    )


def baseline_get(*, run: Run, baseline_id: int) -> Run:
    """The run `baseline_id` if it can serve as `run`'s baseline; ComparisonError says why not otherwise."""
    baseline = Run.objects.select_related("suite").filter(pk=baseline_id).first()
    if baseline is None:
        raise ComparisonError(f"there is no run #{baseline_id}")
    if baseline.suite_id != run.suite_id:
        raise ComparisonError(f"run #{baseline_id} is of another suite ({baseline.suite.name}); pick a run of this one")
    if baseline.pk >= run.pk:
        raise ComparisonError(f"run #{baseline_id} is not earlier than run #{run.pk}; pick an earlier run")
    return baseline


def _verdict(ran: int, passed: int) -> str | None:
    """Over a case's trials on one model: "pass" when every trial that ran passed, "fail" when one failed or
    errored, None when none ran."""
    if not ran:
        return None
    return "pass" if passed == ran else "fail"


def flip_kind(before: str | None, after: str | None) -> str | None:
    """BROKE or FIXED when a case's verdict on a model went from pass to fail or back; None when it did not flip
    (or one of the two runs did not run it)."""
    if before is None or after is None or before == after:
        return None
    return BROKE if before == "pass" else FIXED


Results = dict[str, dict[Any, dict[str, Any]]]


def _case_key(case_id: int | None, case_name: str) -> Any:
    return case_id if case_id is not None else ("name", case_name)


def compared_results_of(*, run_ids: list[int]) -> dict[int, Results]:
    """Per run, per model, per case: the verdict over its trials, the result that shows it best (the first that did
    not pass, else the first that passed), the content hash and position of its first trial. One query for all the
    runs; run_compare and run_differences take a pair of them so a page reads each run's results once."""
    by_run: dict[int, Results] = {run_id: {} for run_id in run_ids}
    rows = CaseResult.objects.filter(run_id__in=run_ids).order_by("position", "id").values(
        "id", "run_id", "case_id", "case_name", "model", "status", "reason", "case_hash", "position"
    )
    # Rows of .values(): their keys are popped and spread as they come.
    row: Any
    for row in rows:
        cases = by_run[row.pop("run_id")].setdefault(row["model"], {})
        entry = cases.setdefault(_case_key(row["case_id"], row["case_name"]), {**row, "statuses": []})
        entry["statuses"].append(row["status"])
        if _SHOWS_BEST[row["status"]] > _SHOWS_BEST[entry["status"]]:
            entry.update(id=row["id"], status=row["status"], reason=row["reason"])
    for results in by_run.values():
        for cases in results.values():
            for entry in cases.values():
                entry["verdict"] = verdict_of(entry["statuses"])
    return by_run


def compared_results(*, run: Run) -> Results:
    """compared_results_of one run. One query."""
    return compared_results_of(run_ids=[run.pk])[run.pk]


def _flip(kind: str, model: str, old_row: dict[str, Any] | None, new_row: dict[str, Any] | None) -> Flip:
    row = new_row or old_row or {}
    return Flip(
        case_name=row["case_name"],
        case_id=row["case_id"],
        kind=kind,
        model=model,
        baseline_status=old_row["status"] if old_row else "",
        baseline_result_id=old_row["id"] if old_row else None,
        current_status=new_row["status"] if new_row else "",
        current_result_id=new_row["id"] if new_row else None,
        baseline_reason=old_row["reason"] if old_row else "",
        current_reason=new_row["reason"] if new_row else "",
        baseline_hash=old_row["case_hash"] if old_row else "",
        current_hash=new_row["case_hash"] if new_row else "",
    )


@dataclass
class Flipped:
    """What flipped since a run's default baseline: regressions (passed there; failed or errored now) and fixes,
    each in the run's case order, then its model order."""

    baseline_id: int
    blessed: bool
    regressions: list[Flip] = field(default_factory=list)
    fixes: list[Flip] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.regressions) + len(self.fixes)

    @cached_property
    def by_cell(self) -> dict[tuple[str, str], Flip]:
        """(matrix row key, model) → its flip."""
        return {(flip.matrix_key, flip.model): flip for flip in [*self.regressions, *self.fixes]}


def run_flipped(*, run: Run) -> Flipped | None:
    """What flipped since `run`'s default baseline; None when its suite has no earlier run. `run` must come from
    with_default_baseline. One query (both runs' results)."""
    baseline_id = getattr(run, "baseline_id", None)
    if baseline_id is None:
        return None
    results = compared_results_of(run_ids=[run.pk, baseline_id])
    current, previous = results[run.pk], results[baseline_id]
    models = list(dict.fromkeys([*run.model_keys, *current]))
    # Where the run first reached each case, on any model: the run's case order.
    case_order: dict[Any, int] = {}
    for cases in current.values():
        for key, row in cases.items():
            case_order[key] = min(case_order.get(key, row["position"]), row["position"])
    flips = []
    for model in models:
        before = previous.get(model, {})
        for key, new_row in current.get(model, {}).items():
            old_row = before.get(key)
            kind = flip_kind(old_row["verdict"] if old_row else None, new_row["verdict"])
            if kind is not None:
                flips.append((case_order[key], models.index(model), _flip(kind, model, old_row, new_row)))
    flipped = Flipped(baseline_id=baseline_id, blessed=getattr(run, "baseline_rank", None) == 0)
    for _, _, flip in sorted(flips, key=lambda item: item[:2]):
        (flipped.regressions if flip.kind == BROKE else flipped.fixes).append(flip)
    if flips:
        cause_finder(run_id=run.pk, baseline_id=baseline_id).annotate([flip for *_, flip in flips])
    return flipped


def cause_finder(*, run_id: int, baseline_id: int) -> CauseFinder:
    """The CauseFinder of two runs, their snapshots read here: one query."""
    snapshots = dict(Run.objects.filter(pk__in=[run_id, baseline_id]).values_list("pk", "agent_snapshot"))
    return CauseFinder(baseline_snapshot=snapshots.get(baseline_id) or {}, run_snapshot=snapshots.get(run_id) or {})


def verdict_of(statuses: list[str]) -> str | None:
    """_verdict over a case's trials on one model, from their statuses."""
    ran = [status for status in statuses if status != CaseResult.Status.CANCELLED]
    return _verdict(len(ran), ran.count(CaseResult.Status.PASSED))


def same_case(results: QuerySet[CaseResult], *, result: CaseResult) -> QuerySet[CaseResult]:
    """`results` narrowed to the case of `result`: by its id, or by its name once the case was deleted."""
    if result.case_id is not None:
        return results.filter(case_id=result.case_id)
    return results.filter(case_id__isnull=True, case_name=result.case_name)


def is_same_case(one: CaseResult, other: CaseResult) -> bool:
    """same_case for two results in hand (of one suite)."""
    return one.case_id == other.case_id and (one.case_id is not None or one.case_name == other.case_name)


def shows_best(statuses: list[str]) -> int | None:
    """Of a case's trials on one model, the index of the one that shows their verdict best: the first that did not
    pass, else the first that passed (else the first); None when there is none."""
    if not statuses:
        return None
    return max(range(len(statuses)), key=lambda index: (_SHOWS_BEST[statuses[index]], -index))


@dataclass
class InBaseline:
    """A result's case on its model in its run's default baseline: that run, the result there that shows its verdict
    best (None when the baseline did not run the case on the model), its verdict and how the verdict flipped."""

    run_id: int
    blessed: bool
    result_id: int | None = None
    status: str = ""
    reason: str = ""
    kind: str | None = None
    # Both runs judged the case on the model, alike.
    same: bool = False
    case_hash: str = ""
    # When it flipped: what changed between the two runs for it (CAUSES).
    causes: list[str] = field(default_factory=list)


def result_in_baseline(*, result: CaseResult, verdict: str | None) -> InBaseline | None:
    """Where `result` (from with_default_baseline(…, run="run")), whose case has `verdict` on its model over the
    run's trials, stood in the run's default baseline; None when the suite has no earlier run. One query, and when it
    flipped one more for the two runs' snapshots."""
    baseline_id = getattr(result, "baseline_id", None)
    if baseline_id is None:
        return None
    found = InBaseline(run_id=baseline_id, blessed=getattr(result, "baseline_rank", None) == 0)
    rows = list(
        same_case(CaseResult.objects.filter(run_id=baseline_id, model=result.model), result=result)
        .order_by("position", "id")
        .values("id", "status", "reason", "case_hash")
    )
    if rows:
        best = rows[shows_best([row["status"] for row in rows]) or 0]
        found.result_id, found.status, found.reason = best["id"], best["status"], best["reason"]
        found.case_hash = rows[0]["case_hash"]
        there = verdict_of([row["status"] for row in rows])
        found.kind = flip_kind(there, verdict)
        found.same = there is not None and there == verdict
        if found.kind is not None:
            names = {"case_name": result.case_name, "case_id": result.case_id}
            flip = _flip(found.kind, result.model, {**rows[0], **names}, {
                "id": result.pk, "status": result.status, "reason": result.reason, "case_hash": result.case_hash,
                **names,
            })
            found.causes = cause_finder(run_id=result.run_id, baseline_id=baseline_id).causes(flip)
    return found


@dataclass
class RunVerdicts:
    """A run's verdicts, per model and case, counted over its trials; what the runs list shows of it."""

    by_model: dict[str, dict[Any, tuple[int, int]]] = field(default_factory=dict)

    def add(self, model: str, key: Any, ran: int, passed: int) -> None:
        cases = self.by_model.setdefault(model, {})
        had_ran, had_passed = cases.get(key, (0, 0))
        cases[key] = (had_ran + ran, had_passed + passed)

    def totals(self, model: str) -> tuple[int, int]:
        """(results that ran, results that passed) of `model`, every trial counted."""
        counts = self.by_model.get(model, {}).values()
        return sum(ran for ran, _ in counts), sum(passed for _, passed in counts)

    def flips_since(self, baseline: RunVerdicts) -> tuple[int, int]:
        """(regressions, fixes) from `baseline` to this run, by flip_kind."""
        kinds: list[str | None] = []
        for model, cases in self.by_model.items():
            before = baseline.by_model.get(model, {})
            for key, (ran, passed) in cases.items():
                if key in before:
                    kinds.append(flip_kind(_verdict(*before[key]), _verdict(ran, passed)))
        return kinds.count(BROKE), kinds.count(FIXED)


def runs_verdicts(*, run_ids: list[int]) -> dict[int, RunVerdicts]:
    """Per run, its verdicts, counted by the database over the trials of each case × model. One query."""
    verdicts = {run_id: RunVerdicts() for run_id in run_ids}
    rows = (
        CaseResult.objects.filter(run_id__in=run_ids)
        .order_by()
        .values_list("run_id", "model", "case_id", "case_name")
        .annotate(
            ran=Count("id", filter=~Q(status=CaseResult.Status.CANCELLED)),
            passed=Count("id", filter=Q(status=CaseResult.Status.PASSED)),
        )
    )
    for run_id, model, case_id, case_name, ran, passed in rows:
        verdicts[run_id].add(model, _case_key(case_id, case_name), ran, passed)
    return verdicts


def run_compare(
    *, run: Run, baseline: Run, results: tuple[Results, Results] | None = None
) -> list[ModelComparison]:
    """Per model (the run's models first, then models only the baseline had), the flips from `baseline` to `run`,
    each list in the run's case order. `results`: both runs' compared_results (run's, baseline's), else read here
    in two queries."""
    current, previous = results or (compared_results(run=run), compared_results(run=baseline))
    models = list(dict.fromkeys([*run.model_keys, *current, *baseline.model_keys, *previous]))
    comparisons = []
    for model in models:
        now, before = current.get(model, {}), previous.get(model, {})
        comparison = ModelComparison(
            model=model,
            in_baseline=model in baseline.model_keys or model in previous,
            in_current=model in run.model_keys or model in current,
        )
        for key in [*now, *(key for key in before if key not in now)]:
            new_row, old_row = now.get(key), before.get(key)
            new_verdict = new_row["verdict"] if new_row else None
            old_verdict = old_row["verdict"] if old_row else None
            if (new_row and new_verdict is None) or (old_row and old_verdict is None):
                comparison.not_compared += 1
                continue
            if new_verdict == old_verdict:
                comparison.unchanged += 1
                continue
            if old_row is None:
                kind = NEW
            elif new_row is None:
                kind = GONE
            else:
                flipped_kind = flip_kind(old_verdict, new_verdict)
                assert flipped_kind is not None, "both verdicts are known and differ"
                kind = flipped_kind
            comparison.flips[kind].append(_flip(kind, model, old_row, new_row))
        comparisons.append(comparison)
    flips = [flip for comparison in comparisons for kind in (BROKE, FIXED) for flip in comparison.flips[kind]]
    if flips:
        CauseFinder(baseline_snapshot=baseline.agent_snapshot or {}, run_snapshot=run.agent_snapshot or {}).annotate(
            flips
        )
    return comparisons


# --- How the numbers moved ----------------------------------------------------------------------------------------


@dataclass
class ModelDelta:
    """One model's figures in the baseline and in the run; None where the model is missing from one of them."""

    model: str
    baseline: ModelSummary | None
    current: ModelSummary | None

    def _both(self, attribute: str) -> tuple[Any, Any] | None:
        if self.baseline is None or self.current is None:
            return None
        before, after = getattr(self.baseline, attribute), getattr(self.current, attribute)
        return None if before is None or after is None else (before, after)

    @property
    def pass_rate_points(self) -> float | None:
        both = self._both("pass_rate")
        return None if both is None else (both[1] - both[0]) * 100

    @property
    def p50_ms(self) -> float | None:
        both = self._both("latency_p50_ms")
        return None if both is None else both[1] - both[0]

    @property
    def p95_ms(self) -> float | None:
        both = self._both("latency_p95_ms")
        return None if both is None else both[1] - both[0]

    @property
    def tokens(self) -> int | None:
        both = self._both("total_tokens")
        return None if both is None else both[1] - both[0]

    @property
    def cost(self) -> Any:
        both = self._both("total_cost")
        return None if both is None else both[1] - both[0]


def model_deltas(*, baseline: list[ModelSummary], current: list[ModelSummary]) -> list[ModelDelta]:
    """Per model (the run's first, then the baseline's others): the two summaries side by side."""
    before = {summary.model: summary for summary in baseline}
    after = {summary.model: summary for summary in current}
    return [ModelDelta(model, before.get(model), after.get(model)) for model in dict.fromkeys([*after, *before])]


# --- What differs between the two runs ----------------------------------------------------------------------------


# The parts of a case's content, in the order a reviewer reads them.
CASE_PARTS = (
    ("turns", "Turns and their assertions"),
    ("simulated_user", "Simulated user"),
    ("assertions", "Case assertions"),
    ("mocks", "Mocks"),
    ("tables", "Tables of the stateful mocks"),
    ("history", "History"),
    ("initial_state", "Initial state"),
    ("entry_agent", "Entry agent"),
    ("type", "Type"),
    ("unmocked_policy", "Unmocked calls"),
)


def change_anchor(baseline_hash: str, current_hash: str) -> str:
    """The compare page's anchor of the diff between two contents of a case."""
    return f"case-change-{baseline_hash[:12]}-{current_hash[:12]}"


@dataclass
class CaseChange:
    """A case the two runs ran with different contents: per part that differs, the unified diff of its JSON from
    the baseline's content to the run's. `not_recorded` names the runs whose content was not stored (runs planned
    before snapshots were kept); then there are no parts."""

    case_name: str
    case_id: int | None
    baseline_hash: str
    current_hash: str
    parts: list[tuple[str, list[str]]] = field(default_factory=list)
    not_recorded: list[int] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return change_anchor(self.baseline_hash, self.current_hash)


def _pretty(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str).splitlines()


def _readable(key: str, value: Any) -> Any:
    """A mock's result is text, usually JSON: shown as the JSON it holds, a line per field, so a diff points at the
    field that changed rather than at one long escaped line."""
    if key != "mocks" or not isinstance(value, list):
        return value
    shown = []
    for mock in value:
        if isinstance(mock, dict) and isinstance(mock.get("result"), str):
            try:
                parsed = json.loads(mock["result"])
            except ValueError:
                parsed = None
            if isinstance(parsed, (dict, list)):
                mock = {**mock, "result": parsed}
        shown.append(mock)
    return shown


def _case_parts(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, list[str]]]:
    parts = []
    for key, label in CASE_PARTS:
        if before.get(key) != after.get(key):
            old, new = _pretty(_readable(key, before.get(key))), _pretty(_readable(key, after.get(key)))
            lines = difflib.unified_diff(old, new, lineterm="", n=2)
            # Past the two file-name lines: the runs are named by the page.
            parts.append((label, list(lines)[2:]))
    return parts


def _case_changes(
    *, run: Run, baseline: Run, current: Results, previous: Results
) -> list[CaseChange]:
    """The cases whose results in the two runs kept different content hashes, in the run's case order, each with
    its diff from the snapshots both runs stored. One query, none when no case changed."""
    changes: dict[tuple[str, str], CaseChange] = {}
    for model, cases in current.items():
        before = previous.get(model, {})
        for key, row in cases.items():
            old_hash, new_hash = (before.get(key) or {}).get("case_hash"), row["case_hash"]
            if old_hash and new_hash and old_hash != new_hash and (old_hash, new_hash) not in changes:
                changes[(old_hash, new_hash)] = CaseChange(
                    case_name=row["case_name"], case_id=row["case_id"], baseline_hash=old_hash, current_hash=new_hash
                )
    if not changes:
        return []
    stored = dict(
        CaseSnapshot.objects.filter(content_hash__in={h for pair in changes for h in pair}).values_list(
            "content_hash", "content"
        )
    )
    for change in changes.values():
        old, new = stored.get(change.baseline_hash), stored.get(change.current_hash)
        change.not_recorded = [pk for pk, content in ((baseline.pk, old), (run.pk, new)) if content is None]
        if old is not None and new is not None:
            change.parts = _case_parts(old, new)
    return list(changes.values())


# Why a case on a model may have flipped, in the words every page uses (one badge each): its agent (or a sub-agent it
# can reach) changed, the case's content changed, the model's configuration changed, or the recording a replay
# served changed.
AGENT_CHANGED, CASE_CHANGED, MODEL_CHANGED, RECORDING_CHANGED = (
    "agent changed", "case changed", "model changed", "recording changed"
)
CAUSES = (AGENT_CHANGED, CASE_CHANGED, MODEL_CHANGED, RECORDING_CHANGED)
# The parts of an agent's snapshot a comparison reads, with their labels; an agent's tools are compared by schema.
AGENT_FIELDS = (
    ("model", "Model"), ("temperature", "Temperature"), ("max_steps", "Max steps"), ("runtime", "Runtime"),
    ("entry", "Entry point"), ("sub_agents", "Sub-agents"), ("rules", "Rules"),
)


@dataclass
class AgentChange:
    """One agent the two runs could reach that differs: added (reached only by the run), removed (only by the
    baseline) or changed, with what changed. For the suite's own agent, what the lines above it show (instruction,
    model, temperature, tools, sub-agents) is left out."""

    name: str
    status: str
    entry: bool = False
    fields: list[tuple[str, Any, Any]] = field(default_factory=list)
    instruction_diff: list[str] = field(default_factory=list)
    tool_changes: list[tuple[str, list[str]]] = field(default_factory=list)
    code_changed: bool = False


def _instruction_diff(before: Any, after: Any, *, baseline_id: int, run_id: int) -> list[str]:
    if not isinstance(before, str) or not isinstance(after, str):
        return []
    return list(difflib.unified_diff(
        before.splitlines(), after.splitlines(), fromfile=f"run #{baseline_id}", tofile=f"run #{run_id}", lineterm=""
    ))[2:]


def _tool_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, list[str]]]:
    old_tools, new_tools = _tools(old), _tools(new)
    kinds = (
        ("changed", [name for name in new_tools if name in old_tools and new_tools[name] != old_tools[name]]),
        ("added", [name for name in new_tools if name not in old_tools]),
        ("removed", [name for name in old_tools if name not in new_tools]),
    )
    return [(label, names) for label, names in kinds if names]


def agent_changes(*, baseline: Run, run: Run) -> list[AgentChange]:
    """Every agent either run could reach (its snapshot's "agents") that differs between them, the suite's agent
    first, then the run's order, then those only the baseline reached. Empty when either run predates per-agent
    snapshots."""
    old_all, new_all = (baseline.agent_snapshot or {}).get("agents"), (run.agent_snapshot or {}).get("agents")
    if not isinstance(old_all, dict) or not isinstance(new_all, dict):
        return []
    entry = (run.agent_snapshot or {}).get("agent")
    changes = []
    new_order = (run.agent_snapshot or {}).get("agents_order") or list(new_all)
    old_order = (baseline.agent_snapshot or {}).get("agents_order") or list(old_all)
    for name in dict.fromkeys([*new_order, *new_all, *old_order, *old_all]):
        old, new = old_all.get(name), new_all.get(name)
        if old is None or new is None:
            changes.append(AgentChange(name=name, status="added" if old is None else "removed", entry=name == entry))
            continue
        is_entry = name == entry and name == (baseline.agent_snapshot or {}).get("agent")
        shown_above = {"model", "temperature", "sub_agents"} if is_entry else set()
        change = AgentChange(name=name, status="changed", entry=is_entry)
        change.fields = [
            (label, old.get(key), new.get(key)) for key, label in AGENT_FIELDS
            if key not in shown_above and old.get(key) != new.get(key)
        ]
        if not is_entry:
            if old.get("instruction_hash") != new.get("instruction_hash"):
                change.instruction_diff = _instruction_diff(
                    old.get("instruction"), new.get("instruction"), baseline_id=baseline.pk, run_id=run.pk
                ) or ["(the instruction changed)"]
            change.tool_changes = _tool_changes(old, new)
        change.code_changed = old.get("code_hash", "") != new.get("code_hash", "")
        if change.fields or change.instruction_diff or change.tool_changes or change.code_changed:
            changes.append(change)
    return changes


def _reachable(agents: dict[str, Any], start: str) -> set[str]:
    reached, pending = set(), [start]
    while pending:
        name = pending.pop()
        if name in reached or name not in agents:
            continue
        reached.add(name)
        pending.extend(agents[name].get("sub_agents") or [])
    return reached


def _agent_part(snapshot: dict[str, Any], agents_reached: set[str] | None) -> Any:
    """What of a run's agent snapshot a case's verdict can depend on: the agents it can reach, or (runs without
    per-agent snapshots) the suite's agent as kept at the top level."""
    agents = snapshot.get("agents")
    if isinstance(agents, dict) and agents_reached is not None:
        return {name: agents.get(name) for name in sorted(agents_reached)}
    return {key: snapshot.get(key) for key in ("agent", "instruction_hash", "model", "temperature", "sub_agents")} | {
        "functions": _tools(snapshot)
    }


class CauseFinder:
    """The causes (CAUSES) of a flip of a case on a model between two runs, from their agent snapshots — which keep
    the agents, the models' configuration and, for a replay, the version of each recording served — and the case
    hashes their results kept. Reads nothing more."""

    def __init__(self, *, baseline_snapshot: dict[str, Any], run_snapshot: dict[str, Any]) -> None:
        self.old, self.new = baseline_snapshot or {}, run_snapshot or {}

    def _agents_changed(self, entry: str) -> bool:
        old_agents, new_agents = self.old.get("agents"), self.new.get("agents")
        if isinstance(old_agents, dict) and isinstance(new_agents, dict):
            reached = _reachable(old_agents, entry) | _reachable(new_agents, entry)
            return _agent_part(self.old, reached) != _agent_part(self.new, reached)
        return _agent_part(self.old, None) != _agent_part(self.new, None)

    def causes(self, flip: Flip) -> list[str]:
        found = []
        entry = (self.new.get("case_entry_agents") or {}).get(str(flip.case_id)) or self.new.get("agent") or ""
        if self._agents_changed(entry):
            found.append(AGENT_CHANGED)
        if flip.case_changed:
            found.append(CASE_CHANGED)
        old_models, new_models = self.old.get("models") or {}, self.new.get("models") or {}
        if flip.model in old_models and flip.model in new_models and old_models[flip.model] != new_models[flip.model]:
            found.append(MODEL_CHANGED)
        old_tapes, new_tapes = self.old.get("recordings"), self.new.get("recordings")
        if isinstance(old_tapes, dict) and isinstance(new_tapes, dict) and flip.case_id is not None:
            key = f"{flip.case_id} {flip.model}"
            if old_tapes.get(key) != new_tapes.get(key):
                found.append(RECORDING_CHANGED)
        return found

    def annotate(self, flips: list[Flip]) -> None:
        for flip in flips:
            flip.causes = self.causes(flip)


@dataclass
class RunDifferences:
    agent: tuple[str, str] | None = None
    models_added: list[str] = field(default_factory=list)
    models_removed: list[str] = field(default_factory=list)
    model: tuple[str, str] | None = None
    temperature: tuple[Any, Any] | None = None
    # Unified diff lines of the instruction; `instruction_changed` alone when only hashes are known (older runs).
    instruction_changed: bool = False
    instruction_diff: list[str] = field(default_factory=list)
    tools_added: list[str] = field(default_factory=list)
    tools_removed: list[str] = field(default_factory=list)
    tools_changed: list[str] = field(default_factory=list)
    sub_agents: tuple[list[str], list[str]] | None = None
    # Every agent the runs could reach that differs (sub-agents as much as the suite's own), when both kept them.
    agents: list[AgentChange] = field(default_factory=list)
    cases_added: list[dict[str, Any]] = field(default_factory=list)
    cases_removed: list[dict[str, Any]] = field(default_factory=list)
    cases_changed: list[CaseChange] = field(default_factory=list)
    mode: tuple[str, str] | None = None
    trials: tuple[int, int] | None = None

    @property
    def tool_changes(self) -> list[tuple[str, list[str]]]:
        """(what happened, tool names) for each kind of change that happened: changed, added, removed."""
        kinds = (("changed", self.tools_changed), ("added", self.tools_added), ("removed", self.tools_removed))
        return [(label, names) for label, names in kinds if names]

    @property
    def agent_changed(self) -> bool:
        return bool(
            self.agent or self.model or self.temperature or self.instruction_changed or self.tools_added
            or self.tools_removed or self.tools_changed or self.sub_agents or self.agents
        )

    @property
    def any(self) -> bool:
        return bool(
            self.agent_changed or self.models_added or self.models_removed or self.cases_added
            or self.cases_removed or self.cases_changed or self.mode or self.trials
        )


def _tools(snapshot: dict[str, Any]) -> dict[str, str]:
    """Tool name → its schema as canonical JSON, from a snapshot's OpenAI-style tool list."""
    tools = {}
    for tool in snapshot.get("functions") or []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function", tool)
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str):
            tools[name] = json.dumps(function, sort_keys=True, default=str)
    return tools


def _changed(before: Any, after: Any) -> tuple[Any, Any] | None:
    return None if before == after else (before, after)


def run_differences(
    *, run: Run, baseline: Run, results: tuple[Results, Results] | None = None
) -> RunDifferences:
    """What differs between `baseline` and `run`: the agent as snapshotted at trigger time (name, model,
    temperature, instruction, tool schemas, sub-agents), the models, mode and trials, and the cases — selected by
    one and not the other, or run with different contents (what changed, from what each run ran). Both runs need
    their agent_snapshot and case_ids loaded. `results` as for run_compare. A query for the names of the cases only
    one run selected, when there are any, and one for the contents of the cases that changed, when any did."""
    old, new = baseline.agent_snapshot or {}, run.agent_snapshot or {}
    differences = RunDifferences(
        agent=_changed(old.get("agent"), new.get("agent")),
        models_added=[key for key in run.model_keys if key not in baseline.model_keys],
        models_removed=[key for key in baseline.model_keys if key not in run.model_keys],
        model=_changed(old.get("model"), new.get("model")),
        temperature=_changed(old.get("temperature"), new.get("temperature")),
        mode=_changed(baseline.mode, run.mode),
        trials=_changed(baseline.trials, run.trials),
    )
    if old.get("instruction_hash") != new.get("instruction_hash"):
        differences.instruction_changed = True
        if isinstance(old.get("instruction"), str) and isinstance(new.get("instruction"), str):
            differences.instruction_diff = list(
                difflib.unified_diff(
                    old["instruction"].splitlines(), new["instruction"].splitlines(),
                    fromfile=f"run #{baseline.pk}", tofile=f"run #{run.pk}", lineterm="",
                )
            )[2:]
    old_tools, new_tools = _tools(old), _tools(new)
    differences.tools_added = [name for name in new_tools if name not in old_tools]
    differences.tools_removed = [name for name in old_tools if name not in new_tools]
    differences.tools_changed = [name for name in new_tools if name in old_tools and new_tools[name] != old_tools[name]]
    old_subs, new_subs = list(old.get("sub_agents") or []), list(new.get("sub_agents") or [])
    if old_subs != new_subs:
        differences.sub_agents = (old_subs, new_subs)
    differences.agents = agent_changes(baseline=baseline, run=run)
    old_ids, new_ids = list(baseline.case_ids or []), list(run.case_ids or [])
    old_set, new_set = set(old_ids), set(new_ids)
    added, removed = [pk for pk in new_ids if pk not in old_set], [pk for pk in old_ids if pk not in new_set]
    cases: dict[int, Any] = {
        row["id"]: row for row in Case.objects.filter(pk__in={*added, *removed}).values("id", "name")
    }
    differences.cases_added = [cases[pk] for pk in added if pk in cases]
    differences.cases_removed = [cases.get(pk, {"id": pk, "name": f"case {pk} (deleted)"}) for pk in removed]
    current, previous = results or (compared_results(run=run), compared_results(run=baseline))
    differences.cases_changed = _case_changes(run=run, baseline=baseline, current=current, previous=previous)
    return differences
