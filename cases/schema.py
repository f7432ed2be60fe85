"""The shape of the files a team keeps in its repository — one JSON Schema per kind (agent, suite, case) — defined
once, as pydantic models, and checked with jsonschema against the generated schema, so what `agenttest schema`
publishes is exactly what `agenttest apply` enforces. The case document the API, the admin and import take
(`case-document`) is generated from the same models: it is the one description of a case's shape everywhere
(cases/validation/ checks it with this module).

The schema covers shape only: keys, types, required fields, allowed values and each assertion type's parameters.
What needs the database or other files — a mock's function must be one the agent can call, an agent must exist, a
name must be unique, a regular expression must compile — is checked afterwards by cases/validation/ and
agenthost/validation.py. A keyword's message may be our own (`x-messages` beside the rule), so the words stay those
agenttest always used ("is required for outputContains", "must be a whole number from 1 to 5").

Problems come back as (path, message) with paths in the style of the rest of agenttest: `turns[0].mocks[1].result`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import cache
from typing import Annotated, Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

from agenthost.seams import (
    AGENT_NAME_MAX_LENGTH,
    AGENT_PATH_MAX_LENGTH,
    MAX_STEPS_MAX,
    MAX_STEPS_MESSAGE,
    MAX_STEPS_MIN,
    TEMPERATURE_MAX,
    TEMPERATURE_MESSAGE,
    TEMPERATURE_MIN,
)
from common.model_keys import MODEL_KEY_PATTERN, MODEL_KEY_RULE

SCHEMA_ID = "https://agenttest.invalid/schema/{kind}.schema.json"
KINDS = ("agent", "suite", "case")

JsonObject = dict[str, Any]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


BLANK = r"\S"
MODEL_KEY = MODEL_KEY_PATTERN
PATTERN_MESSAGES = {MODEL_KEY: MODEL_KEY_RULE}
NonEmpty = Field(min_length=1, pattern=BLANK)
NonEmptyText = Annotated[str, Field(min_length=1, pattern=BLANK)]


def _messages_for(**messages: str) -> dict[str, Any]:
    """Our own wording for a keyword's failure (`required`, `type`, `minLength`, …), kept in the schema itself as
    `x-messages`, so the message sits beside the rule it explains."""
    return {"x-messages": messages}


# --- Agents -------------------------------------------------------------------------------------------------------


class FunctionDeclaration(_Strict):
    """A function declared in full; a name alone (a string) uses the registered function's description and schema."""

    name: str = NonEmpty
    description: str = ""
    parameters: JsonObject | None = Field(None, description="JSON Schema of the arguments (type: object).")
    output: Any = Field(None, description="A static answer instead of an implementation.")


_MCP_NAME = (
    "must name an MCP server configured in the MCP file (AGENTTEST_MCP_FILE); its command, address and tool "
    "annotations come from there and from the server's own listing, never from the agent"
)


class McpServerTools(_Strict):
    """The tools of an MCP server: every one it lists, or the named subset; each is called `<server>__<tool>`."""

    mcp: str = Field(
        min_length=1, pattern=BLANK, description="A server configured in the MCP file (AGENTTEST_MCP_FILE).",
        json_schema_extra=_messages_for(type=_MCP_NAME, minLength=_MCP_NAME, pattern=_MCP_NAME),
    )
    tools: list[NonEmptyText] | None = Field(None, description="Only these of the server's tools; absent: all.")


class Rule(_Strict):
    trigger: Literal["conversation_started", "state_changed"]
    key: str | None = Field(None, description="The state key a state_changed rule watches.")
    function: str = NonEmpty
    arguments: JsonObject | None = None


