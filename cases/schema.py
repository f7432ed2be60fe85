"""The shape of the files a team keeps in its repository — one JSON Schema per kind (agent, suite, case) — defined
once, as pydantic models, and checked against the generated schema by the one schema engine (common/schemas.py), so
what `agenttest schema` publishes is exactly what `agenttest apply` enforces. The case document the API, the admin
and import take (`case-document`) is generated from the same models: it is the one description of a case's shape
everywhere (cases/validation/ checks it with this module). The agent's shape is the host's (agenthost/document.py).

The schema covers shape only: keys, types, required fields, allowed values and each assertion type's parameters.
What needs the database or other files — a mock's function must be one the agent can call, an agent must exist, a
name must be unique, a regular expression must compile — is checked afterwards by cases/validation/ and
agenthost/validation.py. A keyword's message may be our own (`x-messages` beside the rule), so the words stay those
agenttest always used ("is required for outputContains", "must be a whole number from 1 to 5").

Problems come back as (path, message) with paths in the style of the rest of agenttest: `turns[0].mocks[1].result`.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agenthost.seams import AgentDocument
from common.model_keys import MODEL_KEY_PATTERN
from common.schemas import (
    BLANK,
    Checker,
    JsonObject,
    NonEmpty,
    NonEmptyText,
    Problems,
    Strict,
    messages_for,
    published,
)

SCHEMA_ID = "https://agenttest.invalid/schema/{kind}.schema.json"
KINDS = ("agent", "suite", "case")
MODEL_KEY = MODEL_KEY_PATTERN


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
    min_length=1, pattern=BLANK, json_schema_extra=messages_for(type="must be a non-empty string"),
)]
NETWORK_ALLOW_HELP = (
    "Hosts (a name or an IPv4 address, no port) the suite's extra-allowed tools may reach while a case runs; every "
    "other connection of the agent's code is refused. Only for a suite whose extra-allowed functions are all "
    "declared free of effects outside agenttest."
)
_HOST_MESSAGE = "must be a host name or an IPv4 address, without scheme, port or path (e.g. api.example.com)"
HostName = Annotated[str, Field(
    min_length=1, max_length=253, pattern=r"^\s*[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?\s*$",
    json_schema_extra=messages_for(type=_HOST_MESSAGE, pattern=_HOST_MESSAGE, minLength=_HOST_MESSAGE,
                                    maxLength=_HOST_MESSAGE),
)]


# A path into a tool's JSON result: keys joined by ".", list items as [0] or [*] (every item).
MOCK_RULE_PATH = r"^[^.\[\]\s]+(\[(\d+|\*)\])*(\.[^.\[\]\s]+(\[(\d+|\*)\])*)*$"
_MOCK_RULE_PATH_MESSAGE = "must be a path into the tool's result: keys joined by '.', items as [0] or [*]"


class MockRule(Strict):
    """How `agenttest mocks verify` compares a tool's mocks with what the real tool answers now."""

    compare: Literal["exact", "shape"] = Field(
        "exact", description="exact: any value that differs is drift; shape: only a field gone, added or of "
        "another type is.",
        json_schema_extra=messages_for(enum="must be 'exact' or 'shape'"),
    )
    ignore: list[Annotated[str, Field(pattern=MOCK_RULE_PATH, json_schema_extra=messages_for(
        pattern=_MOCK_RULE_PATH_MESSAGE, type=_MOCK_RULE_PATH_MESSAGE))]] = Field(
        [], description="Paths never compared (timestamps, ids the tool makes up), e.g. updated_at, items[*].price.",
    )


