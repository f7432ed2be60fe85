"""The rules a suite and a case must meet, in one place: the API, the admin, import and recording all apply these.

A suite's shape and limits are the JSON Schema `suite-document` of cases/schema.py, checked first; what follows here
is only what needs the database. A case travels as a JSON document whose shape is the JSON Schema `case-document` of
cases/schema.py — generated from the same definition as the published schema of case files, and checked by
jsonschema, not by hand here; this module adds what a schema cannot know (see "Cases: shape from the schema, then
meaning"). Validation never stops at the first problem: every
problem is reported with the path of the field it concerns (`turns[1].assertions[0].params.pattern`), because the
person fixing a recorded draft or an import file wants the whole list at once.

JSON-valued fields (objects and lists such as `initial_state` or assertion `params`) may also arrive as JSON text —
from a text box or a hand-edited file — and are parsed here, so the same rules apply however the value was written.
They may nest at most MAX_JSON_DEPTH deep and hold only finite numbers (no NaN, Infinity or 1e999).

Every function name must be one the agents under test can call (see CallableFunctions): a mock or a toolCalled /
toolNotCalled assertion, against the case's entry agent and the sub-agents it can route to; a suite's extra-allowed
and force-blocked names (stripped, as mock names are), against every agent a case of the suite can reach. A name
that matches nothing would silently mock, allow or block nothing. Extra-allowed functions must also be declared free
of effects outside agenttest: the others are to be mocked.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agenthost.seams import (
    Agent,
    Conversation,
    agent_callable_functions,
    configured_models,
    declared_functions,
    function_is_effect_free,
    get_function,
    runtime_tool_declarations,
)
from cases.models import Assertion, Case, Suite
from cases.schema import (
    ARGS_PREFIX,
    FUNCTION_NAME_MAX_LENGTH,
    MODEL_KEY,
    NAME_MAX_LENGTH,
    TABLES_BYTES_MAX,
    TABLES_BYTES_TEXT,
    SimulatedUserEntry,
    SuiteDocument,
    defaults,
    fields_problems,
    part_problems,
    schema_problems,
)
from cases.tool_schemas import mock_schema_problems
from common.inputs import (
    INT_RANGE_PROBLEM,
    MAX_ID,
    MAX_JSON_DEPTH,
    UNSTORABLE_MESSAGE,
    int_out_of_range_path,
    json_loads,
    json_text_too_deep,
    nonfinite_path,
    text_is_storable,
    too_deep_path,
)
from common.patterns import pattern_problem

ROUTING_ASSERTIONS = (Assertion.Type.ROUTED_TO_AGENT, Assertion.Type.AGENT_CHAIN)
TOOL_ASSERTIONS = (Assertion.Type.TOOL_CALLED, Assertion.Type.TOOL_NOT_CALLED)
JUDGED_ASSERTIONS = (Assertion.Type.LLM_JUDGE, Assertion.Type.GOAL_REACHED)

SUITE_DOCUMENT_FIELDS = tuple(SuiteDocument.model_fields)
SUITE_DEFAULTS = defaults(SuiteDocument)
DEPTH_MESSAGE = f"nests more than {MAX_JSON_DEPTH} levels deep (the most a JSON value may)"
NONFINITE_MESSAGE = "must hold only finite numbers: NaN and Infinity (or 1e999) are not JSON"
NO_ASSERTIONS_WARNING = (
    "the case has no assertions, so it verifies nothing: a run ends it Error; add at least one assertion"
)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document. `case` names the case document it belongs to when several are checked."""

    field: str
    message: str
    case: str = ""
    # The tail of `message` that other problems of the same document may repeat word for word (the functions an
    # agent can call): a summary of several problems says it once.
    shared: str = ""

    @property
    def own_message(self) -> str:
        return self.message.removesuffix(self.shared).rstrip("; ") if self.shared else self.message

    def as_dict(self) -> dict[str, str]:
        data = {"field": self.field, "message": self.message}
        if self.case:
            data["case"] = self.case
        return data

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class CaseValidationError(Exception):
    """A case (or a batch of case documents) that breaks the rules; `problems` lists every reason."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(problems_summary(self.problems))


def problems_summary(problems: list[Problem]) -> str:
    """Every problem once, for a person to read: what several share (the list of callable functions) at the end,
    said once, rather than after each of them."""
    own = [f"{problem.field}: {problem.own_message}" for problem in problems]
    shared = [problem.shared for problem in problems if problem.shared]
    return "; ".join(dict.fromkeys([*own, *shared]))


class SuiteValidationError(CaseValidationError):
    """A suite that breaks the rules."""


# --- What the agents under test can call --------------------------------------------------------------------------


@dataclass(frozen=True)
class CallableFunctions:
    """The functions a conversation can call: what every agent it can reach from its entry agent (sub-agents, their
    sub-agents, …) declares, and the five control-flow functions. Rules, too, call only these (the host resolves a
    rule's function among them).

    `declarations` holds, per name, each reaching agent's own declaration of it (None for a control-flow function
    the agent does not declare)."""

    agents: tuple[str, ...]
    declarations: dict[str, tuple[dict[str, Any] | None, ...]]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.declarations)

    def effect_free(self, name: str) -> bool:
        """Free of outside effects however it is reached: a static output in one agent does not make another agent's
        real implementation safe."""
        return all(function_is_effect_free(name, declaration) for declaration in self.declarations.get(name, (None,)))

    @property
    def listing(self) -> str:
        return f"callable functions (agents: {', '.join(self.agents)}): {', '.join(sorted(self.names))}"

    def parameters(self, name: str) -> frozenset[str] | None:
        """The arguments `name` takes, when every declaration of it lists them (its JSON Schema's properties, else the
        registered function's); None when one does not, and no argument name can be checked against them."""
        found: set[str] = set()
        for declaration in self.declarations.get(name, (None,)):
            schema = (declaration or {}).get("parameters")
            if not isinstance(schema, dict) and (registered := get_function(name)) is not None:
                schema = registered.parameters
            properties = schema.get("properties") if isinstance(schema, dict) else None
            if not isinstance(properties, dict) or not properties:
                return None
            found.update(properties)
        return frozenset(found)

    def not_callable(self, name: str) -> str:
        """Why `name` is refused, with a near match and the whole list (`listing`, last), so the fix is obvious."""
        near = _near_match(name, self.names)
        hint = f"did you mean {near!r}? " if near is not None else ""
        return f"{name!r} is not a function the agent under test can call; {hint}{self.listing}"


def _near_match(name: str, names: frozenset[str]) -> str | None:
    folded = {candidate.casefold(): candidate for candidate in names}
    wanted = name.strip().casefold()
    if wanted in folded:
        return folded[wanted]
    close = difflib.get_close_matches(wanted, list(folded), n=1, cutoff=0.8)
    return folded[close[0]] if close else None


def callable_functions(entry_agents: list[Agent]) -> CallableFunctions:
    """What conversations starting with any of `entry_agents` can call (see CallableFunctions)."""
    reached: dict[int, Agent] = {}
    waiting = list(entry_agents)
    while waiting:
        agent = waiting.pop(0)
        if agent.pk in reached:
            continue
        reached[agent.pk] = agent
        waiting.extend(agent.sub_agents.all())
    declarations: dict[str, list[dict[str, Any] | None]] = {}
    for agent in reached.values():
        declared = [item for item in declared_functions(agent.functions or []) if isinstance(item, dict)]
        # A runtime agent's tools are its code's, discovered from the framework object.
        from_code = runtime_tool_declarations(agent)
        declared += from_code
        for name in [*agent_callable_functions(agent), *(item["name"] for item in from_code)]:
            own = [item for item in declared if item.get("name") == name]
            declarations.setdefault(name, []).extend(own or [None])
    return CallableFunctions(
        agents=tuple(agent.name for agent in reached.values()),
        declarations={name: tuple(found) for name, found in declarations.items()},
    )


def case_callable_functions(*, suite: Suite | None, entry_agent: Agent | None = None) -> CallableFunctions | None:
    """What a case of `suite` entering through `entry_agent` (None: the suite's agent) can call; None when there is
    no agent to ask yet (an unsaved or agent-less suite), and the checks that need it are skipped."""
    agent = entry_agent or (suite.agent if suite is not None and suite.agent_id else None)
    return callable_functions([agent]) if agent is not None else None


def suite_callable_functions(*, agent: Agent, suite: Suite | None = None) -> CallableFunctions:
    """What any case of the suite can call: through the suite's agent, or the entry agent a case names."""
    entry_agents = [agent]
    if suite is not None and suite.pk is not None:
        entry_agents += list(Agent.objects.filter(pk__in=Case.objects.filter(suite=suite).values("entry_agent")))
    return callable_functions(entry_agents)


# --- Building blocks ----------------------------------------------------------------------------------------------


class _Problems:
    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, field: str, message: str, *, shared: str = "") -> None:
        self.items.append(Problem(field, message, shared=shared))


