"""The harness's parts the runtime tests drive, imported in one place so that a move of the runs package's modules
is one edit here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runs.engine.case_runner import execute_case
from runs.engine.case_session import MockSpec
from runs.engine.plans import AssertionPlan, CasePlan, SuitePlan, TurnPlan
from runs.tapes.replay import normalise_request, request_hash
from tests.workers import WAIT_SECONDS

__all__ = [
    "AssertionPlan", "CasePlan", "MockSpec", "SuitePlan", "TurnPlan", "execute_case", "normalise_request",
    "request_hash", "suite_plan",
]


def suite_plan(*, timeout: float = WAIT_SECONDS, extra_allowed: Iterable[str] = (), **fields: Any) -> SuitePlan:
    """The suite a runtime test's case runs in: no judge, nothing forced blocked, `extra_allowed` executed for real."""
    return SuitePlan(
        extra_allowed=frozenset(extra_allowed), force_blocked=frozenset(), judge_model="", timeout_seconds=timeout,
        **fields,
    )