class SuiteDocument(Strict):
    """A suite as the API, the admin and import take it."""

    model_config = ConfigDict(
        extra="forbid", title="agenttest suite document",
        json_schema_extra=messages_for(type="must be a suite (a JSON object)"),
    )
    name: str = Field(
        min_length=1, max_length=NAME_MAX_LENGTH, pattern=BLANK,
        json_schema_extra=messages_for(required="is required", minLength="is required", pattern="is required",
                                        type="is required"),
    )
    description: str = Field("", json_schema_extra=messages_for(type="must be text"))
    agent: str = Field(
        min_length=1, pattern=BLANK, description="The name of the agent the suite tests.",
        json_schema_extra=messages_for(required=_AGENT_REQUIRED, minLength=_AGENT_REQUIRED, pattern=_AGENT_REQUIRED,
                                        type=_AGENT_REQUIRED),
    )
    judge_model: str | None = Field(
        "", description="provider:model that scores llmJudge assertions; empty: none.",
        json_schema_extra=messages_for(type="must be a 'provider:model' key or empty"),
    )
    extra_allowed_functions: list[FunctionName] = Field([], description=EXTRA_ALLOWED_HELP)
    force_blocked_functions: list[FunctionName] = Field([], description=FORCE_BLOCKED_HELP)
    network_allow: list[HostName] = Field([], description=NETWORK_ALLOW_HELP)
    case_timeout_seconds: int = Field(
        120, ge=TIMEOUT_RANGE[0], le=TIMEOUT_RANGE[1], description="How long one case may run.",
        json_schema_extra=messages_for(minimum=_TIMEOUT_MESSAGE, maximum=_TIMEOUT_MESSAGE),
    )
    enabled: bool = Field(True, json_schema_extra=messages_for(type="must be true or false"))
    isolation_group: str = Field(
        "default", pattern=ISOLATION_GROUP_PATTERN,
        description="Runs of one group execute one at a time; a worker serves the groups it names.",
        json_schema_extra=messages_for(type=_GROUP_MESSAGE, pattern=_GROUP_MESSAGE),
    )
    case_concurrency: int = Field(
        1, ge=CASE_CONCURRENCY_RANGE[0], le=CASE_CONCURRENCY_RANGE[1],
        description="Case × model pairs run at once; above 1 only for a hermetic suite.",
        json_schema_extra=messages_for(minimum=_CONCURRENCY_MESSAGE, maximum=_CONCURRENCY_MESSAGE),
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
    return Field(4, ge=1, le=5, json_schema_extra=messages_for(type=message, minimum=message, maximum=message))


class OutputContainsParams(Strict):
    model_config = _params("outputContains")
    text: str = NonEmpty
    case_sensitive: bool = False


class OutputNotContainsParams(OutputContainsParams):
    model_config = _params("outputNotContains")


class OutputRegexParams(Strict):
    model_config = _params("outputRegex")
    pattern: str = Field(
        min_length=1, description="A regular expression (the `regex` package, case-insensitive).",
        json_schema_extra=messages_for(minLength="must be a non-empty regular expression",
                                        type="must be a non-empty regular expression"),
    )


class ToolCalledParams(Strict):
    model_config = _params("toolCalled")
    function: str = NonEmpty
    # Absent means no constraint; the schema keeps the field an object (no null is accepted).
    arguments: JsonObject = Field(
        None, description="The call's arguments must contain these."  # type: ignore[arg-type]
    )


class ToolNotCalledParams(Strict):
    model_config = _params("toolNotCalled")
    function: str = NonEmpty


class StateEqualsParams(Strict):
    model_config = _params("stateEquals")
    key: str = NonEmpty
    value: Any = Field(description="Any JSON value.")


class RoutedToAgentParams(Strict):
    model_config = _params("routedToAgent")
    agent: str = NonEmpty


class AgentChainParams(Strict):
    model_config = _params("agentChain")
    agents: list[NonEmptyText] = Field(
        min_length=1,
        json_schema_extra=messages_for(minItems="must be a non-empty list of agent names",
                                        type="must be a non-empty list of agent names"),
    )
    mode: Literal["contains", "ordered", "exact"]


class NodesVisitedParams(Strict):
    model_config = _params("nodesVisited")
    nodes: list[NonEmptyText] = Field(
        min_length=1,
        description='The graph nodes a langgraph agent ran ("subgraph/node" for a subgraph\'s).',
        json_schema_extra=messages_for(minItems="must be a non-empty list of node names",
                                        type="must be a non-empty list of node names"),
    )
    mode: Literal["contains", "ordered", "exact"] = "ordered"


SNAPSHOT_ENTRIES_MAX = 2000


class SnapshotMatchesParams(Strict):
    model_config = _params("snapshotMatches")
    expected: list[JsonObject] | None = Field(
        None, max_length=SNAPSHOT_ENTRIES_MAX,
        description="What a process agent's program said over its protocol, normalised, one object per entry "
        "({turn, update} for ACP, {turn, reply} for jsonl). In files it is not written here but kept in "
        "suites/<suite>/snapshots/<case file>.jsonl, which `agenttest run DIR --update-snapshots` writes; null: no "
        "snapshot yet, and the assertion fails until one is written.",
        json_schema_extra=messages_for(
            type="must be a list of JSON objects (the normalised entries) or null",
            maxItems=f"must hold at most {SNAPSHOT_ENTRIES_MAX} entries",
        ),
    )


class LlmJudgeParams(Strict):
    model_config = _params("llmJudge")
    criterion: str = NonEmpty
    min_score: int = _judge_score()


class NoBlockedToolsParams(Strict):
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
    pattern=TABLE_NAME_PATTERN, json_schema_extra=messages_for(pattern=_TABLE_NAME, type=_TABLE_NAME),
)]
_ROWS = f"must be a list of at most {TABLE_ROWS_MAX:,} rows, each a JSON object"
TableRows = Annotated[list[JsonObject], Field(
    max_length=TABLE_ROWS_MAX, json_schema_extra=messages_for(type=_ROWS, maxItems=_ROWS),
)]


