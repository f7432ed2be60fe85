"""A result as a reviewer reads it: its transcript in the host's one shape (each tool call joined with its result and
marked Mocked / Blocked / Allowed), stored JSON shown as JSON: the result page and the side-by-side pages share it."""

from __future__ import annotations

import json
from typing import Any

from agenthost.seams import Transcript, transcript_from_stored
from common.inputs import printable_json
from runs.models import CaseResult


def readable(value: Any) -> str:
    """JSON as a person reads it; text that holds JSON (tool results usually do) is shown parsed."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
        if isinstance(value, str):
            return value
    # A tool result's text may escape a lone surrogate, which no page can be encoded with: printable_json escapes it.
    return printable_json(value, indent=2, sort_keys=True, default=str)


def result_transcript(result: CaseResult) -> Transcript:
    """The result's stored transcript; a call's outcome, when its result row has none, from the harness's record."""
    return transcript_from_stored(result.transcript or [], observed=result.tool_calls or [])


def assertion_outcomes(result: CaseResult) -> list[dict[str, Any]]:
    """The result's assertion outcomes, each with its expected and actual values as readable text."""
    return [
        {**item, "expected_text": readable(item.get("expected")), "actual_text": readable(item.get("actual"))}
        for item in result.assertions or []
        if isinstance(item, dict)
    ]