class AgentFile(_Strict):
    """An agent: `agents/<name>.yaml`."""

    model_config = ConfigDict(extra="forbid", title="agenttest agent")

    schema_: str | None = Field(None, alias="$schema", description="Where the schema is, for editors; ignored.")
    name: str = Field(min_length=1, max_length=AGENT_NAME_MAX_LENGTH, pattern=BLANK)
    description: str = ""
    instruction: str | None = Field(None, description="The system instruction (a Django template), inline.")
    instruction_file: str | None = Field(
        None, description="A text file beside this one holding the instruction (instead of `instruction`)."
    )
    model: str = Field(pattern=MODEL_KEY, description="provider:model, e.g. openai:gpt-4o-mini.")
    temperature: float | None = Field(
        0.0, ge=TEMPERATURE_MIN, le=TEMPERATURE_MAX, description="Empty (null): the model's default; none is sent.",
        json_schema_extra=_messages_for(type=TEMPERATURE_MESSAGE, minimum=TEMPERATURE_MESSAGE,
                                        maximum=TEMPERATURE_MESSAGE),
    )
    max_steps: int | None = Field(
        None, ge=MAX_STEPS_MIN, le=MAX_STEPS_MAX, description="Model steps per turn; empty: AGENTTEST_MAX_STEPS.",
        json_schema_extra=_messages_for(type=MAX_STEPS_MESSAGE, minimum=MAX_STEPS_MESSAGE, maximum=MAX_STEPS_MESSAGE),
    )
    # Issue 26: an agent whose own code runs it (agenthost/runtimes); instruction and tools are then that code's.
    runtime: Literal["native", "openai-agents", "pydantic-ai", "python", "langgraph", "process"] = Field(
        "native", description="Whose loop runs the agent: native (agenttest's), the team's code at `entry`, or a "
        "program (process) spoken to over its stdio."
    )
    entry: str = Field("", max_length=AGENT_PATH_MAX_LENGTH,
                       description='The team\'s code a non-native runtime runs, "module:attribute".')
    deps: str = Field(
        "", max_length=AGENT_PATH_MAX_LENGTH, description='pydantic-ai: the factory of the run\'s deps, '
        '"module:attribute", called with the conversation\'s state (under test: the case\'s initial state).',
    )
    # Issue 39: an agent that is a program in any language (runtime "process", agenthost/runtimes/process.py).
    command: str = Field(
        "", max_length=AGENT_PATH_MAX_LENGTH,
        description='A process agent: the program to start, e.g. "node" or "./agent".',
    )
    args: list[str] = Field([], description="A process agent: the program's arguments.")
    cwd: str = Field(
        "", max_length=AGENT_PATH_MAX_LENGTH,
        description="A process agent: its directory, relative to where agenttest runs.",
    )
    env: list[str] = Field([], description="A process agent: names of environment variables passed on to it (their "
                           "values are never stored).")
    protocol: Literal["", "jsonl", "acp"] = Field(
        "", description='A process agent: how it is spoken to over stdio, "jsonl" (one JSON object per line) or '
        '"acp" (the Agent Client Protocol, agenttest its client).'
    )
    outside_effects: dict[NonEmptyText, bool] = Field(
        {}, description="For the tools of the team's code: name → whether it has effects outside agenttest."
    )
    functions: list[NonEmptyText | FunctionDeclaration | McpServerTools] = []
    rules: list[Rule] = []
    sub_agents: list[NonEmptyText] = []


# --- Suites -------------------------------------------------------------------------------------------------------


# The limits of a suite, here and nowhere else: the API, the admin, `agenttest apply` and the OpenAPI description all
# read them from SuiteDocument.
NAME_MAX_LENGTH = 200
TIMEOUT_RANGE = (1, 3600)
CASE_CONCURRENCY_RANGE = (1, 64)
# A group names a Celery queue (runs.<group>) and appears in `agenttest worker --groups a,b`: no commas, no spaces.
ISOLATION_GROUP_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,49}$"

EXTRA_ALLOWED_HELP = (
    "Functions allowed to really execute during a test, on top of the five control-flow ones: only functions "
    "declared free of effects outside agenttest (or answered by a static output) that the suite's agents can call; "
    "mock the rest."
)
FORCE_BLOCKED_HELP = (
    "Functions always blocked, even when allowed or mocked; each must be a function the suite's agents can call "
    "(surrounding space is dropped)."
)
_AGENT_REQUIRED = "is required: the name of the agent this suite tests"
_TIMEOUT_MESSAGE = f"must be between {TIMEOUT_RANGE[0]} and {TIMEOUT_RANGE[1]} seconds"
_CONCURRENCY_MESSAGE = f"must be between {CASE_CONCURRENCY_RANGE[0]} and {CASE_CONCURRENCY_RANGE[1]}"
_GROUP_MESSAGE = (
    "must be 1 to 50 lowercase letters, digits, '-' or '_', starting with a letter or digit (it names the worker "
    "queue), got {got}"
)
FunctionName = Annotated[str, Field(
    min_length=1, pattern=BLANK, json_schema_extra=_messages_for(type="must be a non-empty string"),
)]
NETWORK_ALLOW_HELP = (
    "Hosts (a name or an IPv4 address, no port) the suite's extra-allowed tools may reach while a case runs; every "
    "other connection of the agent's code is refused. Only for a suite whose extra-allowed functions are all "
    "declared free of effects outside agenttest."
)
_HOST_MESSAGE = "must be a host name or an IPv4 address, without scheme, port or path (e.g. api.example.com)"
HostName = Annotated[str, Field(
    min_length=1, max_length=253, pattern=r"^\s*[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?\s*$",
    json_schema_extra=_messages_for(type=_HOST_MESSAGE, pattern=_HOST_MESSAGE, minLength=_HOST_MESSAGE,
                                    maxLength=_HOST_MESSAGE),
)]


# A path into a tool's JSON result: keys joined by ".", list items as [0] or [*] (every item).
MOCK_RULE_PATH = r"^[^.\[\]\s]+(\[(\d+|\*)\])*(\.[^.\[\]\s]+(\[(\d+|\*)\])*)*$"
_MOCK_RULE_PATH_MESSAGE = "must be a path into the tool's result: keys joined by '.', items as [0] or [*]"


class MockRule(_Strict):
    """How `agenttest mocks verify` compares a tool's mocks with what the real tool answers now."""

    compare: Literal["exact", "shape"] = Field(
        "exact", description="exact: any value that differs is drift; shape: only a field gone, added or of "
        "another type is.",
        json_schema_extra=_messages_for(enum="must be 'exact' or 'shape'"),
    )
    ignore: list[Annotated[str, Field(pattern=MOCK_RULE_PATH, json_schema_extra=_messages_for(
        pattern=_MOCK_RULE_PATH_MESSAGE, type=_MOCK_RULE_PATH_MESSAGE))]] = Field(
        [], description="Paths never compared (timestamps, ids the tool makes up), e.g. updated_at, items[*].price.",
    )


