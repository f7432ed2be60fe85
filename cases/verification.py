"""Mocks verified against their real tools (issue 36, `agenttest mocks verify`): provider verification, as Pact does
it for services, for an agent's tools.

Each mock of an **effect-free** tool (a plugin tool declared `outside_effects=False`, an MCP tool its server annotates
read-only — checked live, not from the cache —, a static output) is run for real, outside any test, on the mock's
recorded arguments, and the real answer is compared with the mock's result:

- equal — the same JSON (or text), once the suite's `ignore` paths for that tool are left out;
- equal in shape — same structure and JSON types, values differ: a pass for a tool whose rule is `compare: shape`,
  drift for one compared `exact` (the default: a new status value is drift);
- drifted — a field gone, added, or of another type, or (exact) a value changed: each path is listed;
- failed — the real call answered an error the mock does not;
- unverifiable — never called: a tool with effects outside agenttest (or that does not declare it), whose mock is
  held to the tool's output schema only (a misfit there is drift); a tool of a runtime agent's code (it runs only
  inside its agent); a control-flow function (it acts on a conversation); a stateful mock (it answers from its table)
  or a stop-completion (its result is the turn's reply); arguments that leave out what the tool requires.

Each mock keeps its last verification (MockVerification, keyed by what the mock says). `update` rewrites a drifted
mock's result with the real answer, through case_update like any reviewed edit (the case's content hash changes,
so its results say the case changed since).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from django.db import transaction
from django.utils import timezone

from agenthost.seams import CONTROL_FLOW_FUNCTIONS, FunctionContext, LiveListings, function_execute
from cases.models import Case, MockVerification, Suite
from cases.services import case_to_document, case_update
from cases.tool_schemas import input_schema, mock_schema_problems, output_schema
from cases.validation.callable_functions import CallableFunctions, case_callable_functions

Verdict = MockVerification.Verdict
# What makes `agenttest mocks verify` exit non-zero.
FAILING = (Verdict.DRIFTED, Verdict.FAILED)


@dataclass
class MockCheck:
    """One mock's verification, as reported and stored."""

    suite: str
    case: str
    case_id: int
    position: int
    function_name: str
    verdict: str
    reason: str = ""
    diff: list[dict[str, Any]] = field(default_factory=list)
    real_result: str = ""
    tool_version: str = ""
    updated: bool = False

    @property
    def mock(self) -> str:
        return f"mocks[{self.position}] ({self.function_name})"

    def lines(self) -> list[str]:
        """The check for a person: the verdict naming suite, case and mock, then each path that differs."""
        label = Verdict(self.verdict).label.lower()
        head = f"{label}: suite {self.suite!r}, case {self.case!r}, {self.mock}"
        if self.reason:
            head += f" — {self.reason}"
        if self.updated:
            head += " — its result was rewritten from the real tool"
        return [head, *(f"    {diff_line(item)}" for item in self.diff)]


def diff_line(item: dict[str, Any]) -> str:
    path = item["path"] or "(the whole result)"
    change = item["change"]
    if change == "gone":
        return f"{path}: gone (the mock has {_shown(item['mock'])}; the tool no longer returns it)"
    if change == "added":
        return f"{path}: added (the tool now returns {_shown(item['real'])}; the mock has none)"
    if change == "type":
        return f"{path}: type changed ({_kind(item['mock'])} in the mock, {_kind(item['real'])} from the tool)"
    if change == "schema":
        return f"{path}: {item['real']}"
    return f"{path}: {_shown(item['mock'])} in the mock, {_shown(item['real'])} from the tool"


@dataclass
class VerifyReport:
    checks: list[MockCheck] = field(default_factory=list)

    def with_verdict(self, *verdicts: str) -> list[MockCheck]:
        return [check for check in self.checks if check.verdict in verdicts]

    @property
    def failing(self) -> list[MockCheck]:
        return [check for check in self.with_verdict(*FAILING) if not check.updated]

    def summary(self) -> str:
        """Markdown for a CI job's summary: the counts, then every mock that did not verify green."""
        counts = {verdict: len(self.with_verdict(verdict)) for verdict in Verdict.values}
        lines = [
            "# Mock verification",
            "",
            ", ".join(f"{count} {Verdict(verdict).label.lower()}" for verdict, count in counts.items()) + ".",
            "",
        ]
        shown = [check for check in self.checks if check.verdict not in (Verdict.EQUAL, Verdict.SHAPE)]
        if shown:
            lines += ["| Verdict | Suite | Case | Mock | What differs |", "|---|---|---|---|---|"]
            for check in shown:
                what = "<br>".join(_cell(diff_line(item)) for item in check.diff) or _cell(check.reason)
                lines.append(
                    f"| {Verdict(check.verdict).label} | {_cell(check.suite)} | {_cell(check.case)} | "
                    f"{_cell(check.mock)} | {what} |"
                )
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def mock_key(mock: dict[str, Any]) -> str:
    """What identifies a mock's content across saves of its case (rows are written again each time)."""
    content = {key: mock.get(key) for key in ("function_name", "arguments", "call_index", "result", "stop", "table")}
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def mocks_verify(*, suites: list[Suite], update: bool = False) -> VerifyReport:
    """Verify every mock of the suites' cases (see the module docstring); each stored as its mock's last
    verification. With `update`, drifted mocks take the real tool's answer as their result."""
    report = VerifyReport()
    live = LiveListings()
    for suite in suites:
        for case in Case.objects.filter(suite=suite).select_related("suite", "entry_agent").prefetch_related("mocks"):
            report.checks.extend(case_mocks_verify(case=case, update=update, live=live))
    return report