def _at(prefix: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else key


def _under(field: str, path: str) -> str:
    """`field` joined with a path from common.inputs ("a.b[0]", "[2].c" or "(top level)")."""
    if path == "(top level)":
        return field or "document"
    if not field or path.startswith("["):
        return f"{field}{path}" or "document"
    return f"{field}.{path}"


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)


_INVALID = object()


def _object_or_problem(value: Any, *, field: str, what: str, problems: _Problems) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    problems.add(field or "document", f"must be {what} (a JSON object), not {_json_type(value)}")
    return None


def _too_deep(data: dict[str, Any], *, problems: _Problems) -> bool:
    """Refuses a document nested deeper than any case needs, before the recursive checks below walk it."""
    deep = too_deep_path(data)
    if deep is not None:
        problems.add(_under("", deep), DEPTH_MESSAGE)
    return deep is not None


def _unstorable_problems(value: Any, *, field: str, problems: _Problems) -> None:
    """Every string (or object key) holding text no database stores (common.inputs.text_is_storable)."""
    if isinstance(value, str):
        if not text_is_storable(value):
            problems.add(field or "document", UNSTORABLE_MESSAGE)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not text_is_storable(str(key)):
                problems.add(field or "document", f"has a key that {UNSTORABLE_MESSAGE}")
            else:
                _unstorable_problems(item, field=_at(field, str(key)), problems=problems)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _unstorable_problems(item, field=_at(field, index), problems=problems)