class SuiteDocument(_Strict):
    """A suite as the API, the admin and import take it."""

    model_config = ConfigDict(
        extra="forbid", title="agenttest suite document",
        json_schema_extra=_messages_for(type="must be a suite (a JSON object)"),
    )
    name: str = Field(
        min_length=1, max_length=NAME_MAX_LENGTH, pattern=BLANK,
        json_schema_extra=_messages_for(required="is required", minLength="is required", pattern="is required",
                                        type="is required"),
    )
    description: str = Field("", json_schema_extra=_messages_for(type="must be text"))
    agent: str = Field(
        min_length=1, pattern=BLANK, description="The name of the agent the suite tests.",
        json_schema_extra=_messages_for(required=_AGENT_REQUIRED, minLength=_AGENT_REQUIRED, pattern=_AGENT_REQUIRED,
                                        type=_AGENT_REQUIRED),
    )
    judge_model: str | None = Field(
        "", description="provider:model that scores llmJudge assertions; empty: none.",
        json_schema_extra=_messages_for(type="must be a 'provider:model' key or empty"),
    )
    extra_allowed_functions: list[FunctionName] = Field([], description=EXTRA_ALLOWED_HELP)
    force_blocked_functions: list[FunctionName] = Field([], description=FORCE_BLOCKED_HELP)
    network_allow: list[HostName] = Field([], description=NETWORK_ALLOW_HELP)
    case_timeout_seconds: int = Field(
        120, ge=TIMEOUT_RANGE[0], le=TIMEOUT_RANGE[1], description="How long one case may run.",
        json_schema_extra=_messages_for(minimum=_TIMEOUT_MESSAGE, maximum=_TIMEOUT_MESSAGE),
    )
    enabled: bool = Field(True, json_schema_extra=_messages_for(type="must be true or false"))
    isolation_group: str = Field(
        "default", pattern=ISOLATION_GROUP_PATTERN,
        description="Runs of one group execute one at a time; a worker serves the groups it names.",
        json_schema_extra=_messages_for(type=_GROUP_MESSAGE, pattern=_GROUP_MESSAGE),
    )
    case_concurrency: int = Field(
        1, ge=CASE_CONCURRENCY_RANGE[0], le=CASE_CONCURRENCY_RANGE[1],
        description="Case × model pairs run at once; above 1 only for a hermetic suite.",
        json_schema_extra=_messages_for(minimum=_CONCURRENCY_MESSAGE, maximum=_CONCURRENCY_MESSAGE),
    )
    mock_rules: dict[str, MockRule] = Field(
        {}, description="Per tool (function name), how `agenttest mocks verify` compares its mocks with the real "
        "tool; a tool not named is compared exactly.",
    )


class SuiteFile(SuiteDocument):
    """A suite: `suites/<name>/suite.yaml`; its cases are the files in `suites/<name>/cases/`."""

    model_config = ConfigDict(extra="forbid", title="agenttest suite")

    schema_: str | None = Field(None, alias="$schema", description="Where the schema is, for editors; ignored.")


# --- Cases --------------------------------------------------------------------------------------------------------
# The case document the API, the admin and import take, and the case file, share these models: the file differs only
# in that a mock's result may be written as the JSON value it is, and that it carries no conversation id.

# What an IntegerField holds on every database Django supports; a larger number would fail at the database.
INT_RANGE = (-(2**31), 2**31 - 1)
INT_MAX = INT_RANGE[1]
FUNCTION_NAME_MAX_LENGTH = 200
BLOCK_ONLY_MESSAGE = (
    "must be 'block': it is the only policy, because a test must never run a real tool — a tool call that no mock "
    "answers is blocked and recorded"
)


def _params(kind: str) -> ConfigDict:
    return ConfigDict(extra="forbid", json_schema_extra={"x-assertion": kind})


def _judge_score() -> Any:
    message = "must be a whole number from 1 to 5"
    return Field(4, ge=1, le=5, json_schema_extra=_messages_for(type=message, minimum=message, maximum=message))


class OutputContainsParams(_Strict):
    model_config = _params("outputContains")
    text: str = NonEmpty
    case_sensitive: bool = False


class OutputNotContainsParams(OutputContainsParams):
    model_config = _params("outputNotContains")


class OutputRegexParams(_Strict):
    model_config = _params("outputRegex")
    pattern: str = Field(
        min_length=1, description="A regular expression (the `regex` package, case-insensitive).",
        json_schema_extra=_messages_for(minLength="must be a non-empty regular expression",
                                        type="must be a non-empty regular expression"),
    )


class ToolCalledParams(_Strict):
    model_config = _params("toolCalled")
    function: str = NonEmpty
    # Absent means no constraint; the schema keeps the field an object (no null is accepted).
    arguments: JsonObject = Field(
        None, description="The call's arguments must contain these."  # type: ignore[arg-type]
    )


class ToolNotCalledParams(_Strict):
    model_config = _params("toolNotCalled")
    function: str = NonEmpty


class StateEqualsParams(_Strict):
    model_config = _params("stateEquals")
    key: str = NonEmpty
    value: Any = Field(description="Any JSON value.")


class RoutedToAgentParams(_Strict):
    model_config = _params("routedToAgent")
    agent: str = NonEmpty