def case_mocks_verify(*, case: Case, update: bool = False, live: LiveListings | None = None) -> list[MockCheck]:
    """One case's mocks verified and stored as `mocks_verify` does; the door both `agenttest mocks verify` and the
    review panel's "Refresh drifted" go through, so they cannot disagree on what drifted or what is rewritten."""
    suite = case.suite
    rules = suite.mock_rules if isinstance(suite.mock_rules, dict) else {}
    document = case_to_document(case=case)
    functions = case_callable_functions(suite=suite, entry_agent=case.entry_agent)
    live = live if live is not None else LiveListings()
    checks = [
        _verify(mock, functions=functions, rule=rules.get(mock["function_name"]) or {}, live=live)
        for mock in document["mocks"]
    ]
    for position, check in enumerate(checks):
        check.suite, check.case, check.case_id, check.position = suite.name, case.name, case.pk, position
    _store(case, document, checks, update=update)
    return checks


class NothingToRefresh(Exception):
    """No mock of the case could be rewritten from its real tool; the message says why, naming each drifted mock."""


def case_drifted_mocks_refresh(*, case: Case) -> list[MockCheck]:
    """The review panel's "Refresh drifted": the case's mocks verified again against their real tools now, and each
    drifted mock of an effect-free tool rewritten with the real answer, as `agenttest mocks verify --update` does —
    a change to the case like any reviewed edit (its content hash changes). Returns every check, the rewritten ones
    `updated`; raises NothingToRefresh when none was rewritten."""
    checks = case_mocks_verify(case=case, update=True)
    if any(check.updated for check in checks):
        return checks
    stuck = [check for check in checks if check.verdict in FAILING]
    if not stuck:
        raise NothingToRefresh(
            f"Nothing to refresh in {case.name!r}: no mock drifted from its tool (verified again just now)."
        )
    raise NothingToRefresh(
        f"Nothing refreshed in {case.name!r}: " + "; ".join(f"{check.mock} {not_refreshable(check)}" for check in stuck)
        + "."
    )


def not_refreshable(check: MockCheck) -> str:
    """Why a drifted or failed mock was not rewritten from its tool."""
    if check.verdict == Verdict.FAILED:
        return f"was not rewritten: {check.reason}"
    return ("drifted, but its tool has effects outside agenttest (or does not declare it), so it is never called: "
            "fix its result by hand to what the tool's output schema says")


@transaction.atomic
def _store(case: Case, document: dict[str, Any], checks: list[MockCheck], *, update: bool) -> None:
    refreshed = [check for check in checks if update and check.verdict == Verdict.DRIFTED and check.real_result]
    if refreshed:
        for check in refreshed:
            document["mocks"][check.position]["result"] = _as_written(check.real_result)
            check.updated = True
        case = case_update(case=case, document=document)
    now = timezone.now()
    for check, mock in zip(checks, document["mocks"], strict=True):
        MockVerification.objects.update_or_create(
            case=case, mock_key=mock_key(mock),
            defaults={
                "case_hash": case.content_hash,
                "position": check.position,
                "function_name": check.function_name,
                # A refreshed mock says what the tool says now.
                "verdict": Verdict.EQUAL if check.updated else check.verdict,
                "reason": "its result was rewritten from the real tool" if check.updated else check.reason,
                "diff": [] if check.updated else check.diff,
                "real_result": check.real_result,
                "tool_version": check.tool_version,
                "verified_at": now,
            },
        )


def _as_written(real: str) -> str:
    """The real answer as a mock's result: JSON spaced as json.dumps writes it, so a case file shows the structure
    rather than a line of JSON text (cases.files writes a result as YAML only when it reads back byte for byte)."""
    try:
        value = json.loads(real)
    except ValueError:
        return real
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else real


def _check(mock: dict[str, Any], verdict: str, reason: str = "", **more: Any) -> MockCheck:
    return MockCheck(suite="", case="", case_id=0, position=0, function_name=str(mock.get("function_name")),
                     verdict=verdict, reason=reason, **more)