# --- Cases: shape from the schema, then meaning ---------------------------------------------------------------
# The shape of a case document — keys, types, required fields, allowed values, each assertion type's parameters — is
# the JSON Schema of cases/schema.py, the one the files are checked against too. What is checked here by hand is what
# a schema cannot know: storable text, JSON written as text, names the database must hold, regular expressions that
# compile, and the rules across parts (routing cases).

CASE_KIND = "case-document"
CASE_PARTS = ("history", "turns", "assertions", "mocks")


def _from_text(value: Any, *, field: str, expected: type, nullable: bool, problems: _Problems) -> Any:
    """A JSON-valued field, parsed when it came as JSON text; `_INVALID` (with a problem) when it cannot be stored.
    Whether it has the right type is the schema's to say."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None if nullable else expected()
        if json_text_too_deep(text):
            # Decoding it would exhaust Python's recursion limit before it could be refused.
            problems.add(field, DEPTH_MESSAGE)
            return _INVALID
        try:
            # Not json.loads: an integer of more than 4,300 digits made int() raise ValueError, not this.
            value = json_loads(text)
        except json.JSONDecodeError as exc:
            wanted = "a JSON object" if expected is dict else "a JSON list"
            problems.add(
                field,
                f"must be {wanted}; as text it is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
            )
            return _INVALID
        # The document was checked for unstorable text before; what the text escaped was not.
        found = len(problems.items)
        _unstorable_problems(value, field=field, problems=problems)
        if len(problems.items) > found:
            return _INVALID
    if (deep := too_deep_path(value)) is not None:
        problems.add(_under(field, deep), DEPTH_MESSAGE)
        return _INVALID
    if (bad := nonfinite_path(value)) is not None:
        # Python reads 1e999, Infinity and NaN, but no JSON column stores them.
        problems.add(_under(field, bad), NONFINITE_MESSAGE)
        return _INVALID
    if (bad := int_out_of_range_path(value)) is not None:
        problems.add(_under(field, bad), f"must hold only {INT_RANGE_PROBLEM}")
        return _INVALID
    return value


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
                self._item(item, _at(at, index), each) for index, item in enumerate(container[key])
            ]

    @staticmethod
    def _item(item: Any, where: str, each: Callable[[dict[str, Any], str], None]) -> Any:
        if not isinstance(item, dict):
            return item
        item = dict(item)
        each(item, where)
        return item

    def assertion(self, item: dict[str, Any], where: str) -> None:
        self.field(item, "params", at=_at(where, "params"), expected=dict)

    def mock(self, item: dict[str, Any], where: str) -> None:
        self.field(item, "arguments", at=_at(where, "arguments"), expected=dict, nullable=True)
        self.field(item, "state_writes", at=_at(where, "state_writes"), expected=dict)
        self.field(item, "table", at=_at(where, "table"), expected=dict, nullable=True)

    def turn(self, item: dict[str, Any], where: str) -> None:
        self.items(item, "assertions", at=_at(where, "assertions"), each=self.assertion)

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
    params_field = _at(prefix, "params")
    if isinstance(params, dict):
        pattern = params.get("pattern")
        if kind == Assertion.Type.OUTPUT_REGEX and isinstance(pattern, str) and pattern:
            # Compiled as the runner matches it, and tried on texts that make a catastrophic pattern explode.
            if (problem := pattern_problem(pattern)) is not None:
                problems.add(_at(params_field, "pattern"), problem)
        function = params.get("function")
        if kind in TOOL_ASSERTIONS and functions is not None and isinstance(function, str) and function.strip():
            if function not in functions.names:
                # It could never be called, so toolCalled could never pass and toolNotCalled would prove nothing.
                problems.add(
                    _at(params_field, "function"), functions.not_callable(function), shared=functions.listing
                )
        if kind == Assertion.Type.TABLE_EQUALS:
            _mean_table_equals(params, at=params_field, tables=tables, problems=problems)
    if kind in JUDGED_ASSERTIONS and suite is not None and not suite.judge_model:
        problems.add(
            _at(prefix, "type"),
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
            problems.add(_at(prefix, "function_name"), functions.not_callable(name), shared=functions.listing)
        elif functions is not None and not draft:
            for field, message in mock_schema_problems({**data, "function_name": name}, functions.declarations[name]):
                problems.add(_under(prefix, field), f"{message} (mock of {name})")
    table = data.get("table")
    if isinstance(table, dict):
        parameters = functions.parameters(name) if functions is not None and isinstance(name, str) else None
        _mean_table_mock(table, function=name, at=_at(prefix, "table"), tables=tables, parameters=parameters,
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


# --- Stateful mocks -----------------------------------------------------------------------------------------------
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
            problems.add(_at(at, "name"), _no_table(name, tables))
    for part in ("key", "when", "update"):
        values = table.get(part)
        if not isinstance(values, dict):
            continue
        for field, value in values.items():
            # A list in `when` is the values allowed, each of which may name an argument.
            for item in value if part == "when" and isinstance(value, list) else [value]:
                if problem := _argument_problem(item, function=function, parameters=parameters):
                    problems.add(_at(_at(at, part), field), problem)
                    break
    key = table.get("key")
    if isinstance(key, dict) and isinstance(rows, list) and rows:
        for field in key:
            if not any(isinstance(row, dict) and field in row for row in rows):
                problems.add(_at(_at(at, "key"), field),
                             f"no row of table {name!r} has the field {field!r}, so no call could find a record")


def _mean_table_equals(
    params: dict[str, Any], *, at: str, tables: dict[str, Any] | None, problems: _Problems
) -> None:
    name, key, rows = params.get("table"), params.get("key", "id"), params.get("rows")
    if tables is not None and isinstance(name, str) and name not in tables:
        problems.add(_at(at, "table"), _no_table(name, tables))
    if isinstance(key, str) and isinstance(rows, list):
        for index, row in enumerate(rows):
            if isinstance(row, dict) and key not in row:
                problems.add(_at(_at(at, "rows"), index), f"has no {key!r} field, the key that finds its row")


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
    return [mean(item, _at(field, index)) for index, item in enumerate(value) if isinstance(item, dict)]


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


def _storable(data: Any, *, what: str, problems: _Problems) -> dict[str, Any] | None:
    """The document, when it is an object the checks below can walk: not too deep and holding only storable text
    (those checks look names up in the database, which such text would break)."""
    data = _object_or_problem(data, field="", what=what, problems=problems)
    if data is None or _too_deep(data, problems=problems):
        return None
    _unstorable_problems(data, field="", problems=problems)
    return None if problems.items else data


def _clean_document(
    document: Any, *, suite: Suite | None, instance: Case | None
) -> tuple[dict[str, Any], list[Problem]]:
    problems = _Problems()
    data = _storable(document, what="a case document", problems=problems)
    if data is None:
        return {}, problems.items
    prepared = _Prepared(problems)
    data = prepared.case(data)
    prepared.add_schema_problems(schema_problems(CASE_KIND, data))
    cleaned = _mean_case_fields(data, problems=problems)
    name = cleaned["name"]
    if suite is not None and suite.pk is not None and isinstance(name, str) and 0 < len(name) <= NAME_MAX_LENGTH:
        taken = Case.objects.filter(suite=suite, name=name)
        if instance is not None and instance.pk is not None:
            taken = taken.exclude(pk=instance.pk)
        if taken.exists():
            problems.add("name", f"suite {suite.name!r} already has a case named {name!r}")
    entry = cleaned["entry_agent"]
    entry_agent = Agent.objects.filter(name=entry).first() if isinstance(entry, str) else None
    functions = case_callable_functions(suite=suite, entry_agent=entry_agent)
    if entry is not None and entry_agent is None:
        # Whose functions to check names against is unknown until the entry agent exists: that problem comes first.
        functions = None

    # Checked against the tables as given, even when they broke a rule of their own: one wrong row must not make
    # every mock of the case "no such table" too.
    tables = cleaned["tables"] if isinstance(cleaned["tables"], dict) else None

    def assertion(item: dict[str, Any], where: str) -> dict[str, Any]:
        return _mean_assertion(item, prefix=where, suite=suite, functions=functions, problems=problems, tables=tables)

    def turn_assertion(item: dict[str, Any], where: str) -> dict[str, Any]:
        if item.get("type") == Assertion.Type.GOAL_REACHED:
            problems.add(_at(where, "type"), GOAL_AT_TURN_MESSAGE)
        return assertion(item, where)

    def turn(item: dict[str, Any], where: str) -> dict[str, Any]:
        return {
            "user_message": item.get("user_message"),
            "assertions": _mean_list(item.get("assertions", []), field=_at(where, "assertions"), mean=turn_assertion),
        }

    cleaned["history"] = [
        {"role": item.get("role"), "content": item.get("content")}
        for item in data.get("history", []) if isinstance(item, dict)
    ] if isinstance(data.get("history", []), list) else []
    cleaned["turns"] = _mean_list(data.get("turns", []), field="turns", mean=turn)
    cleaned["assertions"] = _mean_list(data.get("assertions", []), field="assertions", mean=assertion)
    draft = is_draft(cleaned)
    cleaned["mocks"] = _mean_list(
        data.get("mocks", []), field="mocks",
        mean=lambda item, where: _mean_mock(item, prefix=where, functions=functions, problems=problems,
                                            tables=tables, draft=draft),
    )
    cleaned["simulated_user"] = _mean_simulated_user(
        data.get("simulated_user"), suite=suite, functions=functions, problems=problems
    )
    _check_goals(cleaned, problems=problems)
    if cleaned["type"] == Case.Type.ROUTING:
        _check_routing(cleaned, problems=problems)
    return cleaned, problems.items


# --- Simulated users (issue 24) -------------------------------------------------------------------------------

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


# --- Public -------------------------------------------------------------------------------------------------------


def validate_case_document(document: Any, *, suite: Suite | None, instance: Case | None = None) -> list[Problem]:
    """Every problem with a case document; empty when it may be stored.

    `suite` None skips the checks that need one (name taken, judge model). `instance` is the case being replaced, so
    keeping its own name is not a clash.
    """
    return _clean_document(document, suite=suite, instance=instance)[1]


def clean_case_document(document: Any, *, suite: Suite | None, instance: Case | None = None) -> dict[str, Any]:
    """The document with defaults filled in and JSON text parsed; raises CaseValidationError listing every problem."""
    cleaned, problems = _clean_document(document, suite=suite, instance=instance)
    if problems:
        raise CaseValidationError(problems)
    return cleaned


def validate_case_fields(fields: dict[str, Any]) -> list[Problem]:
    """Problems with the case's own fields only (no history, turns, mocks or assertions, no name clash): for forms
    that edit those parts separately."""
    problems = _Problems()
    data = _storable(fields, what="a case", problems=problems)
    if data is None:
        return problems.items
    prepared = _Prepared(problems)
    data = dict(data)
    prepared.simulated_user(data)
    prepared.field(data, "initial_state", at="initial_state", expected=dict)
    prepared.field(data, "tables", at="tables", expected=dict)
    for key in ("tags", "warnings"):
        prepared.field(data, key, at=key, expected=list)
    prepared.add_schema_problems(fields_problems(CASE_KIND, data, without=CASE_PARTS))
    _mean_case_fields(data, problems=problems)
    return problems.items


def _part(definition: str, value: Any, *, what: str, prepare: Callable[[_Prepared, dict[str, Any]], None],
          problems: _Problems) -> dict[str, Any] | None:
    data = _storable(value, what=what, problems=problems)
    if data is None:
        return None
    prepared = _Prepared(problems)
    data = dict(data)
    prepare(prepared, data)
    prepared.add_schema_problems(part_problems(CASE_KIND, definition, data))
    return data


def validate_assertion(
    assertion: dict[str, Any], *, suite: Suite | None, functions: CallableFunctions | None = None,
    tables: dict[str, Any] | None = None,
) -> list[Problem]:
    """Problems with one assertion: its type, its params for that type, a judge model for llmJudge, for
    toolCalled/toolNotCalled a function in `functions` (see case_callable_functions; None skips that check), and for
    tableEquals a table of the case's `tables` (None skips that check)."""
    problems = _Problems()
    data = _part("AssertionEntry", assertion, what="an assertion", problems=problems,
                 prepare=lambda prepared, item: prepared.assertion(item, ""))
    if data is not None:
        _mean_assertion(data, prefix="", suite=suite, functions=functions, problems=problems, tables=tables)
    return problems.items


