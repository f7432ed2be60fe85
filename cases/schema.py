"""The shape of the files a team keeps in its repository — one JSON Schema per kind (agent, suite, case) — defined
once, as pydantic models, and checked with jsonschema against the generated schema, so what `agenttest schema`
publishes is exactly what `agenttest apply` enforces.

The schema covers shape only: keys, types, required fields, allowed values and each assertion type's parameters.
What needs the database or other files — a mock's function must be one the agent can call, an assertion's agent must
exist, a name must be unique — is checked afterwards by cases/validation.py and agenthost/validation.py.

Problems come back as (path, message) with paths in the style of the rest of agenttest: `turns[0].mocks[1].result`.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

SCHEMA_ID = "https://agenttest.invalid/schema/{kind}.schema.json"
KINDS = ("agent", "suite", "case")

JsonObject = dict[str, Any]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


BLANK = r"\S"
MODEL_KEY = r"^[^:\s]+:\S+$"
PATTERN_MESSAGES = {MODEL_KEY: "must be provider:model, e.g. openai:gpt-4o-mini"}
NonEmpty = Field(min_length=1, pattern=BLANK)


# --- Agents -------------------------------------------------------------------------------------------------------


class FunctionDeclaration(_Strict):
    """A function declared in full; a name alone (a string) uses the registered function's description and schema."""

    name: str = NonEmpty
    description: str = ""
    parameters: JsonObject | None = Field(None, description="JSON Schema of the arguments (type: object).")
    output: Any = Field(None, description="A static answer instead of an implementation.")


class Rule(_Strict):
    trigger: Literal["conversation_started", "state_changed"]
    key: str | None = Field(None, description="The state key a state_changed rule watches.")
    function: str = NonEmpty
    arguments: JsonObject | None = None


class AgentFile(_Strict):
    """An agent: `agents/<name>.yaml`."""

    model_config = ConfigDict(extra="forbid", title="agenttest agent")

    schema_: str | None = Field(None, alias="$schema", description="Where the schema is, for editors; ignored.")
    name: str = Field(min_length=1, max_length=100, pattern=BLANK)
    description: str = ""
    instruction: str | None = Field(None, description="The system instruction (a Django template), inline.")
    instruction_file: str | None = Field(
        None, description="A text file beside this one holding the instruction (instead of `instruction`)."
    )
    model: str = Field(pattern=MODEL_KEY, description="provider:model, e.g. openai:gpt-4o-mini.")
    temperature: float = 0.0
    max_steps: int | None = Field(None, ge=1, le=1000)
    functions: list[str | FunctionDeclaration] = []
    rules: list[Rule] = []
    sub_agents: list[str] = []


# --- Suites -------------------------------------------------------------------------------------------------------


class SuiteFile(_Strict):
    """A suite: `suites/<name>/suite.yaml`; its cases are the files in `suites/<name>/cases/`."""

    model_config = ConfigDict(extra="forbid", title="agenttest suite")

    schema_: str | None = Field(None, alias="$schema", description="Where the schema is, for editors; ignored.")
    name: str = Field(min_length=1, max_length=200, pattern=BLANK)
    description: str = ""
    agent: str = Field(min_length=1, pattern=BLANK, description="The name of the agent the suite tests.")
    judge_model: str = Field("", description="provider:model that scores llmJudge assertions; empty: none.")
    extra_allowed_functions: list[str] = []
    force_blocked_functions: list[str] = []
    case_timeout_seconds: int = Field(120, ge=1, le=3600)
    enabled: bool = True


# --- Cases --------------------------------------------------------------------------------------------------------


class TextParams(_Strict):
    text: str = NonEmpty
    case_sensitive: bool = False


class RegexParams(_Strict):
    pattern: str = Field(min_length=1)


class ToolCalledParams(_Strict):
    function: str = NonEmpty
    arguments: JsonObject | None = None


class ToolNotCalledParams(_Strict):
    function: str = NonEmpty


class StateEqualsParams(_Strict):
    key: str = NonEmpty
    value: Any = Field(description="Any JSON value.")

    model_config = ConfigDict(extra="forbid", json_schema_extra={"required": ["key", "value"]})


class RoutedParams(_Strict):
    agent: str = NonEmpty


