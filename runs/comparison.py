"""A run against an earlier run of the same suite: per model, the cases whose verdict flipped.

A case is matched across runs by its id, or by its name once it has been deleted (its results keep the name). Error
counts as not passing, like Failed: a model that used to pass and now errors has regressed. A Cancelled result did not
run, so it neither flips nor counts as new or gone. With several trials a case passes on a model only when every trial
that ran passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from runs.models import CaseResult, Run

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
    baseline_status: str = ""
    baseline_result_id: int | None = None
    current_status: str = ""
    current_result_id: int | None = None

    @property
    def label(self) -> str:
        return FLIP_LABELS[self.kind]


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
        .only("id", "status", "model_keys", "created_at", "suite_id")
        .order_by("-pk")[:limit]
    )


def default_baseline(*, run: Run) -> Run | None:
    """The most recent earlier run that finished with results, else the most recent earlier run."""
    candidates = Run.objects.filter(suite_id=run.suite_id, pk__lt=run.pk).order_by("-pk")
    return candidates.filter(status__in=[Run.Status.PASSED, Run.Status.FAILED]).first() or candidates.first()


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


def _verdict(statuses: list[str]) -> str | None:
    """Over a case's trials on one model: "pass" when every trial that ran passed, "fail" when one failed or
    errored, None when none ran."""
    ran = [status for status in statuses if status != CaseResult.Status.CANCELLED]
    if not ran:
        return None
    return "pass" if all(status == CaseResult.Status.PASSED for status in ran) else "fail"


def _results(run: Run) -> dict[str, dict[Any, dict[str, Any]]]:
    """Per model, per case: the verdict over its trials and the result that shows it best: the first that did not
    pass, else the first that passed."""
    by_model: dict[str, dict[Any, dict[str, Any]]] = {}
    rows = CaseResult.objects.filter(run=run).order_by("position", "id").values(
        "id", "case_id", "case_name", "model", "status"
    )
    for row in rows:
        key = row["case_id"] if row["case_id"] is not None else ("name", row["case_name"])
        entry = by_model.setdefault(row["model"], {}).setdefault(key, {**row, "statuses": []})
        entry["statuses"].append(row["status"])
        if _SHOWS_BEST[row["status"]] > _SHOWS_BEST[entry["status"]]:
            entry.update(id=row["id"], status=row["status"])
    for cases in by_model.values():
        for entry in cases.values():
            entry["verdict"] = _verdict(entry["statuses"])
    return by_model


def run_compare(*, run: Run, baseline: Run) -> list[ModelComparison]:
    """Per model (the run's models first, then models only the baseline had), the flips from `baseline` to `run`,
    each list in the run's case order. Two queries."""
    current, previous = _results(run), _results(baseline)
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
                kind = BROKE if old_verdict == "pass" else FIXED
            row = new_row or old_row
            comparison.flips[kind].append(
                Flip(
                    case_name=row["case_name"],
                    case_id=row["case_id"],
                    kind=kind,
                    baseline_status=old_row["status"] if old_row else "",
                    baseline_result_id=old_row["id"] if old_row else None,
                    current_status=new_row["status"] if new_row else "",
                    current_result_id=new_row["id"] if new_row else None,
                )
            )
        comparisons.append(comparison)
    return comparisons
