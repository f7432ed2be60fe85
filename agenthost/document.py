"""An agent's document: the shape of an agent, written once, as pydantic models checked by the one schema engine
(common/schemas.py). The agent file (`agents/<name>.yaml`, whose JSON Schema `agenttest schema agent` publishes) is
`AgentDocument`, which the harness reads through the seam; an agent as the API and the admin take it is `AgentInput`,
made of the same field definitions, which the OpenAPI description publishes. Their limits are the host's: the column
sizes of agenthost/models.py and the numeric settings below, here and nowhere else.

The document covers shape only: keys, types, required fields, allowed values and limits. What needs the database,
the configured models, the MCP servers or the team's code is agenthost/validation.py's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, create_model

from agenthost.models import (
    AGENT_NAME_MAX_LENGTH,
    AGENT_PATH_MAX_LENGTH,
    AGENT_PROTOCOL_MAX_LENGTH,
    AGENT_RUNTIME_MAX_LENGTH,
    MODEL_NAME_MAX_LENGTH,
    PROVIDER_MAX_LENGTH,
    Agent,
)
from common.model_keys import MODEL_KEY_PATTERN
from common.schemas import BLANK, JsonObject, NonEmpty, NonEmptyText, Strict, messages_for

# An agent's numeric settings, defined once: every door (the files, the API, the admin) checks them through this
# document, so an agent saved through any of them can be exported and applied again.
TEMPERATURE_MIN, TEMPERATURE_MAX = 0.0, 2.0
TEMPERATURE_MESSAGE = (
    f"must be a number from {TEMPERATURE_MIN:g} to {TEMPERATURE_MAX:g}, or empty (null) for the model's default"
)
MAX_STEPS_MIN, MAX_STEPS_MAX = 1, 1000
MAX_STEPS_MESSAGE = (
    f"must be a whole number from {MAX_STEPS_MIN} to {MAX_STEPS_MAX}, or empty (null) for AGENTTEST_MAX_STEPS"
)
RULE_TRIGGERS = ("conversation_started", "state_changed")
RUNTIMES = tuple(Agent.Runtime.values)
_FUNCTION_OBJECT = "must be an object with a 'name'"
# A model key's two parts are two columns, each with its size.
_KEY_SIZES = f"^[^:]{{0,{PROVIDER_MAX_LENGTH}}}:.{{0,{MODEL_NAME_MAX_LENGTH}}}$"
_KEY_SIZES_MESSAGE = (
    f"the provider may have at most {PROVIDER_MAX_LENGTH} characters and the model {MODEL_NAME_MAX_LENGTH}"
)


_MCP_ANNOTATIONS = (
    "must name a configured MCP server; a tool's annotations come from its server's listing, never from the agent"
)


class FunctionDeclaration(Strict):
    """A function declared in full; a name alone (a string) uses the registered function's description and schema."""

    # `mcp` beside a name is an attempt to declare a server's tool with annotations of its own: refused with the reason.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"x-refused": {"mcp": _MCP_ANNOTATIONS}})

    name: str = NonEmpty
    description: str = ""
    parameters: JsonObject | None = Field(None, description="JSON Schema of the arguments (type: object).")
    output: Any = Field(None, description="A static answer instead of an implementation.")


_MCP_NAME = (
    "must name an MCP server configured in the MCP file (AGENTTEST_MCP_FILE); its command, address and tool "
    "annotations come from there and from the server's own listing, never from the agent"
)


_MCP_TOOLS = "must be a non-empty list of distinct tool names (leave it out for every tool of the server)"


class McpServerTools(Strict):
    """The tools of an MCP server: every one it lists, or the named subset; each is called `<server>__<tool>`. Which
    servers are configured and what each lists is checked beside the shape (agenthost/mcp/tools.py)."""

    mcp: str = Field(
        min_length=1, pattern=BLANK, description="A server configured in the MCP file (AGENTTEST_MCP_FILE).",
        json_schema_extra=messages_for(type=_MCP_NAME, minLength=_MCP_NAME, pattern=_MCP_NAME),
    )
    tools: Annotated[
        list[NonEmptyText],
        Field(min_length=1, json_schema_extra={"uniqueItems": True, **messages_for(
            type=_MCP_TOOLS, minItems=_MCP_TOOLS, uniqueItems=_MCP_TOOLS,
        )}),
    ] | None = Field(None, description="Only these of the server's tools; absent: all.",
                     json_schema_extra=messages_for(type=_MCP_TOOLS))


class Rule(Strict):
    # The tuple's names, read by pydantic at run time; the checker takes only literal values.
    trigger: Literal[RULE_TRIGGERS]  # type: ignore[valid-type]
    key: str | None = Field(None, description="The state key a state_changed rule watches.")
    function: str = NonEmpty
    arguments: JsonObject | None = None