def validate_mock(
    mock: dict[str, Any], *, functions: CallableFunctions | None = None, tables: dict[str, Any] | None = None,
    draft: bool = False,
) -> list[Problem]:
    """Problems with one mock; its function must be in `functions`, a stateful mock's table in the case's `tables`
    (None skips either check), and its arguments and result fit the function's schemas unless it is a `draft`'s
    (is_draft)."""
    problems = _Problems()
    data = _part("MockEntry", mock, what="a mock", problems=problems,
                 prepare=lambda prepared, item: prepared.mock(item, ""))
    if data is not None:
        _mean_mock(data, prefix="", functions=functions, problems=problems, tables=tables, draft=draft)
    return problems.items


def is_draft(case: dict[str, Any] | Case) -> bool:
    """A recorded or extracted case not yet enabled: it keeps its mocks as the conversation had them even where the
    tools' schemas refuse them (recordings are evidence), and the reviewer is warned instead; enabling it holds them
    to the schemas like any case."""
    if isinstance(case, Case):
        return not case.enabled and case.source != Case.Source.MANUAL
    return not case.get("enabled", True) and case.get("source", Case.Source.MANUAL) != Case.Source.MANUAL


def mock_schema_warnings(document: dict[str, Any], *, suite: Suite | None) -> list[str]:
    """Each of the case's mocks whose arguments or result its function's schemas refuse, for a reviewer to read: a
    draft's recorded misfits, or the mocks of a case whose tool changed its schemas since they were written."""
    entry = document.get("entry_agent")
    entry_agent = Agent.objects.filter(name=entry).first() if isinstance(entry, str) else None
    functions = case_callable_functions(suite=suite, entry_agent=entry_agent)
    if functions is None or (entry is not None and entry_agent is None):
        return []
    warnings = []
    for index, mock in enumerate(document.get("mocks") or []):
        name = mock.get("function_name") if isinstance(mock, dict) else None
        if name not in functions.names:
            continue
        for field, message in mock_schema_problems(mock, functions.declarations[name]):
            warnings.append(
                f"mocks[{index}].{field}: {message} — the mock of {name} does not fit the tool's schema; fix it "
                "before enabling the case"
            )
    return warnings