class AgentChainParams(_Strict):
    model_config = _params("agentChain")
    agents: list[NonEmptyText] = Field(
        min_length=1,
        json_schema_extra=_messages_for(minItems="must be a non-empty list of agent names",
                                        type="must be a non-empty list of agent names"),
    )
    mode: Literal["contains", "ordered", "exact"]


class NodesVisitedParams(_Strict):
    model_config = _params("nodesVisited")
    nodes: list[NonEmptyText] = Field(
        min_length=1,
        description='The graph nodes a langgraph agent ran ("subgraph/node" for a subgraph\'s).',
        json_schema_extra=_messages_for(minItems="must be a non-empty list of node names",
                                        type="must be a non-empty list of node names"),
    )
    mode: Literal["contains", "ordered", "exact"] = "ordered"


SNAPSHOT_ENTRIES_MAX = 2000


class SnapshotMatchesParams(_Strict):
    model_config = _params("snapshotMatches")
    expected: list[JsonObject] | None = Field(
        None, max_length=SNAPSHOT_ENTRIES_MAX,
        description="What a process agent's program said over its protocol, normalised, one object per entry "
        "({turn, update} for ACP, {turn, reply} for jsonl). In files it is not written here but kept in "
        "suites/<suite>/snapshots/<case file>.jsonl, which `agenttest run DIR --update-snapshots` writes; null: no "
        "snapshot yet, and the assertion fails until one is written.",
        json_schema_extra=_messages_for(
            type="must be a list of JSON objects (the normalised entries) or null",
            maxItems=f"must hold at most {SNAPSHOT_ENTRIES_MAX} entries",
        ),
    )


class LlmJudgeParams(_Strict):
    model_config = _params("llmJudge")
    criterion: str = NonEmpty
    min_score: int = _judge_score()


class NoBlockedToolsParams(_Strict):
    model_config = _params("noBlockedTools")


# --- Stateful mocks: tables of records a case declares, which its mocks read and update (issue 24) ---------------
# A table is a small fixture, never a database: its limits keep every case document, snapshot and result small.
TABLE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
TABLES_MAX = 20
TABLE_ROWS_MAX = 1000
TABLES_BYTES_MAX = 64 * 1024
TABLES_BYTES_TEXT = f"{TABLES_BYTES_MAX:,} ({TABLES_BYTES_MAX // 1024} KB)"
# A value written "$args.<argument>" in a table mock's key, when or update stands for that argument of the call.
ARGS_PREFIX = "$args."
_TABLE_NAME = (
    "must be a table name: 1 to 64 letters, digits, '_' or '-', starting with a letter or '_' (got {got})"
)
TableName = Annotated[str, Field(
    pattern=TABLE_NAME_PATTERN, json_schema_extra=_messages_for(pattern=_TABLE_NAME, type=_TABLE_NAME),
)]
_ROWS = f"must be a list of at most {TABLE_ROWS_MAX:,} rows, each a JSON object"
TableRows = Annotated[list[JsonObject], Field(
    max_length=TABLE_ROWS_MAX, json_schema_extra=_messages_for(type=_ROWS, maxItems=_ROWS),
)]


class TableEqualsParams(_Strict):
    """The table as the case left it (tau-bench's final-state check): each expected row, found by its key, holds
    these values; with `exact`, the table is exactly these rows with exactly these fields."""

    model_config = _params("tableEquals")
    table: TableName = Field(description="A table of the case's `tables`.")
    key: str = Field("id", min_length=1, pattern=BLANK, description="The field that identifies a row.")
    rows: list[JsonObject] = Field(
        max_length=TABLE_ROWS_MAX, description="The expected rows, each with its key field.",
        json_schema_extra=_messages_for(type=_ROWS, maxItems=_ROWS),
    )
    exact: bool = Field(False, description="No other rows, and no other fields in these rows.")


# Issue 24: a case may have a simulated user (SimulatedUserEntry below); its limits are here and nowhere else.
PERSONA_MAX_LENGTH = 4000
GOAL_MAX_LENGTH = 2000
FACTS_MAX = 50
FACT_KEY_MAX_LENGTH = 200
FACT_VALUE_MAX_LENGTH = 2000
MAX_TURNS_RANGE = (1, 50)


class GoalReachedParams(_Strict):
    model_config = _params("goalReached")
    goal: str = Field(
        "", max_length=GOAL_MAX_LENGTH,
        description="The goal the judge checks the whole transcript against; empty: the simulated user's goal.",
    )


ASSERTION_PARAMS: dict[str, type[BaseModel]] = {
    "outputContains": OutputContainsParams,
    "outputNotContains": OutputNotContainsParams,
    "outputRegex": OutputRegexParams,
    "toolCalled": ToolCalledParams,
    "toolNotCalled": ToolNotCalledParams,
    "stateEquals": StateEqualsParams,
    "routedToAgent": RoutedToAgentParams,
    "agentChain": AgentChainParams,
    "llmJudge": LlmJudgeParams,
    "noBlockedTools": NoBlockedToolsParams,
    "tableEquals": TableEqualsParams,
    "goalReached": GoalReachedParams,
    "nodesVisited": NodesVisitedParams,
    "snapshotMatches": SnapshotMatchesParams,
}


# Named, so the OpenAPI description can name their enums (ENUM_NAME_OVERRIDES in settings).
ASSERTION_TYPES = tuple(ASSERTION_PARAMS)
CASE_TYPES = ("agent", "routing")


