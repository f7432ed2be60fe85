"""A result as a reviewer reads it: its transcript grouped by turn (each tool call joined with its result and marked
Mocked / Blocked / Allowed), stored JSON shown as JSON: the result page and the side-by-side pages share it."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from common.inputs import printable_json
from runs.models import CaseResult
from runs.web.charts import format_ms


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


def transcript_turns(result: CaseResult) -> list[dict[str, Any]]:
    """The transcript grouped by turn; each tool call joined with its result and marked Mocked / Blocked / Allowed."""
    rows = result.transcript or []
    results_by_call = {
        row["tool_call_id"]: row for row in rows if row.get("role") == "tool_result" and row.get("tool_call_id")
    }
    # Observed calls carry the harness' verdict; used when the transcript's result row has none.
    observed: dict[tuple[Any, str], list[dict[str, Any]]] = defaultdict(list)
    for call in result.tool_calls or []:
        observed[(call.get("turn"), call.get("name", ""))].append(call)
    turns: list[dict[str, Any]] = []
    joined: set[str] = set()
    for message in rows:
        role = message.get("role", "")
        if not turns or turns[-1]["turn"] != message.get("turn"):
            turns.append({"turn": message.get("turn"), "entries": []})
        entries = turns[-1]["entries"]
        if role == "tool_call":
            answer = results_by_call.get(message.get("tool_call_id")) or {}
            joined.add(message.get("tool_call_id") or "")
            calls = observed.get((message.get("turn"), message.get("function", "")))
            seen = calls.pop(0) if calls else {}
            entries.append(
                {
                    "kind": "tool",
                    "name": message.get("function", ""),
                    "arguments": readable(message.get("arguments") or {}),
                    "outcome": answer.get("outcome") or seen.get("outcome", ""),
                    "result": readable(answer.get("content", seen.get("result", ""))),
                    "trigger": message.get("trigger", ""),
                    "agent": message.get("agent", ""),
                }
            )
        elif role == "tool_result":
            if message.get("tool_call_id") and message.get("tool_call_id") in joined:
                continue
            entries.append(
                {
                    "kind": "tool",
                    "name": message.get("function", ""),
                    "arguments": "",
                    "trigger": "",
                    "outcome": message.get("outcome", ""),
                    "result": readable(message.get("content", "")),
                    "agent": message.get("agent", ""),
                }
            )
        elif message.get("content"):
            entries.append(
                {
                    "kind": "user" if role == "user" else "assistant",
                    "simulated": bool(message.get("simulated")),
                    "content": message["content"],
                    "agent": message.get("agent", ""),
                    "model": message.get("model", ""),
                    "latency": format_ms(message.get("latency_ms")) if message.get("latency_ms") else "",
                }
            )
    return [turn for turn in turns if turn["entries"]]


def assertion_outcomes(result: CaseResult) -> list[dict[str, Any]]:
    """The result's assertion outcomes, each with its expected and actual values as readable text."""
    return [
        {**item, "expected_text": readable(item.get("expected")), "actual_text": readable(item.get("actual"))}
        for item in result.assertions or []
        if isinstance(item, dict)
    ]