def validate_history_message(message: dict[str, Any]) -> list[Problem]:
    problems = _Problems()
    _part("HistoryEntry", message, what="a history message", problems=problems, prepare=lambda *_: None)
    return problems.items


def validate_turn(turn: dict[str, Any]) -> list[Problem]:
    """Problems with a turn's user message (its assertions are checked one by one with `validate_assertion`)."""
    problems = _Problems()
    _part("TurnEntry", {**turn, "assertions": []}, what="a turn", problems=problems, prepare=lambda *_: None)
    return problems.items


# --- Suites -------------------------------------------------------------------------------------------------------


SUITE_KIND = "suite-document"


def _clean_suite(data: Any, *, instance: Suite | None) -> tuple[dict[str, Any], list[Problem]]:
    """Shape from the schema (cases/schema.py's SuiteDocument), then what needs the database: the name free, the
    agent there, the judge model configured, and every function name one the suite's agents can call."""
    problems = _Problems()
    data = _storable(data, what="a suite", problems=problems)
    if data is None:
        return {}, problems.items
    prepared = _Prepared(problems)
    data = {**SUITE_DEFAULTS, "name": None, "agent": None, **data}
    for key in ("extra_allowed_functions", "force_blocked_functions", "network_allow"):
        prepared.field(data, key, at=key, expected=list)
    shape = dict(data)
    if isinstance(data["agent"], Agent):
        # The admin hands over the agent itself; its shape is its name's.
        shape["agent"] = data["agent"].name
    if isinstance(data["name"], str):
        # Stored stripped, so measured stripped.
        shape["name"] = data["name"].strip()
    prepared.add_schema_problems(schema_problems(SUITE_KIND, shape))
    wrong = {problem.field.split("[")[0] for problem in problems.items}

    name = data["name"].strip() if isinstance(data["name"], str) else data["name"]
    if "name" not in wrong:
        taken = Suite.objects.filter(name=name)
        if instance is not None and instance.pk is not None:
            taken = taken.exclude(pk=instance.pk)
        if taken.exists():
            problems.add("name", f"a suite named {name!r} already exists")

    agent = data["agent"]
    if "agent" not in wrong and not isinstance(agent, Agent):
        agent = Agent.objects.filter(name=agent.strip()).first() or agent
        if not isinstance(agent, Agent):
            problems.add("agent", f"no agent named {data['agent']!r}")

    judge_model = data["judge_model"] or ""
    if "judge_model" in wrong:
        pass
    elif judge_model:
        configured = [config.key for config in configured_models()]
        if judge_model not in configured:
            problems.add(
                "judge_model",
                f"{judge_model!r} is not a configured model; configured: {', '.join(configured) or 'none'}",
            )
    elif instance is not None and instance.pk is not None:
        judged = list(
            Case.objects.filter(suite=instance, enabled=True, assertions__type=Assertion.Type.LLM_JUDGE)
            .values_list("name", flat=True)
            .distinct()[:5]
        )
        if judged:
            problems.add(
                "judge_model",
                f"enabled cases use llmJudge assertions ({', '.join(judged)}); they need a judge model",
            )

    functions = suite_callable_functions(agent=agent, suite=instance) if isinstance(agent, Agent) else None
    extra_allowed = _function_names(data, "extra_allowed_functions", functions=functions, problems=problems)
    for index, function in enumerate(extra_allowed):
        # A name the schema refused (not a string) cannot name a function, nor be hashed.
        if (
            functions is not None
            and isinstance(function, str)
            and function in functions.names
            and not functions.effect_free(function)
        ):
            problems.add(
                _at("extra_allowed_functions", index),
                _effects_message(function, functions.declarations.get(function, ())),
            )
    force_blocked = _function_names(data, "force_blocked_functions", functions=functions, problems=problems)
    network_allow = _network_allow(data, wrong, extra_allowed, functions, problems)
    rules = data.get("mock_rules")
    if functions is not None and isinstance(rules, dict) and "mock_rules" not in wrong:
        # A rule for a function no case can call would compare nothing.
        for function in rules:
            if function not in functions.names:
                problems.add(_at("mock_rules", function), functions.not_callable(function), shared=functions.listing)
    concurrency = data["case_concurrency"]
    if "case_concurrency" not in wrong and concurrency > 1 and functions is not None:
        problem = _hermetic_problem(extra_allowed, functions)
        if problem:
            problems.add("case_concurrency", f"{problem}; keep 1 or allow only functions declared free of them")
    cleaned = {
        **{key: data.get(key) for key in SUITE_DOCUMENT_FIELDS},
        "name": name,
        "agent": agent,
        "judge_model": judge_model,
        "extra_allowed_functions": extra_allowed,
        "force_blocked_functions": force_blocked,
        "network_allow": network_allow,
    }
    return cleaned, problems.items


