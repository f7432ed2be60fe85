"""A run as JUnit XML, so a CI server shows each case × model as a test.

One <testsuite> per model, one <testcase> per case on that model (one per trial when cases are repeated).
Failed → <failure>, Error → <error>, Cancelled → <skipped>. A selected case × model that has no result (the run ended
in Error before reaching it, or had not finished) is still listed — as <error> carrying the run's reason, or
<skipped> when the run was cancelled — because a run that stopped early must not read as a short green one.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from cases.models import Case
from runs.models import CaseResult, Run
from runs.selectors import run_trials

# XML 1.0 cannot carry most control characters at all, escaped or not; model output can contain them.
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_MESSAGE_LIMIT = 1000


def _text(value: Any) -> str:
    return _NOT_XML.sub("\ufffd", value if isinstance(value, str) else str(value))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


@dataclass
class _Entry:
    case_name: str
    status: str
    reason: str
    seconds: float
    assertions: list[dict[str, Any]]
    # "passed X of k trials" when the case × model is flaky: it passed some trials and not others.
    flaky: str = ""


def _assertion_lines(assertions: list[dict[str, Any]], statuses: tuple[str, ...]) -> list[str]:
    lines = []
    for item in assertions:
        if item.get("status") not in statuses:
            continue
        where, kind, verdict = item.get("scope", ""), item.get("type", ""), item.get("status", "")
        lines.append(f"[{where}] {kind} {verdict}: {item.get('message', '')}")
        lines.append(f"  expected: {_json(item.get('expected'))}")
        lines.append(f"  actual:   {_json(item.get('actual'))}")
    return lines


def _name(case_name: str, trial: int, trials: int) -> str:
    # A repeated case needs one test name per trial: JUnit consumers merge tests that share a name.
    return f"{case_name} (trial {trial + 1} of {trials})" if trials > 1 else case_name


def _entries(run: Run) -> dict[str, list[_Entry]]:
    """Per model (run order first), the entries in execution order; selected ones without a result at the end."""
    by_model: dict[str, list[_Entry]] = {model: [] for model in run.model_keys}
    seen: set[tuple[int | None, str, int]] = set()
    results = (
        CaseResult.objects.filter(run=run)
        .order_by("position", "id")
        .values_list("case_id", "case_name", "model", "trial", "status", "reason", "duration_ms", "assertions")
    )
    flaky = {}
    if run.trials > 1:
        flaky = {
            (trials.case_id, trials.model): f"passed {trials.passed} of {trials.trials} trials"
            for trials in run_trials(run=run)
            if trials.label == "flaky"
        }
    for case_id, case_name, model, trial, status, reason, duration_ms, assertions in results:
        seen.add((case_id, model, trial))
        entry = _Entry(
            _name(case_name, trial, run.trials),
            status,
            reason,
            duration_ms / 1000,
            assertions or [],
            flaky.get((case_id, model), ""),
        )
        by_model.setdefault(model, []).append(entry)
    missing = [
        (case_id, model, trial)
        for case_id in run.case_ids
        for model in run.model_keys
        for trial in range(run.trials)
        if (case_id, model, trial) not in seen
    ]
    # A case deleted since keeps its results (without a case id); one with no result and no row is left out.
    names = dict(Case.objects.filter(pk__in={case_id for case_id, _, _ in missing}).values_list("pk", "name"))
    if run.status == Run.Status.CANCELLED:
        status, reason = CaseResult.Status.CANCELLED, run.reason or "the run was cancelled before this case ran"
    else:
        why = run.reason or f"the run is {run.get_status_display().lower()}"
        status, reason = CaseResult.Status.ERROR, f"this case did not run: {why}"
    for case_id, model, trial in missing:
        if case_id in names:
            by_model[model].append(_Entry(_name(names[case_id], trial, run.trials), status, reason, 0.0, []))
    return by_model


def _testcase(parent: ET.Element, entry: _Entry, classname: str) -> None:
    element = ET.SubElement(
        parent, "testcase", name=_text(entry.case_name), classname=_text(classname), time=f"{entry.seconds:.3f}"
    )
    if entry.flaky:
        # Consumers that know flakiness read the property; the others still see "flaky" in the message.
        properties = ET.SubElement(element, "properties")
        ET.SubElement(properties, "property", name="flaky", value="true")
        ET.SubElement(properties, "property", name="trials", value=entry.flaky)
    prefix = f"flaky: {entry.flaky} — " if entry.flaky else ""
    message = _text((prefix + entry.reason)[:_MESSAGE_LIMIT])
    if entry.status == CaseResult.Status.FAILED:
        failure = ET.SubElement(element, "failure", message=message, type="Flaky" if entry.flaky else "AssertionFailed")
        failure.text = _text("\n".join(_assertion_lines(entry.assertions, ("failed",))) or entry.reason)
    elif entry.status == CaseResult.Status.ERROR:
        error = ET.SubElement(element, "error", message=message, type="Flaky" if entry.flaky else "HarnessError")
        error.text = _text("\n".join([entry.reason, *_assertion_lines(entry.assertions, ("error", "failed"))]))
    elif entry.status == CaseResult.Status.CANCELLED:
        ET.SubElement(element, "skipped", message=message)


def _counts(entries: list[_Entry]) -> dict[str, str]:
    statuses = [entry.status for entry in entries]
    return {
        "tests": str(len(entries)),
        "failures": str(statuses.count(CaseResult.Status.FAILED)),
        "errors": str(statuses.count(CaseResult.Status.ERROR)),
        "skipped": str(statuses.count(CaseResult.Status.CANCELLED)),
        "time": f"{sum(entry.seconds for entry in entries):.3f}",
    }


def run_to_junit(run: Run) -> str:
    """The run as a JUnit XML document (UTF-8 text with its XML declaration)."""
    suite_name = run.suite.name
    by_model = _entries(run)
    everything = [entry for entries in by_model.values() for entry in entries]
    root = ET.Element("testsuites", {"name": _text(f"{suite_name} (run #{run.pk})"), **_counts(everything)})
    for model, entries in by_model.items():
        name = _text(f"{suite_name} on {model}")
        attributes = {"name": name, **_counts(entries)}
        if run.started_at:
            attributes["timestamp"] = run.started_at.astimezone(UTC).replace(tzinfo=None, microsecond=0).isoformat()
        testsuite = ET.SubElement(root, "testsuite", attributes)
        properties = ET.SubElement(testsuite, "properties")
        for key, value in (("run", run.pk), ("model", model), ("run_status", run.status), ("run_reason", run.reason)):
            ET.SubElement(properties, "property", name=key, value=_text(value))
        if run.trials > 1:
            ET.SubElement(properties, "property", name="trials", value=str(run.trials))
            ET.SubElement(properties, "property", name="flaky", value=str(sum(1 for e in entries if e.flaky)))
        for entry in entries:
            _testcase(testsuite, entry, name)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
