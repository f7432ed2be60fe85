"""Reads for runs: lists, per-model comparison, the case × model matrix, and trial stability (pass^k)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from agenthost.seams import Conversation
from common.queues import group_queue
from runs.engine.leases import unpicked_runs
from runs.engine.tags import TEST_TAG, run_tag
from runs.engine.workers import live_workers
from runs.models import CaseResult, Recording, Run, RunLock


def run_list(*, suite_id: int | None = None, status: str = "") -> QuerySet[Run]:
    qs = Run.objects.select_related("suite", "suite__agent", "triggered_by")
    if suite_id:
        qs = qs.filter(suite_id=suite_id)
    if status:
        qs = qs.filter(status=status)
    return qs


def run_results(*, run: Run) -> QuerySet[CaseResult]:
    return CaseResult.objects.filter(run=run).order_by("position", "id")


def run_lock_holder(*, group: str = RunLock.DEFAULT_GROUP) -> Run | None:
    """The run holding the run lock of `group`, while its hold has not expired."""
    lock = RunLock.objects.filter(group=group, run__isnull=False, expires_at__gt=Now()).first()
    if lock is None or lock.run_id is None:
        return None
    return Run.objects.filter(pk=lock.run_id).first()


@dataclass
class PickupStall:
    """A Pending run no worker has picked up: for how long, when the sweep last sent it again, its queue, and the
    live workers serving that queue."""

    waited_seconds: float
    requeued_at: datetime | None
    queue: str
    workers: list[str]


def run_pickup_stall(*, run: Run) -> PickupStall | None:
    """Why a Pending run has not started, when no worker has had it in hand for a lease period while nothing held its
    group's run lock (the runs the sweep sends again: leases.unpicked_runs); None otherwise. Database time, as the
    times it compares were written with."""
    if run.status != Run.Status.PENDING:
        return None
    row = (
        unpicked_runs()
        .filter(pk=run.pk)
        .annotate(now=Now())
        .values_list("now", "queued_at", "requeued_at", "isolation_group")
        .first()
    )
    if row is None:
        return None
    now, queued_at, requeued_at, group = row
    assert queued_at is not None, "unpicked_runs holds queued runs only"
    return PickupStall(
        waited_seconds=max((now - queued_at).total_seconds(), 0.0),
        requeued_at=requeued_at,
        queue=group_queue(group),
        workers=live_workers(group=group),
    )


def _tagged(tags: Any, tag: str) -> bool:
    return isinstance(tags, list) and tag in tags


def _test_conversations() -> QuerySet[Conversation]:
    """The conversations the harness made: sealed ones (only the runner seals, and only it holds the key), tagged
    TEST_TAG. Tags alone prove nothing — anyone starting a conversation may tag it "agenttest" and "run:1"."""
    return Conversation.objects.exclude(seal_hash="").filter(tags__icontains=f'"{TEST_TAG}"')


def run_conversation_ids(*, run_ids: list[int]) -> set[int]:
    """The test conversations of these runs: those their results point at, and the sealed ones tagged with the run
    (a case that never got to store its result). An unsealed conversation is never one, whatever its tags."""
    if not run_ids:
        return set()
    ids = set(
        CaseResult.objects.filter(run_id__in=run_ids, conversation_id__isnull=False).values_list(
            "conversation_id", flat=True
        )
    )
    for run_id in run_ids:
        tag = run_tag(run_id)
        # icontains narrows the scan on every database; the exact tag is checked here (run:1 is not run:10).
        candidates = _test_conversations().filter(tags__icontains=f'"{tag}"').values_list("pk", "tags")
        ids.update(pk for pk, tags in candidates if _tagged(tags, tag))
    # Only test conversations: a result never points at anything else, but deleting one by mistake loses data.
    rows = _test_conversations().filter(pk__in=ids).values_list("pk", "tags")
    return {pk for pk, tags in rows if _tagged(tags, TEST_TAG)}


def prunable_test_conversation_ids(*, cutoff: Any) -> list[int]:
    """Test conversations (sealed, tagged TEST_TAG) created before `cutoff`, except those of a run that is Pending
    or Running."""
    active = list(Run.objects.filter(status__in=[Run.Status.PENDING, Run.Status.RUNNING]).values_list("pk", flat=True))
    in_use = run_conversation_ids(run_ids=active)
    rows = _test_conversations().filter(created_at__lt=cutoff).values_list("pk", "tags")
    return sorted(pk for pk, tags in rows.iterator() if _tagged(tags, TEST_TAG) and pk not in in_use)


def nearest_rank(values: list[float], percentile: float) -> float | None:
    """The nearest-rank percentile: the smallest value with at least `percentile`% of values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(percentile / 100 * len(ordered)))
    return ordered[rank - 1]