def _params_per_type(kinds: tuple[str, ...] = ASSERTION_TYPES) -> list[dict[str, Any]]:
    # One if/then per type: a wrong parameter is reported at its own path, not as "matches none of ten shapes".
    return [
        {
            "if": {"properties": {"type": {"const": kind}}, "required": ["type"]},
            "then": {"properties": {"params": {"$ref": f"#/$defs/{ASSERTION_PARAMS[kind].__name__}"}}},
        }
        for kind in kinds
    ]


def _turns_or_simulated_user() -> dict[str, Any]:
    """A case without a simulated user needs a scripted turn; one with a simulated user may have none."""
    turns = {"minItems": 1, **_messages_for(minItems=_TURNS_REQUIRED, required=_TURNS_REQUIRED)}
    return {
        "if": {"properties": {"simulated_user": {"type": "null"}}},
        "then": {"required": ["turns"], "properties": {"turns": turns}},
    }


class AssertionEntry(_Strict):
    # The tuple's names, read by pydantic at run time; the checker takes only literal values.
    type: Literal[ASSERTION_TYPES]  # type: ignore[valid-type]
    params: JsonObject = {}
    fatal: bool = False


class HistoryEntry(_Strict):
    role: Literal["user", "assistant"]
    content: str = Field(
        min_length=1, pattern=BLANK,
        json_schema_extra=_messages_for(required="must be non-empty text", minLength="must be non-empty text",
                                        pattern="must be non-empty text", type="must be non-empty text"),
    )


_USER_MESSAGE = "must be non-empty text: what the user says in this turn"


class TurnEntry(_Strict):
    user_message: str = Field(
        min_length=1, pattern=BLANK,
        json_schema_extra=_messages_for(required=_USER_MESSAGE, minLength=_USER_MESSAGE, pattern=_USER_MESSAGE,
                                        type=_USER_MESSAGE),
    )
    assertions: list[AssertionEntry] = []


_FUNCTION_NAME = "must be a non-empty function name"
_KEY = 'must name the record: field → value, or "$args.<argument>" for an argument of the call'


class TableMock(_Strict):
    """Makes a mock stateful: it answers from a table of the case instead of a fixed result, and may update it. Never
    executed for real; each trial starts from the table as the case declares it."""

    name: TableName = Field(description="A table of the case's `tables`.")
    key: JsonObject = Field(
        min_length=1, description='The record this call is about: field → value, "$args.<argument>" for an argument.',
        json_schema_extra=_messages_for(type=_KEY, minProperties=_KEY, required=_KEY),
    )
    when: JsonObject = Field(
        {}, description="What the record must hold for the call to succeed: field → value, or a list of the values "
        "allowed. Otherwise the call is refused.",
    )
    update: JsonObject = Field(
        {}, description="Fields the call writes into the record (values may be $args.<argument>); empty: a read.",
    )
    not_found: str = Field("", description='The answer when no record has the key; empty: {"error": …} naming it.')
    refused: str = Field("", description='The answer when the record fails `when`; empty: {"error": …} saying why.')


class MockEntry(_Strict):
    function_name: str = Field(
        min_length=1, max_length=FUNCTION_NAME_MAX_LENGTH, pattern=BLANK,
        json_schema_extra=_messages_for(required=_FUNCTION_NAME, minLength=_FUNCTION_NAME, pattern=_FUNCTION_NAME,
                                        type=_FUNCTION_NAME),
    )
    arguments: JsonObject | None = Field(None, description="Answer only calls whose arguments contain these.")
    call_index: int | None = Field(None, ge=0, le=INT_MAX, description="Answer only the N-th call (0-based).")
    result: str = Field(
        "", description="The tool result text the agent receives.",
        json_schema_extra=_messages_for(type="must be a string: the tool result text the agent receives"),
    )
    stop: bool = Field(False, description="A stop-completion: the turn ends with this result.")
    state_writes: JsonObject = {}
    table: TableMock | None = Field(
        None, description="Stateful: answer from (and update) a table of the case; `result`, when given, is the "
        "answer on success instead of the record, and `state_writes` apply only then.",
    )


class MockFileEntry(MockEntry):
    # A file's mock takes any JSON value where the API's takes text (pydantic lets a subclass widen a field).
    result: str | JsonObject | list[Any] = Field(  # type: ignore[assignment]
        "", description="The tool result the agent receives: text, or a JSON value (stored as compact JSON text)."
    )


# What may end a simulated conversation besides the user model's own "done" or "gave up": a deterministic check of
# the state or of the calls made, written as the assertion of that type is.
END_CONDITION_TYPES = ("stateEquals", "toolCalled")
_MAX_TURNS_MESSAGE = f"must be a whole number from {MAX_TURNS_RANGE[0]} to {MAX_TURNS_RANGE[1]}"
_USER_MODEL_PATTERN = f"^$|{MODEL_KEY_PATTERN}"
_USER_MODEL_MESSAGE = "must be provider:model (e.g. openai:gpt-4o-mini), or empty for the suite's judge model"
_GENERATED_TURN_ASSERTIONS = (
    "turn-level assertions do not apply to generated turns (what the user says is not known in advance); put them "
    "in the case's assertions, which check the whole conversation"
)
_FACT_KEY_MESSAGE = f"each fact's name must be 1 to {FACT_KEY_MAX_LENGTH} characters"
FactKey = Annotated[str, Field(
    min_length=1, max_length=FACT_KEY_MAX_LENGTH,
    json_schema_extra=_messages_for(minLength=_FACT_KEY_MESSAGE, maxLength=_FACT_KEY_MESSAGE),
)]
FactValue = Annotated[str, Field(max_length=FACT_VALUE_MAX_LENGTH)]