class ChainParams(_Strict):
    agents: list[str] = Field(min_length=1)
    mode: Literal["contains", "ordered", "exact"]


class JudgeParams(_Strict):
    criterion: str = NonEmpty
    min_score: int = Field(4, ge=1, le=5)


class NoParams(_Strict):
    pass


ASSERTION_PARAMS: dict[str, type[BaseModel]] = {
    "outputContains": TextParams,
    "outputNotContains": TextParams,
    "outputRegex": RegexParams,
    "toolCalled": ToolCalledParams,
    "toolNotCalled": ToolNotCalledParams,
    "stateEquals": StateEqualsParams,
    "routedToAgent": RoutedParams,
    "agentChain": ChainParams,
    "llmJudge": JudgeParams,
    "noBlockedTools": NoParams,
}


def _params_per_type() -> list[dict[str, Any]]:
    # One if/then per type: a wrong parameter is reported at its own path, not as "matches none of ten shapes".
    return [
        {
            "if": {"properties": {"type": {"const": kind}}, "required": ["type"]},
            "then": {"properties": {"params": {"$ref": f"#/$defs/{kind}Params"}}},
        }
        for kind in ASSERTION_PARAMS
    ]


class AssertionEntry(_Strict):
    type: Literal[
        "outputContains", "outputNotContains", "outputRegex", "toolCalled", "toolNotCalled", "stateEquals",
        "routedToAgent", "agentChain", "llmJudge", "noBlockedTools",
    ]
    params: JsonObject = {}
    fatal: bool = False


class HistoryEntry(_Strict):
    role: Literal["user", "assistant"]
    content: str = NonEmpty


class TurnEntry(_Strict):
    user_message: str = NonEmpty
    assertions: list[AssertionEntry] = []


class MockEntry(_Strict):
    function_name: str = Field(min_length=1, max_length=200, pattern=BLANK)
    arguments: JsonObject | None = Field(None, description="Answer only calls whose arguments contain these.")
    call_index: int | None = Field(None, ge=0, le=2**31 - 1, description="Answer only the N-th call (0-based).")
    result: str | JsonObject | list[Any] = Field(
        "", description="The tool result the agent receives: text, or a JSON value (stored as compact JSON text)."
    )
    stop: bool = False
    state_writes: JsonObject = {}


class CaseFile(_Strict):
    """A case: `suites/<suite>/cases/<name>.yaml`."""

    model_config = ConfigDict(extra="forbid", title="agenttest case")

    schema_: str | None = Field(None, alias="$schema", description="Where the schema is, for editors; ignored.")
    name: str = Field(min_length=1, max_length=200, pattern=BLANK)
    description: str = ""
    enabled: bool = True
    source: Literal["manual", "recorded", "extracted"] = "manual"
    type: Literal["agent", "routing"] = "agent"
    entry_agent: str | None = Field(None, description="The agent the conversation starts with; empty: the suite's.")
    priority: int = Field(0, ge=-(2**31), le=2**31 - 1)
    tags: list[str] = []
    initial_state: JsonObject = {}
    history: list[HistoryEntry] = []
    turns: list[TurnEntry] = Field(min_length=1)
    assertions: list[AssertionEntry] = Field([], description="Case-level assertions over the whole conversation.")
    mocks: list[MockEntry] = []
    warnings: list[str] = Field([], description="Notes left by recording for the reviewer.")


MODELS: dict[str, type[BaseModel]] = {"agent": AgentFile, "suite": SuiteFile, "case": CaseFile}


# --- Schemas and checks -------------------------------------------------------------------------------------------