STABLE_PASS, STABLE_FAIL, FLAKY = "stable-pass", "stable-fail", "flaky"
REPLAY_COST_NOTE = "replayed from recordings: no model was called, so it cost nothing"


@dataclass
class TrialSummary:
    """One case on one model over the run's k trials."""

    case_id: int | None
    case_name: str
    model: str
    trials: int
    ran: int = 0
    passed: int = 0
    failed: int = 0
    errored: int = 0
    statuses: list[str] = field(default_factory=list)
    # What its trials cost, the judge's share included.
    cost: Decimal = Decimal(0)

    @property
    def complete(self) -> bool:
        return self.ran == self.trials

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.ran if self.ran else None

    @property
    def pass_all(self) -> bool:
        """pass^k for this case: every one of the k trials ran and passed."""
        return self.complete and self.passed == self.trials

    @property
    def label(self) -> str:
        """stable-pass, stable-fail or flaky; "" until all k trials have run (cancelled ones do not count)."""
        if not self.complete:
            return ""
        if self.passed == self.ran:
            return STABLE_PASS
        return STABLE_FAIL if self.passed == 0 else FLAKY

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "cost": float(self.cost),
            "pass_rate": self.pass_rate,
            "pass_all": self.pass_all,
            "label": self.label,
        }


def run_trials(*, run: Run) -> list[TrialSummary]:
    """Per case × model (case order of execution, then the run's model order): how its trials went, its label and
    what its trials cost. Statuses are listed in trial order; a cancelled trial is not counted as run. One query."""
    rows = (
        CaseResult.objects.filter(run=run)
        .order_by("position", "id")
        .values_list("case_id", "case_name", "model", "trial", "status", "cost", "judge_cost")
    )
    return _trial_summaries(
        run,
        (
            (case_id, case_name, model, trial, status, (cost or Decimal(0)) + (judge_cost or Decimal(0)))
            for case_id, case_name, model, trial, status, cost, judge_cost in rows
        ),
    )


def _trial_summaries(run: Run, rows: Iterable[tuple[Any, str, str, int, str, Decimal]]) -> list[TrialSummary]:
    """From (case_id, case_name, model, trial, status, cost with the judge's) rows in execution order."""
    summaries: dict[tuple[Any, str], TrialSummary] = {}
    by_trial: dict[tuple[Any, str], dict[int, str]] = {}
    case_order: dict[Any, int] = {}
    for case_id, case_name, model, trial, status, cost in rows:
        key = (case_id or case_name, model)
        case_order.setdefault(key[0], len(case_order))
        summary = summaries.setdefault(key, TrialSummary(case_id, case_name, model, run.trials))
        summary.cost += cost
        by_trial.setdefault(key, {})[trial] = status
        if status != CaseResult.Status.CANCELLED:
            summary.ran += 1
            setattr(summary, _COUNTERS[status], getattr(summary, _COUNTERS[status]) + 1)
    for key, summary in summaries.items():
        summary.statuses = [status for _, status in sorted(by_trial[key].items())]
    model_order = {model: index for index, model in enumerate(run.model_keys)}
    return sorted(
        summaries.values(),
        key=lambda s: (case_order[s.case_id or s.case_name], model_order.get(s.model, len(model_order))),
    )


@dataclass
class ModelSummary:
    model: str
    mode: str = "live"
    trials: int = 1
    total: int = 0
    passed: int = 0
    failed: int = 0
    errored: int = 0
    cancelled: int = 0
    pass_rate: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    # Parts of the two above, priced apart (cached input, reasoning).
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    # Results that ran without any answer from the model (it was down, or never asked): not in p50/p95.
    unanswered: int = 0
    cost: Decimal = Decimal(0)
    # What the llmJudge spent judging this model's results, at the judge model's price; the budget counts it.
    judge_tokens: int = 0
    judge_cost: Decimal = Decimal(0)
    # Over the cases whose k trials all ran: the share that passed every trial (pass^k), and the labels.
    cases: int = 0
    pass_k: float | None = None
    stable_pass: int = 0
    stable_fail: int = 0
    flaky: int = 0

    @property
    def total_tokens(self) -> int:
        """The model's tokens and the judge's: everything these results spent."""
        return self.input_tokens + self.output_tokens + self.judge_tokens

    @property
    def total_cost(self) -> Decimal:
        return self.cost + self.judge_cost

    @property
    def pass_at_1(self) -> float | None:
        """pass@1: the share of the trials that ran which passed (every trial counted, cancelled ones not) — the
        chance that one run of a case passes. The pass rate, under the name pass^k is read beside."""
        return self.pass_rate

    @property
    def trial_cost(self) -> Decimal:
        """What one trial of the cases cost on average: all k trials' cost (the judge's included) over k. pass^k
        buys its certainty with k times this."""
        return self.total_cost / self.trials if self.trials > 1 else self.total_cost

    @property
    def cost_note(self) -> str:
        return REPLAY_COST_NOTE if self.mode == "replay" else ""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost"] = float(self.cost)
        data["judge_cost"] = float(self.judge_cost)
        data["total_cost"] = float(self.total_cost)
        data["pass_at_1"] = self.pass_at_1
        data["trial_cost"] = float(self.trial_cost)
        data["total_tokens"] = self.total_tokens
        data["cost_note"] = self.cost_note
        return data