class TableEqualsParams(Strict):
    """The table as the case left it (tau-bench's final-state check): each expected row, found by its key, holds
    these values; with `exact`, the table is exactly these rows with exactly these fields."""

    model_config = _params("tableEquals")
    table: TableName = Field(description="A table of the case's `tables`.")
    key: str = Field("id", min_length=1, pattern=BLANK, description="The field that identifies a row.")
    rows: list[JsonObject] = Field(
        max_length=TABLE_ROWS_MAX, description="The expected rows, each with its key field.",
        json_schema_extra=messages_for(type=_ROWS, maxItems=_ROWS),
    )
    exact: bool = Field(False, description="No other rows, and no other fields in these rows.")


# Issue 24: a case may have a simulated user (SimulatedUserEntry below); its limits are here and nowhere else.
PERSONA_MAX_LENGTH = 4000
GOAL_MAX_LENGTH = 2000
FACTS_MAX = 50
FACT_KEY_MAX_LENGTH = 200
FACT_VALUE_MAX_LENGTH = 2000
MAX_TURNS_RANGE = (1, 50)


class GoalReachedParams(Strict):
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
    turns = {"minItems": 1, **messages_for(minItems=_TURNS_REQUIRED, required=_TURNS_REQUIRED)}
    return {
        "if": {"properties": {"simulated_user": {"type": "null"}}},
        "then": {"required": ["turns"], "properties": {"turns": turns}},
    }


class AssertionEntry(Strict):
    # The tuple's names, read by pydantic at run time; the checker takes only literal values.
    type: Literal[ASSERTION_TYPES]  # type: ignore[valid-type]
    params: JsonObject = {}
    fatal: bool = False


class HistoryEntry(Strict):
    role: Literal["user", "assistant"]
    content: str = Field(
        min_length=1, pattern=BLANK,
        json_schema_extra=messages_for(required="must be non-empty text", minLength="must be non-empty text",
                                        pattern="must be non-empty text", type="must be non-empty text"),
    )


_USER_MESSAGE = "must be non-empty text: what the user says in this turn"


class TurnEntry(Strict):
    user_message: str = Field(
        min_length=1, pattern=BLANK,
        json_schema_extra=messages_for(required=_USER_MESSAGE, minLength=_USER_MESSAGE, pattern=_USER_MESSAGE,
                                        type=_USER_MESSAGE),
    )
    assertions: list[AssertionEntry] = []


_FUNCTION_NAME = "must be a non-empty function name"
_KEY = 'must name the record: field → value, or "$args.<argument>" for an argument of the call'


class TableMock(Strict):
    """Makes a mock stateful: it answers from a table of the case instead of a fixed result, and may update it. Never
    executed for real; each trial starts from the table as the case declares it."""

    name: TableName = Field(description="A table of the case's `tables`.")
    key: JsonObject = Field(
        min_length=1, description='The record this call is about: field → value, "$args.<argument>" for an argument.',
        json_schema_extra=messages_for(type=_KEY, minProperties=_KEY, required=_KEY),
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


class MockEntry(Strict):
    function_name: str = Field(
        min_length=1, max_length=FUNCTION_NAME_MAX_LENGTH, pattern=BLANK,
        json_schema_extra=messages_for(required=_FUNCTION_NAME, minLength=_FUNCTION_NAME, pattern=_FUNCTION_NAME,
                                        type=_FUNCTION_NAME),
    )
    arguments: JsonObject | None = Field(None, description="Answer only calls whose arguments contain these.")
    call_index: int | None = Field(None, ge=0, le=INT_MAX, description="Answer only the N-th call (0-based).")
    result: str = Field(
        "", description="The tool result text the agent receives.",
        json_schema_extra=messages_for(type="must be a string: the tool result text the agent receives"),
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
    json_schema_extra=messages_for(minLength=_FACT_KEY_MESSAGE, maxLength=_FACT_KEY_MESSAGE),
)]
FactValue = Annotated[str, Field(max_length=FACT_VALUE_MAX_LENGTH)]


class EndCondition(Strict):
    # The tuple's names, read by pydantic at run time; the checker takes only literal values.
    type: Literal[END_CONDITION_TYPES] = Field(  # type: ignore[valid-type]
        json_schema_extra=messages_for(enum=f"must be one of {', '.join(END_CONDITION_TYPES)}")
    )
    params: JsonObject = {}


