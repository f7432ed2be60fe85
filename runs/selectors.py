"""Reads for runs: lists, per-model comparison, the case × model matrix."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from runs.models import CaseResult, Run


def run_list(*, suite_id: int | None = None, status: str = "") -> QuerySet[Run]:
    qs = Run.objects.select_related("suite", "suite__agent", "triggered_by")
    if suite_id:
        qs = qs.filter(suite_id=suite_id)
    if status:
        qs = qs.filter(status=status)
    return qs


def run_results(*, run: Run) -> QuerySet[CaseResult]:
    return CaseResult.objects.filter(run=run).order_by("position", "id")


def nearest_rank(values: list[float], percentile: float) -> float | None:
    """The nearest-rank percentile: the smallest value with at least `percentile`% of values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(percentile / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class ModelSummary:
    model: str
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
    cost: Decimal = Decimal(0)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost"] = float(self.cost)
        data["total_tokens"] = self.total_tokens
        return data


_COUNTERS = {"passed": "passed", "failed": "failed", "error": "errored", "cancelled": "cancelled"}


def run_summary(*, run: Run) -> list[ModelSummary]:
    """Per model, in the run's model order: counts, pass rate over the results that ran (cancelled excluded),
    p50/p95 model latency by nearest rank, tokens and cost. One query."""
    summaries = {key: ModelSummary(model=key) for key in run.model_keys}
    latencies: dict[str, list[float]] = {key: [] for key in run.model_keys}
    rows = CaseResult.objects.filter(run=run).values_list(
        "model", "status", "model_latency_ms", "input_tokens", "output_tokens", "cost"
    )
    for model, status, latency, tokens_in, tokens_out, cost in rows:
        summary = summaries.setdefault(model, ModelSummary(model=model))
        summary.total += 1
        setattr(summary, _COUNTERS[status], getattr(summary, _COUNTERS[status]) + 1)
        summary.input_tokens += tokens_in
        summary.output_tokens += tokens_out
        summary.cost += cost or Decimal(0)
        if status != CaseResult.Status.CANCELLED:
            latencies.setdefault(model, []).append(latency)
    for key, summary in summaries.items():
        ran = summary.total - summary.cancelled
        summary.pass_rate = summary.passed / ran if ran else None
        summary.latency_p50_ms = nearest_rank(latencies.get(key, []), 50)
        summary.latency_p95_ms = nearest_rank(latencies.get(key, []), 95)
    return list(summaries.values())


def run_matrix(*, run: Run) -> list[dict[str, Any]]:
    """Rows of case × model cells in case order; each cell has status, duration and the result id. One query."""
    rows: dict[Any, dict[str, Any]] = {}
    results = (
        CaseResult.objects.filter(run=run)
        .order_by("position", "id")
        .values("id", "case_id", "case_name", "model", "status", "duration_ms", "reason")
    )
    for result in results:
        row = rows.setdefault(
            result["case_id"] or result["case_name"],
            {"case_id": result["case_id"], "case_name": result["case_name"], "cells": {}},
        )
        row["cells"][result["model"]] = result
    for row in rows.values():
        statuses = {cell["status"] for cell in row["cells"].values()}
        row["disagree"] = len(statuses) > 1
        row["any_failure"] = bool(statuses & {"failed", "error"})
    return list(rows.values())