_COUNTERS = {"passed": "passed", "failed": "failed", "error": "errored", "cancelled": "cancelled"}


def run_summary(*, run: Run) -> list[ModelSummary]:
    """Per model, in the run's model order: counts, pass rate over the results that ran (cancelled excluded, every
    trial counted), p50/p95 model latency by nearest rank over the results the model answered (`unanswered` counts
    the others), tokens (cached and reasoning ones apart) and cost (the model's, and the judge's apart); the
    run's mode and trials, pass^k and how many cases are stable-pass, stable-fail or flaky. One query."""
    summaries = {key: ModelSummary(model=key, mode=run.mode, trials=run.trials) for key in run.model_keys}
    latencies: dict[str, list[float]] = {key: [] for key in run.model_keys}
    rows = (
        CaseResult.objects.filter(run=run)
        .order_by("position", "id")
        .values_list(
            "model", "status", "model_latency_ms", "input_tokens", "output_tokens", "cost", "case_id", "case_name",
            "trial", "judge_input_tokens", "judge_output_tokens", "judge_cost", "cached_input_tokens",
            "reasoning_tokens",
        )
    )
    trial_rows = []
    for (
        model, status, latency, tokens_in, tokens_out, cost, case_id, case_name, trial, judge_in, judge_out,
        judge_cost, cached, reasoning,
    ) in rows:
        trial_rows.append((case_id, case_name, model, trial, status, (cost or Decimal(0)) + (judge_cost or Decimal(0))))
        summary = summaries.setdefault(model, ModelSummary(model=model, mode=run.mode, trials=run.trials))
        summary.total += 1
        setattr(summary, _COUNTERS[status], getattr(summary, _COUNTERS[status]) + 1)
        summary.input_tokens += tokens_in
        summary.output_tokens += tokens_out
        summary.cached_input_tokens += cached
        summary.reasoning_tokens += reasoning
        summary.cost += cost or Decimal(0)
        summary.judge_tokens += judge_in + judge_out
        summary.judge_cost += judge_cost or Decimal(0)
        if status == CaseResult.Status.CANCELLED:
            pass
        elif latency > 0 or tokens_in or tokens_out:
            latencies.setdefault(model, []).append(latency)
        else:
            # No call of it answered: its 0 ms would read as the fastest model in the table.
            summary.unanswered += 1
    for key, summary in summaries.items():
        ran = summary.total - summary.cancelled
        summary.pass_rate = summary.passed / ran if ran else None
        summary.latency_p50_ms = nearest_rank(latencies.get(key, []), 50)
        summary.latency_p95_ms = nearest_rank(latencies.get(key, []), 95)
    labels = {STABLE_PASS: "stable_pass", STABLE_FAIL: "stable_fail", FLAKY: "flaky"}
    for trial_summary in _trial_summaries(run, trial_rows):
        summary = summaries[trial_summary.model]
        if not trial_summary.complete:
            continue
        summary.cases += 1
        label = labels[trial_summary.label]
        setattr(summary, label, getattr(summary, label) + 1)
    for summary in summaries.values():
        summary.pass_k = summary.stable_pass / summary.cases if summary.cases else None
    return list(summaries.values())


def matrix_case_key(row: dict[str, Any]) -> str:
    """A matrix row's key: its case id, or its name once the case was deleted (its results keep the name)."""
    return str(row["case_id"]) if row["case_id"] is not None else f"name:{row['case_name']}"