def _network_allow(
    data: dict[str, Any], wrong: set[str], extra_allowed: list[Any], functions: CallableFunctions | None,
    problems: _Problems,
) -> list[Any]:
    """The hosts stored lower-cased; refused for a suite that has no extra-allowed function to reach them, or one
    whose extra-allowed functions are not all free of outside effects (a host open to such a tool would let it act
    for real)."""
    hosts = data.get("network_allow")
    if "network_allow" in wrong or not isinstance(hosts, list):
        return hosts if isinstance(hosts, list) else []
    hosts = list(dict.fromkeys(host.strip().lower() for host in hosts if isinstance(host, str)))
    if not hosts:
        return []
    if not extra_allowed:
        problems.add("network_allow", "names hosts for the suite's extra-allowed tools, and the suite allows none; "
                                      "mock the tools instead")
    elif functions is not None:
        effectful = [name for name in extra_allowed
                     if isinstance(name, str) and name in functions.names and not functions.effect_free(name)]
        if effectful:
            problems.add("network_allow", f"only a suite whose extra-allowed functions are all free of effects "
                                          f"outside agenttest may open hosts to them; {', '.join(effectful)} is not")
    return hosts


def suite_hermetic_problem(*, suite: Suite, live: Any = None) -> str:
    """Why the suite's cases might reach something outside agenttest (so they must run one at a time); "" when every
    function is mocked or blocked and every extra-allowed one is declared free of outside effects. Asked again at
    run time: a registered function's declaration may have changed since the suite was saved, and an MCP tool's
    annotations are its server's to change — the cached listing is not trusted for them. An extra-allowed MCP tool
    counts as hermetic only as its server lists it now (`live`, the run's LiveListings); without `live` it cannot
    be verified, so it does not."""
    functions = suite_callable_functions(agent=suite.agent, suite=suite)
    extra_allowed = list(suite.extra_allowed_functions or [])
    problem = _hermetic_problem(extra_allowed, functions)
    if problem:
        return problem
    for name in extra_allowed:
        for declaration in functions.declarations.get(name, ()):
            if not isinstance((declaration or {}).get("mcp"), dict):
                continue
            if live is None:
                return f"{name} is an MCP tool whose annotations cannot be verified with its server here"
            if stale := live.problem(declaration):
                return stale
    return ""


