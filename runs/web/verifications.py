"""What the run pages show of `agenttest mocks verify` (issue 36): on a result, each mock its case ran as last
verified against the real tool; the run page's matrix marks the cases with a drifted one (runs/web/matrix.py)."""

from __future__ import annotations

from typing import Any

from cases.review import verification_lines
from cases.selectors import mock_verifications_of
from runs.models import CaseResult


def result_mock_verifications(result: CaseResult) -> list[dict[str, Any]]:
    """The verifications of the mocks the result ran (its case as it was then: `case_hash`), in mock order: none for
    a case edited since it was last verified. One query."""
    return [
        {
            "mock": f"mocks[{item.position}] ({item.function_name})",
            "verdict": item.verdict,
            "label": item.get_verdict_display().lower(),
            "verified_at": item.verified_at,
            "reason": item.reason,
            "lines": verification_lines(item),
        }
        for item in mock_verifications_of(case_id=result.case_id, case_hash=result.case_hash)
    ]
