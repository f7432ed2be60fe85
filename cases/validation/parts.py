"""The meaning of a case's parts, past their shape: each assertion and mock (stateful ones against their tables),
the case's own fields, routing across parts, and the simulated user."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from agenthost.seams import Agent, Conversation, configured_models
from cases.models import Assertion, Case, Suite
from cases.schema import (
    ARGS_PREFIX,
    FUNCTION_NAME_MAX_LENGTH,
    MODEL_KEY,
    TABLES_BYTES_MAX,
    TABLES_BYTES_TEXT,
    SimulatedUserEntry,
)
from cases.tool_schemas import mock_schema_problems
from cases.validation.callable_functions import CallableFunctions
from cases.validation.problems import _INVALID, _from_text, _Problems, _under
from common.inputs import MAX_ID, path_join
from common.patterns import pattern_problem
from common.schemas import defaults

ROUTING_ASSERTIONS = (Assertion.Type.ROUTED_TO_AGENT, Assertion.Type.AGENT_CHAIN)
TOOL_ASSERTIONS = (Assertion.Type.TOOL_CALLED, Assertion.Type.TOOL_NOT_CALLED)
JUDGED_ASSERTIONS = (Assertion.Type.LLM_JUDGE, Assertion.Type.GOAL_REACHED)
NO_ASSERTIONS_WARNING = (
    "the case has no assertions, so it verifies nothing: a run ends it Error; add at least one assertion"
)


class _Prepared:
    """A copy of a document (or part) with its JSON text parsed; `skipped` are the fields already reported, whose
    schema problems would only repeat it."""

    def __init__(self, problems: _Problems) -> None:
        self.problems = problems
        self.skipped: list[str] = []

    def field(self, container: dict[str, Any], key: str, *, at: str, expected: type, nullable: bool = False) -> None:
        if key not in container:
            return
        value = _from_text(container[key], field=at, expected=expected, nullable=nullable, problems=self.problems)
        if value is _INVALID:
            self.skipped.append(at)
            del container[key]
        else:
            container[key] = value

    def items(
        self, container: dict[str, Any], key: str, *, at: str, each: Callable[[dict[str, Any], str], None]
    ) -> None:
        self.field(container, key, at=at, expected=list)
        if isinstance(container.get(key), list):
            container[key] = [
                self._item(item, path_join(at, index), each) for index, item in enumerate(container[key])
            ]

    @staticmethod
    def _item(item: Any, where: str, each: Callable[[dict[str, Any], str], None]) -> Any:
        if not isinstance(item, dict):
            return item
        item = dict(item)
        each(item, where)
        return item

    def assertion(self, item: dict[str, Any], where: str) -> None:
        self.field(item, "params", at=path_join(where, "params"), expected=dict)

    def mock(self, item: dict[str, Any], where: str) -> None:
        self.field(item, "arguments", at=path_join(where, "arguments"), expected=dict, nullable=True)
        self.field(item, "state_writes", at=path_join(where, "state_writes"), expected=dict)
        self.field(item, "table", at=path_join(where, "table"), expected=dict, nullable=True)

    def turn(self, item: dict[str, Any], where: str) -> None:
        self.items(item, "assertions", at=path_join(where, "assertions"), each=self.assertion)

    def simulated_user(self, data: dict[str, Any]) -> None:
        self.field(data, "simulated_user", at="simulated_user", expected=dict, nullable=True)
        user = data.get("simulated_user")
        if isinstance(user, dict):
            data["simulated_user"] = user = dict(user)
            self.field(user, "facts", at="simulated_user.facts", expected=dict)
            self.items(user, "end_when", at="simulated_user.end_when", each=self.assertion)

    def case(self, data: dict[str, Any]) -> dict[str, Any]:
        data = dict(data)
        self.simulated_user(data)
        self.field(data, "initial_state", at="initial_state", expected=dict)
        self.field(data, "tables", at="tables", expected=dict)
        for key in ("tags", "warnings", "history"):
            self.field(data, key, at=key, expected=list)
        self.items(data, "turns", at="turns", each=self.turn)
        self.items(data, "assertions", at="assertions", each=self.assertion)
        self.items(data, "mocks", at="mocks", each=self.mock)
        return data

    def add_schema_problems(self, found: list[tuple[str, str]], *, prefix: str = "") -> None:
        for path, message in found:
            path = _under(prefix, path) if prefix and path != "document" else (prefix or path)
            if not any(path == skipped or path.startswith((f"{skipped}.", f"{skipped}[")) for skipped in self.skipped):
                self.problems.add(path, message)


def _mean_assertion(
    data: dict[str, Any], *, prefix: str, suite: Suite | None, functions: CallableFunctions | None,
    problems: _Problems, tables: dict[str, Any] | None = None,
) -> dict[str, Any]:
    kind = data.get("type")
    params = data.get("params", {})
    params_field = path_join(prefix, "params")
    if isinstance(params, dict):
        pattern = params.get("pattern")
        if kind == Assertion.Type.OUTPUT_REGEX and isinstance(pattern, str) and pattern:
            # Compiled as the runner matches it, and tried on texts that make a catastrophic pattern explode.
            if (problem := pattern_problem(pattern)) is not None:
                problems.add(path_join(params_field, "pattern"), problem)
        function = params.get("function")
        if kind in TOOL_ASSERTIONS and functions is not None and isinstance(function, str) and function.strip():
            if function not in functions.names:
                # It could never be called, so toolCalled could never pass and toolNotCalled would prove nothing.
                problems.add(
                    path_join(params_field, "function"), functions.not_callable(function), shared=functions.listing
                )
        if kind == Assertion.Type.TABLE_EQUALS:
            _mean_table_equals(params, at=params_field, tables=tables, problems=problems)
    if kind in JUDGED_ASSERTIONS and suite is not None and not suite.judge_model:
        problems.add(
            path_join(prefix, "type"),
            f"{kind} needs a judge model, and suite {suite.name!r} has none: set suite.judge_model first",
        )
    return {"type": kind, "params": params if isinstance(params, dict) else {}, "fatal": data.get("fatal", False)}


def _mean_mock(data: dict[str, Any], *, prefix: str, functions: CallableFunctions | None,
               problems: _Problems, tables: dict[str, Any] | None = None, draft: bool = False) -> dict[str, Any]:
    """The mock as stored, and what the schema of case documents cannot know: a function the agents can call, whose
    schemas its arguments and result fit (cases.tool_schemas) — except in a `draft`, which keeps what was recorded
    and is warned instead (mock_schema_warnings)."""
    name = data.get("function_name")
    if isinstance(name, str) and name.strip() and len(name) <= FUNCTION_NAME_MAX_LENGTH:
        name = name.strip()
        if functions is not None and name not in functions.names:
            problems.add(path_join(prefix, "function_name"), functions.not_callable(name), shared=functions.listing)
        elif functions is not None and not draft:
            for field, message in mock_schema_problems({**data, "function_name": name}, functions.declarations[name]):
                problems.add(_under(prefix, field), f"{message} (mock of {name})")
    table = data.get("table")
    if isinstance(table, dict):
        parameters = functions.parameters(name) if functions is not None and isinstance(name, str) else None
        _mean_table_mock(table, function=name, at=path_join(prefix, "table"), tables=tables, parameters=parameters,
                         problems=problems)
    return {
        "function_name": name,
        "arguments": data.get("arguments"),
        "call_index": data.get("call_index"),
        "result": data.get("result", ""),
        "stop": data.get("stop", False),
        "state_writes": data.get("state_writes", {}),
        "table": table,
    }


# The shape of `tables`, a mock's `table` and tableEquals is the schema's; here what it cannot know: that a named table
# is one the case declares, that "$args.<argument>" names an argument the function takes (when its declaration says),
# that a key field is one the rows have, and the tables' size.
def _no_table(name: str, tables: dict[str, Any]) -> str:
    if not tables:
        return f"the case declares no tables, so there is no table {name!r}; declare it under `tables`"
    return f"the case has no table {name!r}; its tables: {', '.join(sorted(tables))}"


def _argument_problem(value: Any, *, function: Any, parameters: frozenset[str] | None) -> str:
    if not isinstance(value, str) or not value.startswith(ARGS_PREFIX):
        return ""
    path = value.removeprefix(ARGS_PREFIX).split(".")
    if not all(part.strip() for part in path):
        return f"{value!r} must name an argument of the call after {ARGS_PREFIX}, e.g. {ARGS_PREFIX}order_id"
    if parameters is not None and path[0] not in parameters:
        return f"{value} names no parameter of {function} (its parameters: {', '.join(sorted(parameters))})"
    return ""


def _mean_table_mock(
    table: dict[str, Any], *, function: Any, at: str, tables: dict[str, Any] | None,
    parameters: frozenset[str] | None, problems: _Problems,
) -> None:
    name = table.get("name")
    rows = None
    if tables is not None and isinstance(name, str):
        rows = tables.get(name)
        if name not in tables:
            problems.add(path_join(at, "name"), _no_table(name, tables))
    for part in ("key", "when", "update"):
        values = table.get(part)
        if not isinstance(values, dict):
            continue
        for field, value in values.items():
            # A list in `when` is the values allowed, each of which may name an argument.
            for item in value if part == "when" and isinstance(value, list) else [value]:
                if problem := _argument_problem(item, function=function, parameters=parameters):
                    problems.add(path_join(path_join(at, part), field), problem)
                    break
    key = table.get("key")
    if isinstance(key, dict) and isinstance(rows, list) and rows:
        for field in key:
            if not any(isinstance(row, dict) and field in row for row in rows):
                problems.add(path_join(path_join(at, "key"), field),
                             f"no row of table {name!r} has the field {field!r}, so no call could find a record")


def _mean_table_equals(
    params: dict[str, Any], *, at: str, tables: dict[str, Any] | None, problems: _Problems
) -> None:
    name, key, rows = params.get("table"), params.get("key", "id"), params.get("rows")
    if tables is not None and isinstance(name, str) and name not in tables:
        problems.add(path_join(at, "table"), _no_table(name, tables))
    if isinstance(key, str) and isinstance(rows, list):
        for index, row in enumerate(rows):
            if isinstance(row, dict) and key not in row:
                problems.add(
                    path_join(path_join(at, "rows"), index), f"has no {key!r} field, the key that finds its row"
                )


def _tables_size_problem(tables: Any) -> str:
    if not isinstance(tables, dict):
        return ""
    size = len(json.dumps(tables, ensure_ascii=False, separators=(",", ":")).encode())
    if size <= TABLES_BYTES_MAX:
        return ""
    return (
        f"is {size:,} bytes as JSON, more than the {TABLES_BYTES_TEXT} the tables may hold in all: a "
        "stateful mock's table is a small fixture of the records the case is about, not a database"
    )


def _mean_list(
    value: Any, *, field: str, mean: Callable[[dict[str, Any], str], dict[str, Any]]
) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [mean(item, path_join(field, index)) for index, item in enumerate(value) if isinstance(item, dict)]


def _mean_case_fields(data: dict[str, Any], *, problems: _Problems) -> dict[str, Any]:
    """The case's own fields with defaults filled in, and what the database must hold: the entry agent and the
    source conversation."""
    name = data.get("name")
    conversation_id = data.get("source_conversation")
    if isinstance(conversation_id, int) and not isinstance(conversation_id, bool) and 1 <= conversation_id <= MAX_ID:
        if not Conversation.objects.filter(pk=conversation_id).exists():
            problems.add("source_conversation", f"no conversation with id {conversation_id}")
    entry_agent = data.get("entry_agent")
    if entry_agent == "":
        entry_agent = None
    if isinstance(entry_agent, str) and not Agent.objects.filter(name=entry_agent).exists():
        problems.add("entry_agent", f"no agent named {entry_agent!r}")
    if problem := _tables_size_problem(data.get("tables")):
        problems.add("tables", problem)
    warnings = data.get("warnings", [])
    if isinstance(warnings, list):
        # That warning is worked out from the case each time it is shown (see case_warnings), never a stored note.
        warnings = [note for note in warnings if note != NO_ASSERTIONS_WARNING]
    return {
        "name": name.strip() if isinstance(name, str) else name,
        "description": data.get("description", ""),
        "enabled": data.get("enabled", True),
        "source": data.get("source", Case.Source.MANUAL),
        "source_conversation": conversation_id,
        "type": data.get("type", Case.Type.AGENT),
        "entry_agent": entry_agent,
        "initial_state": data.get("initial_state", {}),
        "tables": data.get("tables", {}),
        "priority": data.get("priority", 0),
        "tags": data.get("tags", []),
        "unmocked_policy": data.get("unmocked_policy", Case.UnmockedPolicy.BLOCK),
        "warnings": warnings,
    }


def _check_routing(document: dict[str, Any], *, problems: _Problems) -> None:
    """A routing case asks one question: where did the first message go. Anything more would blur what failed."""
    if len(document["turns"]) > 1:
        problems.add("turns", f"a routing case has exactly one turn (this one has {len(document['turns'])})")
    if document["simulated_user"] is not None:
        problems.add("simulated_user", "a routing case has no simulated user: it checks where one message goes")
    placed = [("assertions", index, item) for index, item in enumerate(document["assertions"])] + [
        (f"turns[{turn_index}].assertions", index, item)
        for turn_index, turn in enumerate(document["turns"])
        for index, item in enumerate(turn["assertions"])
    ]
    if not any(item.get("type") in ROUTING_ASSERTIONS for _, _, item in placed):
        problems.add("assertions", "a routing case needs at least one routedToAgent or agentChain assertion")
    for where, index, item in placed:
        if item.get("type") in JUDGED_ASSERTIONS:
            problems.add(
                f"{where}[{index}].type",
                f"{item.get('type')} is not allowed in a routing case: routing is checked deterministically",
            )


GOAL_AT_TURN_MESSAGE = "goalReached judges the whole conversation: put it in the case's assertions, not a turn's"
_SIMULATED_USER_DEFAULTS = defaults(SimulatedUserEntry)


def _mean_simulated_user(
    data: Any, *, suite: Suite | None, functions: CallableFunctions | None, problems: _Problems
) -> dict[str, Any] | None:
    """The simulated user with its defaults, and what the schema cannot know: a user model that is configured (or a
    judge model on the suite to stand in for it), and end conditions naming functions the agent can call."""
    if not isinstance(data, dict):
        return None
    user = simulated_user_document(data)
    model = user.get("model")
    if isinstance(model, str) and re.match(MODEL_KEY, model):
        configured = [config.key for config in configured_models()]
        if model not in configured:
            problems.add(
                "simulated_user.model",
                f"{model!r} is not a configured model; configured: {', '.join(configured) or 'none'}",
            )
    elif model == "" and suite is not None and not suite.judge_model:
        problems.add(
            "simulated_user.model",
            f"no model plays the user: name one here, or set a judge model on suite {suite.name!r} (the default)",
        )
    conditions = user.get("end_when")
    if isinstance(conditions, list):
        user["end_when"] = [
            {"type": item.get("type"), "params": item.get("params", {})}
            for item in conditions
            if isinstance(item, dict)
        ]
        for index, item in enumerate(user["end_when"]):
            function = item["params"].get("function") if isinstance(item["params"], dict) else None
            if functions is not None and isinstance(function, str) and function.strip() and (
                function not in functions.names
            ):
                problems.add(
                    f"simulated_user.end_when[{index}].params.function", functions.not_callable(function),
                    shared=functions.listing,
                )
    return user


def simulated_user_document(data: dict[str, Any]) -> dict[str, Any]:
    """A simulated user with its defaults filled in, its fields in the schema's order: how it is stored."""
    return {key: data.get(key, _SIMULATED_USER_DEFAULTS.get(key)) for key in SimulatedUserEntry.model_fields}


def _check_goals(document: dict[str, Any], *, problems: _Problems) -> None:
    """A goalReached assertion judges against a goal: the simulated user's, or its own `goal` in a case without one
    (a frozen simulated case keeps its goal that way)."""
    for index, item in enumerate(document["assertions"]):
        params = item.get("params") if isinstance(item.get("params"), dict) else {}
        own_goal = params.get("goal")
        if item.get("type") == Assertion.Type.GOAL_REACHED and document["simulated_user"] is None and not (
            isinstance(own_goal, str) and own_goal.strip()
        ):
            problems.add(
                f"assertions[{index}].params.goal",
                "is required for goalReached in a case without a simulated_user: the goal to judge against",
            )