def _hermetic_problem(extra_allowed: list[Any], functions: CallableFunctions) -> str:
    effectful = [
        name for name in extra_allowed
        if isinstance(name, str) and (name not in functions.names or not functions.effect_free(name))
    ]
    if not effectful:
        return ""
    return (
        "only a hermetic suite may run cases side by side, and extra_allowed_functions lets "
        f"{', '.join(effectful)} run, which may have effects outside agenttest"
    )


def _function_names(
    data: dict[str, Any], field: str, *, functions: CallableFunctions | None, problems: _Problems
) -> list[str]:
    """The names in `data[field]`, stripped as mock names are, each one a function the suite's agents can call: a name
    that matches nothing would silently allow or block nothing. Empty when the schema already refused the list (its
    problems are reported) or there is no agent to ask."""
    names = data.get(field)
    if not isinstance(names, list) or not all(isinstance(name, str) and name.strip() for name in names):
        return names if isinstance(names, list) else []
    names = [name.strip() for name in names]
    for index, name in enumerate(names):
        if functions is not None and name not in functions.names:
            problems.add(_at(field, index), functions.not_callable(name), shared=functions.listing)
    return names


def _effects_message(name: str, declarations: tuple[dict[str, Any] | None, ...] = ()) -> str:
    registered = get_function(name)
    if registered is None and any(isinstance((item or {}).get("mcp"), dict) for item in declarations):
        why = ("is an MCP tool its server does not annotate read-only (readOnlyHint), so it counts as having effects "
               "outside agenttest")
    elif registered is not None and registered.outside_effects is None:
        why = "does not declare whether it has effects outside agenttest, so it counts as having them"
    elif registered is not None:
        why = "has effects outside agenttest"
    else:
        why = "has no implementation declared free of effects outside agenttest"
    return f"{name} {why}; mock it in the cases instead of allowing it"