def run_matrix(
    *, run: Run, case_ids: Iterable[int] | None = None, case_names: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """Rows of case × model cells in case order; each cell has status, duration, model latency, tokens, cost and the
    result id of its first trial, the reason of its first trial that did not pass (else the first's), `last_id` (its
    newest result), plus `trials` (every trial's status, in order), `stability` (stable-pass, stable-fail, flaky, or
    "" until all trials ran), `trials_cost` (every trial's, the judge's included) and `median_duration_ms` /
    `median_latency_ms` over the trials that ran (None if none).
    Models disagree when their stability differs (with one trial: their status). Given `case_ids` / `case_names`,
    only those cases' rows (a case deleted since is known by name). One query."""
    rows: dict[Any, dict[str, Any]] = {}
    results = CaseResult.objects.filter(run=run)
    if case_ids is not None or case_names is not None:
        results = results.filter(
            Q(case_id__in=list(case_ids or [])) | Q(case_id__isnull=True, case_name__in=list(case_names or []))
        )
    values = (
        results.order_by("position", "id")
        # The run's trials come with the results (a join), so a caller holding a partly loaded run adds no query.
        .values(
            "id", "case_id", "case_name", "model", "trial", "status", "duration_ms", "model_latency_ms", "reason",
            "input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens", "cost", "judge_cost",
            "run__trials",
        )
    )
    trials = 1
    # Rows of .values(): the run's trials are popped from each, the rest spread into its cell.
    result: Any
    for result in values:
        trials = result.pop("run__trials")
        row = rows.setdefault(
            result["case_id"] or result["case_name"],
            {"case_id": result["case_id"], "case_name": result["case_name"], "cells": {}},
        )
        cell = row["cells"].setdefault(
            result["model"],
            {**result, "trials": [], "last_id": result["id"], "durations": [], "latencies": [],
             "trials_cost": Decimal(0)},
        )
        cell["trials"].append(result["status"])
        cell["trials_cost"] += (result["cost"] or Decimal(0)) + (result["judge_cost"] or Decimal(0))
        if result["status"] != CaseResult.Status.CANCELLED:
            cell["durations"].append(result["duration_ms"])
            cell["latencies"].append(result["model_latency_ms"])
        cell["last_id"] = max(cell["last_id"], result["id"])
        if cell["status"] == CaseResult.Status.PASSED and result["status"] in _NOT_PASSING:
            cell["reason"] = cell["reason"] or result["reason"]
    for row in rows.values():
        for cell in row["cells"].values():
            summary = TrialSummary(cell["case_id"], cell["case_name"], cell["model"], trials)
            for status in cell["trials"]:
                if status != CaseResult.Status.CANCELLED:
                    summary.ran += 1
                    summary.passed += status == CaseResult.Status.PASSED
            cell["stability"] = summary.label
            durations, latencies = cell.pop("durations"), cell.pop("latencies")
            cell["median_duration_ms"] = statistics.median(durations) if durations else None
            cell["median_latency_ms"] = statistics.median(latencies) if latencies else None
        statuses = {cell["status"] for cell in row["cells"].values()}
        every_status = {status for cell in row["cells"].values() for status in cell["trials"]}
        if trials > 1:
            row["disagree"] = len({cell["stability"] for cell in row["cells"].values()}) > 1
        else:
            row["disagree"] = len(statuses) > 1
        row["any_failure"] = bool(every_status & {"failed", "error"})
    return list(rows.values())


_NOT_PASSING = (CaseResult.Status.FAILED, CaseResult.Status.ERROR)


def run_matrix_trials(*, run: Run) -> list[dict[str, Any]]:
    """One row per case and trial, in run order, with per model that trial's own result: `case_id`, `case_name`,
    `trial` (0-based) and `cells` (model → status, durations, tokens, cost, reason and id). Every result is in
    exactly one row. One query."""
    rows: dict[tuple[Any, int], dict[str, Any]] = {}
    results = CaseResult.objects.filter(run=run).order_by("position", "id").values(
        "id", "case_id", "case_name", "model", "trial", "status", "duration_ms", "model_latency_ms", "reason",
        "input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens", "cost",
    )
    for result in results:
        key = (result["case_id"] or result["case_name"], result["trial"])
        row = rows.setdefault(
            key,
            {"case_id": result["case_id"], "case_name": result["case_name"], "trial": result["trial"], "cells": {}},
        )
        row["cells"][result["model"]] = result
    return list(rows.values())


def recorded_models() -> list[str]:
    """The models any suite has recordings of, by name: what a replay can serve. One query."""
    return list(Recording.objects.order_by("model").values_list("model", flat=True).distinct())