def _verify(
    mock: dict[str, Any], *, functions: CallableFunctions | None, rule: dict[str, Any], live: LiveListings
) -> MockCheck:
    name = mock["function_name"]
    if functions is None or name not in functions.names:
        return _check(mock, Verdict.UNVERIFIABLE, "not a function the agent under test can call")
    declarations = functions.declarations[name]
    declaration = next((item for item in declarations if item is not None), None)
    version = _tool_version(name, declaration)
    if name in CONTROL_FLOW_FUNCTIONS:
        return _check(mock, Verdict.UNVERIFIABLE, "a control-flow function acts on its conversation, which there is "
                      "none of here", tool_version=version)
    if mock.get("table"):
        return _check(mock, Verdict.UNVERIFIABLE, "a stateful mock answers from its case's table",
                      tool_version=version)
    if mock.get("stop"):
        return _check(mock, Verdict.UNVERIFIABLE, "a stop-completion's result is the turn's reply",
                      tool_version=version)
    if not functions.effect_free(name):
        misfits = mock_schema_problems(mock, declarations)
        diff = [{"path": path, "change": "schema", "mock": None, "real": message} for path, message in misfits]
        return _check(
            mock, Verdict.DRIFTED if diff else Verdict.UNVERIFIABLE,
            "has effects outside agenttest (or does not declare it), so it is never called; checked against its "
            "output schema only", diff=diff, tool_version=version,
        )
    if declaration is not None and declaration.get("runtime"):
        return _check(mock, Verdict.UNVERIFIABLE, "a tool of a runtime agent's code runs only inside its agent",
                      tool_version=version)
    if declaration is not None and (problem := live.problem(declaration)):
        return _check(mock, Verdict.UNVERIFIABLE, problem, tool_version=version)
    arguments = dict(mock.get("arguments") or {})
    schema = input_schema(name, declaration)
    if schema is not None and (missing := _argument_problem(schema, arguments)):
        return _check(mock, Verdict.UNVERIFIABLE, f"its arguments cannot call the tool: {missing}",
                      tool_version=version)
    answer = function_execute(
        name, FunctionContext(name=name, arguments=arguments, trigger="direct", declaration=declaration)
    )
    real = answer.content
    if answer.error and real != mock.get("result"):
        return _check(mock, Verdict.FAILED, f"the real tool answered an error: {real}", real_result=real,
                      tool_version=version)
    diff = result_diff(mock.get("result", ""), real, ignore=rule.get("ignore") or [])
    structural = [item for item in diff if item["change"] != "value"]
    if not diff:
        verdict = Verdict.EQUAL
    elif structural or rule.get("compare", "exact") == "exact":
        verdict = Verdict.DRIFTED
    else:
        verdict = Verdict.SHAPE
    return _check(mock, verdict, diff=diff, real_result=real, tool_version=version)


def _argument_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str:
    try:
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
    except jsonschema.SchemaError:
        return ""
    return error.message if error is not None else ""


def _tool_version(name: str, declaration: dict[str, Any] | None) -> str:
    tool = {"input": input_schema(name, declaration), "output": output_schema(name, declaration),
            "mcp": (declaration or {}).get("mcp")}
    return hashlib.sha256(json.dumps(tool, sort_keys=True, default=str).encode()).hexdigest()


# --- Comparing a mock's result with the real one ----------------------------------------------------------------


def result_diff(mock: str, real: str, *, ignore: list[str]) -> list[dict[str, Any]]:
    """Every path where the real result differs from the mock's: `gone`, `added`, `type` (structure) or `value`.
    JSON is compared as JSON; other text as a whole."""
    patterns = [_ignore_pattern(path) for path in ignore]
    found: list[dict[str, Any]] = []
    _compare(_parsed(mock), _parsed(real), "", patterns, found)
    return found


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _ignore_pattern(path: str) -> re.Pattern[str]:
    return re.compile(re.escape(path).replace(r"\[\*\]", r"\[\d+\]") + r"(?=$|[.\[])")


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _compare(mock: Any, real: Any, path: str, ignore: list[re.Pattern[str]], found: list[dict[str, Any]]) -> None:
    if path and any(pattern.match(path) for pattern in ignore):
        return
    if _kind(mock) != _kind(real):
        found.append({"path": path, "change": "type", "mock": mock, "real": real})
    elif isinstance(mock, dict):
        for key in mock:
            if key not in real:
                if not any(pattern.match(_join(path, key)) for pattern in ignore):
                    found.append({"path": _join(path, key), "change": "gone", "mock": mock[key], "real": None})
            else:
                _compare(mock[key], real[key], _join(path, key), ignore, found)
        for key in real:
            if key not in mock and not any(pattern.match(_join(path, key)) for pattern in ignore):
                found.append({"path": _join(path, key), "change": "added", "mock": None, "real": real[key]})
    elif isinstance(mock, list):
        for index, (left, right) in enumerate(zip(mock, real, strict=False)):
            _compare(left, right, _join(path, index), ignore, found)
        if len(mock) != len(real):
            found.append({"path": path, "change": "value", "mock": f"{len(mock)} item(s)",
                          "real": f"{len(real)} item(s)"})
    elif mock != real:
        found.append({"path": path, "change": "value", "mock": mock, "real": real})


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    names = {dict: "an object", list: "a list", str: "text", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "…"