def validate_suite(data: Any, *, instance: Suite | None = None) -> list[Problem]:
    """Every problem with a suite's fields; `agent` may be an Agent or its name."""
    return _clean_suite(data, instance=instance)[1]


def clean_suite_data(data: Any, *, instance: Suite | None = None) -> dict[str, Any]:
    """The suite fields with defaults filled in and `agent` resolved; raises SuiteValidationError."""
    cleaned, problems = _clean_suite(data, instance=instance)
    if problems:
        raise SuiteValidationError(problems)
    return cleaned


def suite_check(data: Any, *, instance: Suite | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """The cleaned suite fields (names stripped, `agent` resolved) and every problem: for forms that store what
    they were given only when there is no problem."""
    return _clean_suite(data, instance=instance)


# --- Warnings -----------------------------------------------------------------------------------------------------


def case_warnings(document: dict[str, Any]) -> list[str]:
    """What is worth telling whoever enables a case that may be stored but cannot tell anything: an enabled case with
    turns and no assertion passes or fails on nothing, so the runner ends it Error."""
    turns = document.get("turns") or []
    checks = [*(document.get("assertions") or []), *(item for turn in turns for item in turn.get("assertions") or [])]
    plays = turns or document.get("simulated_user")
    return [NO_ASSERTIONS_WARNING] if document.get("enabled") and plays and not checks else []
