"""What can be known about a run at trigger time, checked before anything is created or queued."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from agenthost.seams import UnknownModel, get_model
from cases.models import Suite
from cases.selectors import enabled_cases
from runs.engine.errors import RunError
from runs.models import Recording, Run

MAX_TRIALS = 20
# What Run.budget_tokens (a PositiveBigIntegerField) holds; a larger number would fail at the database.
MAX_BUDGET_TOKENS = 2**63 - 1


def run_validate(*, suite: Suite, model_keys: list[str], case_filter: str = "", mode: str = Run.Mode.LIVE) -> list[int]:
    """Everything that can be known at trigger time is checked here; returns the selected case ids.

    A replay calls no model, so it may name a model that is not configured here (CI without its key) as long as
    the suite has recordings of it."""
    if not suite.enabled:
        raise RunError(f"suite {suite.name!r} is disabled; enable it before running", field="suite")
    if not model_keys:
        raise RunError("choose at least one model", field="models")
    seen: set[str] = set()
    for key in model_keys:
        if key in seen:
            raise RunError(f"model {key!r} is listed twice", field="models")
        seen.add(key)
        try:
            get_model(key)
        except UnknownModel as exc:
            if mode != Run.Mode.REPLAY:
                raise RunError(str(exc), field="models") from None
            if not Recording.objects.filter(case__suite=suite, model=key).exists():
                raise RunError(
                    f"{exc}; and suite {suite.name!r} has no recording of it to replay", field="models"
                ) from None
    case_ids = list(enabled_cases(suite=suite, case_filter=case_filter).values_list("id", flat=True))
    if not case_ids:
        what = f"the case filter {case_filter!r}" if case_filter else "the suite"
        raise RunError(f"{what} selects no enabled case; enable a case or change the filter", field="case_filter")
    return case_ids


def run_options_validate(*, mode: str, trials: int, budget_tokens: int | None, budget_cost: Any) -> None:
    if mode not in Run.Mode.values:
        raise RunError(f"mode must be one of {', '.join(Run.Mode.values)}, got {mode!r}", field="mode")
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= MAX_TRIALS:
        raise RunError(f"trials must be a whole number from 1 to {MAX_TRIALS}, got {trials!r}", field="trials")
    if trials > 1 and mode == Run.Mode.RECORD:
        raise RunError(
            "record mode keeps one recording per case and model, so it runs one trial; measure flakiness with "
            "trials in live mode, or replay the recording k times (free) to catch what your own code does differently",
            field="trials",
        )
    if budget_tokens is not None and budget_tokens <= 0:
        raise RunError("budget_tokens must be greater than 0", field="budget_tokens")
    if budget_tokens is not None and budget_tokens > MAX_BUDGET_TOKENS:
        raise RunError(f"budget_tokens must be at most {MAX_BUDGET_TOKENS}", field="budget_tokens")
    if budget_cost is not None and Decimal(str(budget_cost)) <= 0:
        raise RunError("budget_cost must be greater than 0", field="budget_cost")