@cache
def schema_for(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one kind of file."""
    model = MODELS[kind]
    schema = model.model_json_schema(by_alias=True)
    definitions = schema.setdefault("$defs", {})
    if kind == "case":
        for name, params in ASSERTION_PARAMS.items():
            definitions[f"{name}Params"] = params.model_json_schema()
        definitions["AssertionEntry"]["allOf"] = _params_per_type()
    title = model.model_config.get("title", kind)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID.format(kind=kind),
        "title": title,
        **{key: value for key, value in schema.items() if key != "title"},
    }


_ROOT_DEFS: dict[str, Any] = {}


@cache
def _validator(kind: str) -> jsonschema.Draft202012Validator:
    # Every kind's definitions have distinct names, so one table resolves a $ref of any of them.
    _ROOT_DEFS.update(schema_for(kind).get("$defs", {}))
    return jsonschema.Draft202012Validator(schema_for(kind))


def path_text(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


_TYPE_WORDS = {
    "string": "text", "integer": "a whole number", "number": "a number", "boolean": "true or false",
    "object": "a mapping (key: value)", "array": "a list", "null": "null",
}


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return "a number"
    return {str: "text", dict: "a mapping", list: "a list"}.get(type(value), type(value).__name__)


def _wanted(schema: dict[str, Any]) -> list[str]:
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        return [_TYPE_WORDS.get(item, item) for item in types]
    if "$ref" in schema:
        return _wanted(_ROOT_DEFS.get(schema["$ref"].removeprefix("#/$defs/"), {}))
    found: list[str] = []
    for option in schema.get("anyOf", []):
        found += _wanted(option)
    return found


def _matching_branch(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError] | None:
    """The sub-errors of the one anyOf option of the instance's own type, when exactly one option is of it."""
    if not isinstance(error.instance, dict | list):
        return None
    wanted = "object" if isinstance(error.instance, dict) else "array"
    options = [
        index for index, option in enumerate(error.validator_value)
        if _resolved(option, error).get("type") == wanted
    ]
    if len(options) != 1:
        return None
    return [inner for inner in error.context or [] if inner.relative_schema_path[0] == options[0]]


def _resolved(option: dict[str, Any], error: jsonschema.ValidationError) -> dict[str, Any]:
    reference = option.get("$ref", "")
    if reference.startswith("#/$defs/"):
        return _ROOT_DEFS.get(reference.removeprefix("#/$defs/"), {})
    return option


def _messages(error: jsonschema.ValidationError) -> Iterator[tuple[list[Any], str]]:
    path = list(error.absolute_path)
    keyword = error.validator
    if keyword == "required":
        for name in error.validator_value:
            if isinstance(error.instance, dict) and name not in error.instance:
                yield [*path, name], "is required"
    elif keyword == "additionalProperties":
        known = ", ".join(key for key in error.schema.get("properties", {}) if key != "$schema")
        for key in error.instance:
            if key not in error.schema.get("properties", {}):
                yield [*path, key], f"unknown key {key!r}; known keys: {known or 'none'}"
    elif keyword == "type":
        wanted = " or ".join(_wanted(error.schema))
        yield path, f"must be {wanted}, not {_kind_of(error.instance)}"
    elif keyword == "anyOf" and (branch := _matching_branch(error)) is not None:
        # A mapping where text or a mapping may stand: what is wrong inside the mapping is the useful news.
        for inner in branch:
            yield from _messages(inner)
    elif keyword == "anyOf":
        wanted = " or ".join(dict.fromkeys(_wanted(error.schema)))
        yield path, f"must be {wanted}, not {_kind_of(error.instance)}"
    elif keyword in ("enum", "const"):
        choices = error.validator_value if keyword == "enum" else [error.validator_value]
        yield path, f"must be one of {', '.join(str(item) for item in choices)}, not {error.instance!r}"
    elif keyword == "minLength" or (keyword == "pattern" and error.validator_value == BLANK):
        yield path, "must not be empty"
    elif keyword == "pattern":
        yield path, PATTERN_MESSAGES.get(error.validator_value, f"must match {error.validator_value}")
    elif keyword == "maxLength":
        yield path, f"must be at most {error.validator_value} characters"
    elif keyword == "minItems":
        yield path, f"must have at least {error.validator_value} item(s)"
    elif keyword == "minimum":
        yield path, f"must be {error.validator_value} or more"
    elif keyword == "maximum":
        yield path, f"must be {error.validator_value} or less"
    else:
        yield path, error.message


def schema_problems(kind: str, document: Any) -> list[tuple[str, str]]:
    """Every way `document` breaks the schema of `kind`, as (path, message), in document order."""
    found: dict[str, str] = {}
    errors = sorted(_validator(kind).iter_errors(document), key=lambda error: [str(p) for p in error.absolute_path])
    for error in errors:
        for path, message in _messages(error):
            found.setdefault(path_text(path) or "document", message)
    return list(found.items())