class AgentDocument(Strict):
    """An agent: `agents/<name>.yaml`."""

    model_config = ConfigDict(extra="forbid", title="agenttest agent")

    schema_: str | None = Field(None, alias="$schema", description="Where the schema is, for editors; ignored.")
    name: str = Field(min_length=1, max_length=AGENT_NAME_MAX_LENGTH, pattern=BLANK)
    description: str = ""
    instruction: str | None = Field(None, description="The system instruction (a Django template), inline.")
    instruction_file: str | None = Field(
        None, description="A text file beside this one holding the instruction (instead of `instruction`)."
    )
    model: str = Field(
        pattern=MODEL_KEY_PATTERN, description="provider:model, e.g. openai:gpt-4o-mini.",
        json_schema_extra={"allOf": [{"pattern": _KEY_SIZES, **messages_for(pattern=_KEY_SIZES_MESSAGE)}]},
    )
    temperature: float | None = Field(
        0.0, ge=TEMPERATURE_MIN, le=TEMPERATURE_MAX, description="Empty (null): the model's default; none is sent.",
        json_schema_extra=messages_for(type=TEMPERATURE_MESSAGE, minimum=TEMPERATURE_MESSAGE,
                                        maximum=TEMPERATURE_MESSAGE),
    )
    max_steps: int | None = Field(
        None, ge=MAX_STEPS_MIN, le=MAX_STEPS_MAX, description="Model steps per turn; empty: AGENTTEST_MAX_STEPS.",
        json_schema_extra=messages_for(type=MAX_STEPS_MESSAGE, minimum=MAX_STEPS_MESSAGE, maximum=MAX_STEPS_MESSAGE),
    )
    # Issue 26: an agent whose own code runs it (agenthost/runtimes); instruction and tools are then that code's.
    # The tuple's names, read by pydantic at run time; the checker takes only literal values.
    runtime: Literal[RUNTIMES] = Field(  # type: ignore[valid-type]
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
    args: list[str] = Field(
        [], description="A process agent: the program's arguments.",
        json_schema_extra=messages_for(type='must be a list of strings, e.g. ["agent.js", "--quiet"]'),
    )
    cwd: str = Field(
        "", max_length=AGENT_PATH_MAX_LENGTH,
        description="A process agent: its directory, relative to where agenttest runs.",
    )
    env: list[str] = Field(
        [], description="A process agent: names of environment variables passed on to it (their values are never "
        "stored).",
        json_schema_extra=messages_for(type='must be a list of environment variable names, e.g. ["SHOP_REGION"]'),
    )
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


def _the_documents(*names: str) -> dict[str, Any]:
    """The document's own definitions of these fields (type, default, limits, words), for a shape that shares them."""
    return {name: (AgentDocument.model_fields[name].annotation, AgentDocument.model_fields[name]) for name in names}


# What the API and the admin take differs from the file only where the stored agent does: the model is its provider
# and its name, the instruction is inline, every function is an object (a file's name alone is `{"name": …}`, an MCP
# server's tools `{"mcp": …}`: each checked by its own definition, agenthost/validation.py), and the runtime and the
# protocol are any text the column holds (a plugin may add a runtime; which ones are available, and which protocol a
# process agent needs, is checked with the agent's meaning).
AgentInput: type[Strict] = create_model(
    "AgentInput",
    __base__=Strict,
    __doc__="An agent as the API and the admin take it.",
    **_the_documents("name", "description"),
    instruction=(str, Field("", description="The system instruction (a Django template); empty for an agent whose "
                                            "runtime is the team's code.")),
    runtime=(str, Field(
        Agent.Runtime.NATIVE.value, min_length=1, max_length=AGENT_RUNTIME_MAX_LENGTH,
        description="Whose loop runs the agent: native (agenttest's), the team's code at `entry`, or a program "
        "(process) spoken to over its stdio.",
    )),
    **_the_documents("entry", "outside_effects", "deps", "command", "args", "cwd", "env"),
    protocol=(str, Field("", max_length=AGENT_PROTOCOL_MAX_LENGTH, description='A process agent: "jsonl" or "acp".')),
    provider=(str, Field(min_length=1, max_length=PROVIDER_MAX_LENGTH, pattern=BLANK,
                         description="A configured model provider, e.g. openai.")),
    model=(str, Field(min_length=1, max_length=MODEL_NAME_MAX_LENGTH, pattern=BLANK,
                      description="The provider's model, e.g. gpt-4o-mini.")),
    **_the_documents("temperature"),
    functions=(list[Annotated[JsonObject, Field(json_schema_extra=messages_for(type=_FUNCTION_OBJECT))]], Field(
        [], description='Function declarations ({"name", "description"?, "parameters"?, "output"?}) and MCP '
        'servers\' tools ({"mcp", "tools"?}).',
        json_schema_extra=messages_for(type="must be a list of function objects"),
    )),
    **_the_documents("rules", "sub_agents", "max_steps"),
)
