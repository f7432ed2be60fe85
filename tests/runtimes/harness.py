"""The harness's parts the runtime tests drive, imported in one place so that a move of the runs package's modules
is one edit here."""

from runs.engine.case_runner import execute_case
from runs.engine.case_session import MockSpec
from runs.engine.plans import AssertionPlan, CasePlan, SuitePlan, TurnPlan
from runs.tapes.replay import normalise_request, request_hash

__all__ = [
    "AssertionPlan", "CasePlan", "MockSpec", "SuitePlan", "TurnPlan", "execute_case", "normalise_request",
    "request_hash",
]