class EndCondition(_Strict):
    # The tuple's names, read by pydantic at run time; the checker takes only literal values.
    type: Literal[END_CONDITION_TYPES] = Field(  # type: ignore[valid-type]
        json_schema_extra=_messages_for(enum=f"must be one of {', '.join(END_CONDITION_TYPES)}")
    )
    params: JsonObject = {}


class SimulatedUserEntry(_Strict):
    """A user played by a model, after the scripted turns (or instead of them). The agent under test never sees the
    persona, the goal or the facts; the user model sees only what a user would: the agent's replies."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"x-refused": dict.fromkeys(("assertions", "turns"), _GENERATED_TURN_ASSERTIONS)},
    )
    persona: str = Field(
        min_length=1, max_length=PERSONA_MAX_LENGTH, pattern=BLANK, description="Who the user is and how they talk.",
    )
    goal: str = Field(
        min_length=1, max_length=GOAL_MAX_LENGTH, pattern=BLANK, description="What the user wants from the agent.",
    )
    facts: dict[FactKey, FactValue] = Field(
        {}, max_length=FACTS_MAX, description="What the user knows and reveals only when asked: key → value.",
        json_schema_extra=_messages_for(maxProperties=f"must hold at most {FACTS_MAX} facts"),
    )
    max_turns: int = Field(
        10, ge=MAX_TURNS_RANGE[0], le=MAX_TURNS_RANGE[1],
        description="The most turns the simulated user may take; reaching it ends the case Error.",
        json_schema_extra=_messages_for(type=_MAX_TURNS_MESSAGE, minimum=_MAX_TURNS_MESSAGE,
                                        maximum=_MAX_TURNS_MESSAGE),
    )
    model: str = Field(
        "", pattern=_USER_MODEL_PATTERN, description="provider:model that plays the user; empty: the suite's judge "
        "model.", json_schema_extra=_messages_for(pattern=_USER_MODEL_MESSAGE, type=_USER_MODEL_MESSAGE),
    )
    end_when: list[EndCondition] = Field(
        [], description="Checked after each generated turn: the first that holds ends the conversation.",
    )


_NAME = Field(
    min_length=1, max_length=NAME_MAX_LENGTH, pattern=BLANK,
    json_schema_extra=_messages_for(required="is required", minLength="is required", pattern="is required",
                                    type="is required"),
)
_TURNS_REQUIRED = "at least one turn with a user message is required (or a simulated_user)"


class _CaseFields(_Strict):
    name: str = _NAME
    description: str = ""
    enabled: bool = True
    source: Literal["manual", "recorded", "extracted"] = "manual"
    # The tuple's names, read by pydantic at run time; the checker takes only literal values.
    type: Literal[CASE_TYPES] = "agent"  # type: ignore[valid-type]
    entry_agent: str | None = Field(
        None, description="The agent the conversation starts with; empty: the suite's.",
        json_schema_extra=_messages_for(type="must be an agent name or null"),
    )
    priority: int = Field(0, ge=INT_RANGE[0], le=INT_MAX)
    tags: list[NonEmptyText] = []
    initial_state: JsonObject = {}
    tables: dict[str, TableRows] = Field(
        {}, max_length=TABLES_MAX,
        description=f"Records for stateful mocks: table name → rows (JSON objects); at most {TABLES_MAX} tables, "
        f"{TABLE_ROWS_MAX:,} rows each, {TABLES_BYTES_MAX // 1024} KB in all.",
        json_schema_extra={
            "propertyNames": {"pattern": TABLE_NAME_PATTERN, **_messages_for(pattern=_TABLE_NAME)},
            **_messages_for(maxProperties=f"must hold at most {TABLES_MAX} tables"),
        },
    )
    unmocked_policy: Literal["block"] = Field(
        "block", json_schema_extra=_messages_for(enum=BLOCK_ONLY_MESSAGE, const=BLOCK_ONLY_MESSAGE)
    )
    history: list[HistoryEntry] = []
    # At least one unless the case has a simulated user: `_turns_or_simulated_user` in schema_for says so.
    turns: list[TurnEntry] = Field([], json_schema_extra=_messages_for(required=_TURNS_REQUIRED))
    assertions: list[AssertionEntry] = Field([], description="Case-level assertions over the whole conversation.")
    mocks: list[MockEntry] = []
    warnings: list[str] = Field([], description="Notes left by recording for the reviewer.")
    simulated_user: SimulatedUserEntry | None = Field(
        None, description="A user played by a model, after the scripted turns (or instead of them).",
    )


class CaseDocument(_CaseFields):
    """A case as the API, the admin and import take it (and `case_to_document` gives it)."""

    model_config = ConfigDict(
        extra="forbid", title="agenttest case document",
        json_schema_extra=_messages_for(type="must be a case document (a JSON object)"),
    )
    source_conversation: int | None = Field(None, ge=1, le=2**63 - 1)


class CaseFile(_CaseFields):
    """A case: `suites/<suite>/cases/<name>.yaml`."""

    model_config = ConfigDict(extra="forbid", title="agenttest case")

    schema_: str | None = Field(None, alias="$schema", description="Where the schema is, for editors; ignored.")
    # A file's mocks, as MockFileEntry widens them.
    mocks: list[MockFileEntry] = []  # type: ignore[assignment]


MODELS: dict[str, type[BaseModel]] = {
    "agent": AgentFile, "suite": SuiteFile, "case": CaseFile, "case-document": CaseDocument,
    "suite-document": SuiteDocument,
}


def defaults(model: type[BaseModel]) -> dict[str, Any]:
    """What a document of `model` holds for each field it may leave out (the `$schema` hint aside)."""
    return {
        name: field.get_default(call_default_factory=True)
        for name, field in model.model_fields.items()
        if not field.is_required() and name != "schema_"
    }


# --- Schemas and checks -------------------------------------------------------------------------------------------


@cache
def schema_for(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one kind of file."""
    model = MODELS[kind]
    schema = model.model_json_schema(by_alias=True)
    definitions = schema.setdefault("$defs", {})
    if kind in ("case", "case-document"):
        for params in ASSERTION_PARAMS.values():
            definitions[params.__name__] = params.model_json_schema()
        definitions["AssertionEntry"]["allOf"] = _params_per_type()
        definitions["EndCondition"]["allOf"] = _params_per_type(END_CONDITION_TYPES)
        schema.update(_turns_or_simulated_user())
    title = model.model_config.get("title", kind)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID.format(kind=kind),
        "title": title,
        **{key: value for key, value in schema.items() if key != "title"},
    }