class SimulatedUserEntry(Strict):
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
        json_schema_extra=messages_for(maxProperties=f"must hold at most {FACTS_MAX} facts"),
    )
    max_turns: int = Field(
        10, ge=MAX_TURNS_RANGE[0], le=MAX_TURNS_RANGE[1],
        description="The most turns the simulated user may take; reaching it ends the case Error.",
        json_schema_extra=messages_for(type=_MAX_TURNS_MESSAGE, minimum=_MAX_TURNS_MESSAGE,
                                        maximum=_MAX_TURNS_MESSAGE),
    )
    model: str = Field(
        "", pattern=_USER_MODEL_PATTERN, description="provider:model that plays the user; empty: the suite's judge "
        "model.", json_schema_extra=messages_for(pattern=_USER_MODEL_MESSAGE, type=_USER_MODEL_MESSAGE),
    )
    end_when: list[EndCondition] = Field(
        [], description="Checked after each generated turn: the first that holds ends the conversation.",
    )


_NAME = Field(
    min_length=1, max_length=NAME_MAX_LENGTH, pattern=BLANK,
    json_schema_extra=messages_for(required="is required", minLength="is required", pattern="is required",
                                    type="is required"),
)
_TURNS_REQUIRED = "at least one turn with a user message is required (or a simulated_user)"


class _CaseFields(Strict):
    name: str = _NAME
    description: str = ""
    enabled: bool = True
    source: Literal["manual", "recorded", "extracted"] = "manual"
    # The tuple's names, read by pydantic at run time; the checker takes only literal values.
    type: Literal[CASE_TYPES] = "agent"  # type: ignore[valid-type]
    entry_agent: str | None = Field(
        None, description="The agent the conversation starts with; empty: the suite's.",
        json_schema_extra=messages_for(type="must be an agent name or null"),
    )
    priority: int = Field(0, ge=INT_RANGE[0], le=INT_MAX)
    tags: list[NonEmptyText] = []
    initial_state: JsonObject = {}
    tables: dict[str, TableRows] = Field(
        {}, max_length=TABLES_MAX,
        description=f"Records for stateful mocks: table name → rows (JSON objects); at most {TABLES_MAX} tables, "
        f"{TABLE_ROWS_MAX:,} rows each, {TABLES_BYTES_MAX // 1024} KB in all.",
        json_schema_extra={
            "propertyNames": {"pattern": TABLE_NAME_PATTERN, **messages_for(pattern=_TABLE_NAME)},
            **messages_for(maxProperties=f"must hold at most {TABLES_MAX} tables"),
        },
    )
    unmocked_policy: Literal["block"] = Field(
        "block", json_schema_extra=messages_for(enum=BLOCK_ONLY_MESSAGE, const=BLOCK_ONLY_MESSAGE)
    )
    history: list[HistoryEntry] = []
    # At least one unless the case has a simulated user: `_turns_or_simulated_user` in schema_for says so.
    turns: list[TurnEntry] = Field([], json_schema_extra=messages_for(required=_TURNS_REQUIRED))
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
        json_schema_extra=messages_for(type="must be a case document (a JSON object)"),
    )
    source_conversation: int | None = Field(None, ge=1, le=2**63 - 1)


class CaseFile(_CaseFields):
    """A case: `suites/<suite>/cases/<name>.yaml`."""

    model_config = ConfigDict(extra="forbid", title="agenttest case")

    schema_: str | None = Field(None, alias="$schema", description="Where the schema is, for editors; ignored.")
    # A file's mocks, as MockFileEntry widens them.
    mocks: list[MockFileEntry] = []  # type: ignore[assignment]


MODELS: dict[str, type[BaseModel]] = {
    "agent": AgentDocument, "suite": SuiteFile, "case": CaseFile, "case-document": CaseDocument,
    "suite-document": SuiteDocument,
}


# --- Schemas and checks -------------------------------------------------------------------------------------------


@cache
def schema_for(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one kind of file."""
    schema = published(MODELS[kind], schema_id=SCHEMA_ID.format(kind=kind))
    if kind in ("case", "case-document"):
        definitions = schema["$defs"]
        for params in ASSERTION_PARAMS.values():
            definitions[params.__name__] = params.model_json_schema()
        definitions["AssertionEntry"]["allOf"] = _params_per_type()
        definitions["EndCondition"]["allOf"] = _params_per_type(END_CONDITION_TYPES)
        schema.update(_turns_or_simulated_user())
    return schema


@cache
def _checker(kind: str) -> Checker:
    return Checker(schema_for(kind))


def schema_problems(kind: str, document: Any) -> Problems:
    """Every way `document` breaks the schema of `kind`, as (path, message)."""
    return _checker(kind).problems(document)


def part_problems(kind: str, definition: str, value: Any) -> Problems:
    """Every way one part (a definition of `kind`'s schema, e.g. MockEntry) breaks it; paths relative to the part."""
    return _checker(kind).part_problems(definition, value)


def fields_problems(kind: str, document: Any, *, without: tuple[str, ...]) -> Problems:
    return _checker(kind).fields_problems(document, without=without)