_ROOT_DEFS: dict[str, Any] = {}
# A whole number is an int, never 1.0 or true: an IntegerField would store 1.5 as 1, and JSON Schema's own
# "integer" accepts 1.0.
# A number is finite: NaN passes every minimum and maximum (each comparison is false), and no JSON holds it.
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many({
    "integer": lambda _checker, value: isinstance(value, int) and not isinstance(value, bool),
    "number": lambda _checker, value: (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ),
})
_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_TYPES)


@cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    # Every kind's definitions have distinct names (or the same definition), so one table resolves a $ref of any.
    _ROOT_DEFS.update(schema_for(kind).get("$defs", {}))
    return _Validator(schema_for(kind))


@cache
def _part_validator(kind: str, definition: str) -> jsonschema.protocols.Validator:
    """Checks one part of a document (a MockEntry, an AssertionEntry, …) against its definition in `kind`."""
    schema = schema_for(kind)
    _ROOT_DEFS.update(schema.get("$defs", {}))
    return _Validator({"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]})


@cache
def _fields_validator(kind: str, without: tuple[str, ...]) -> jsonschema.protocols.Validator:
    """Checks a document's own fields, the parts in `without` left out (forms edit those one by one)."""
    schema = dict(schema_for(kind))
    _ROOT_DEFS.update(schema.get("$defs", {}))
    schema["properties"] = {key: value for key, value in schema["properties"].items() if key not in without}
    schema["required"] = [key for key in schema.get("required", []) if key not in without]
    schema["additionalProperties"] = True
    if "turns" in without:
        # Whether turns are needed depends on the turns themselves (_turns_or_simulated_user): not these fields' call.
        schema.pop("if", None)
        schema.pop("then", None)
    return _Validator(schema)


def path_text(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


_TYPE_WORDS = {
    "string": "a string", "integer": "a whole number", "number": "a number", "boolean": "true or false",
    "object": "a JSON object", "array": "a JSON list", "null": "null",
}


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # nan, inf, -inf: named, or "must be a number, not a number" would be the news
    if isinstance(value, int | float):
        return "a number"
    words: dict[type, str] = {str: "a string", dict: "an object", list: "a list"}
    return words.get(type(value), type(value).__name__)


def _resolved(schema: dict[str, Any]) -> dict[str, Any]:
    reference = schema.get("$ref", "")
    if reference.startswith("#/$defs/"):
        return _ROOT_DEFS.get(reference.removeprefix("#/$defs/"), {})
    return schema


def _wanted(schema: dict[str, Any]) -> list[str]:
    schema = _resolved(schema)
    if "type" in schema:
        types: list[str] = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        return [_TYPE_WORDS.get(item, item) for item in types]
    found: list[str] = []
    for option in schema.get("anyOf", []):
        found += _wanted(option)
    return found


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", dict: "object", list: "array"}.get(type(value), "")


def _matching_branch(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError] | None:
    """The sub-errors of the one anyOf option of the instance's own type, when exactly one option is of it: what is
    wrong inside that option is the useful news (a call_index of -1, a mapping with an unknown key)."""
    # Set on every error a validation raises; the stubs allow the unset marker of an error made by hand.
    value: Any = error.validator_value
    instance: Any = error.instance
    kind = _json_type(instance)
    options = [
        index for index, option in enumerate(value)
        if kind and (_resolved(option).get("type") == kind or (kind == "integer" and _resolved(option).get("type")
                                                                == "number"))
    ]
    if len(options) > 1 and kind == "object":
        # Several shapes of object (a function declared in full, an MCP server's tools): the one whose keys the
        # instance uses most is the one meant, when there is exactly one such.
        overlap = {index: len(_resolved(value[index]).get("properties", {}).keys()
                              & instance.keys()) for index in options}
        best = max(overlap.values())
        options = [index for index in options if overlap[index] == best] if best else options
    if len(options) != 1:
        return None
    return [inner for inner in error.context or [] if inner.relative_schema_path[0] == options[0]]


def _shapes(error: jsonschema.ValidationError) -> str | None:
    """For an object that fits none of several object shapes: each shape's keys (optional ones marked ?), and the
    instance's own."""
    # Set on every error a validation raises; the stubs allow the unset marker of an error made by hand.
    value: Any = error.validator_value
    instance: Any = error.instance
    error_schema: Any = error.schema
    shapes = []
    for option in value:
        option = _resolved(option)
        if option.get("type") == "object" and option.get("properties"):
            required = option.get("required", [])
            keys = [*required, *(f"{key}?" for key in option["properties"] if key not in required)]
            shapes.append("{" + ", ".join(keys) + "}")
    if len(shapes) < 2 or not isinstance(instance, dict):
        return None
    others = " or ".join(dict.fromkeys(item for item in _wanted(error_schema) if item != "a JSON object"))
    has = f"the keys {', '.join(map(str, instance))}" if instance else "no keys"
    return (f"must be {others + ' or ' if others else ''}an object of one of these shapes: {' or '.join(shapes)} "
            f"(? marks an optional key); this one has {has}")


def _own(schema: dict[str, Any], keyword: str) -> str | None:
    return (schema.get("x-messages") or {}).get(keyword)


def _messages(error: jsonschema.ValidationError) -> Iterator[tuple[list[Any], str]]:
    # Set on every error a validation raises; the stubs allow the unset marker of an error made by hand.
    value: Any = error.validator_value
    instance: Any = error.instance
    path = list(error.absolute_path)
    keyword: Any = error.validator
    schema = error.schema if isinstance(error.schema, dict) else {}
    assertion = schema.get("x-assertion")
    if keyword == "required":
        for name in value:
            if isinstance(instance, dict) and name not in instance:
                field = _resolved(schema.get("properties", {}).get(name, {}))
                message = _own(field, "required") or (f"is required for {assertion}" if assertion else "is required")
                yield [*path, name], message
    elif keyword == "additionalProperties":
        known = [key for key in schema.get("properties", {}) if key != "$schema"]
        refused = schema.get("x-refused") or {}
        for key in instance:
            if key in schema.get("properties", {}):
                continue
            if key in refused:
                # A field someone may well try, refused with the reason rather than as a misspelling.
                yield [*path, key], refused[key]
            elif assertion:
                yield [*path, key], f"is not a parameter of {assertion} (its parameters: {', '.join(known) or 'none'})"
            elif known:
                yield [*path, key], f"unknown field {key!r}; known fields: {', '.join(known)}"
            else:
                yield [*path, key], f"unknown field {key!r}; it takes no fields"
    elif (own := _own(schema, "type" if keyword == "anyOf" else keyword)) is not None:
        # {got} in our own wording names the value given, where seeing it is the quickest way to the fix.
        yield path, own.replace("{got}", repr(instance))
    elif keyword == "anyOf" and (branch := _matching_branch(error)) is not None:
        for inner in branch:
            yield from _messages(inner)
    elif keyword == "anyOf" and (shapes := _shapes(error)) is not None:
        yield path, shapes
    elif keyword in ("type", "anyOf"):
        wanted = " or ".join(dict.fromkeys(_wanted(schema)))
        yield path, f"must be {wanted}, not {_kind_of(instance)}"
    elif keyword in ("enum", "const"):
        choices = value if keyword == "enum" else [value]
        yield path, f"must be one of {', '.join(str(item) for item in choices)}, not {instance!r}"
    elif keyword == "minLength" or (keyword == "pattern" and value == BLANK):
        yield path, "must be a non-empty string"
    elif keyword == "pattern":
        yield path, PATTERN_MESSAGES.get(value, f"must match {value}")
    elif keyword == "maxLength":
        yield path, f"must be at most {value} characters"
    elif keyword == "minItems":
        yield path, "must be a non-empty list" if value == 1 else (
            f"must have at least {value} items"
        )
    elif keyword == "minimum":
        yield path, f"must be {value} or more"
    elif keyword == "maximum":
        yield path, f"must be {value} or less"
    else:
        yield path, error.message


def _problems(validator: jsonschema.protocols.Validator, document: Any) -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    errors = sorted(validator.iter_errors(document), key=lambda error: [str(p) for p in error.absolute_path])
    for error in errors:
        for path, message in _messages(error):
            # The first word on a path is the one worth reading: an anyOf and its branch may both speak.
            found.setdefault(path_text(path) or "document", message)
    return list(found.items())


def schema_problems(kind: str, document: Any) -> list[tuple[str, str]]:
    """Every way `document` breaks the schema of `kind`, as (path, message)."""
    return _problems(_validator(kind), document)


def part_problems(kind: str, definition: str, value: Any) -> list[tuple[str, str]]:
    """Every way one part (a definition of `kind`'s schema, e.g. MockEntry) breaks it; paths relative to the part."""
    return _problems(_part_validator(kind, definition), value)


def fields_problems(kind: str, document: Any, *, without: tuple[str, ...]) -> list[tuple[str, str]]:
    return _problems(_fields_validator(kind, without), document)
