"""Reading and checking the MCP server configuration (AGENTTEST_MCP_FILE, TOML, or JSON when the name ends in .json).

A pure module (no Django models, no SDK, no app) in the shared room, read at settings time like the providers' file:

    [servers.time]
    transport = "stdio"                 # the default
    command = "python"
    args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
    env = { TZ = "UTC" }                # literal values, for what is not secret
    env_from = { API_TOKEN = "TIME_TOKEN" }   # variable → the name of OUR environment variable holding its value
    cwd = "/srv/time"                   # relative: to this file's directory, where a server without cwd starts
    connect_timeout = 30                # seconds to start and initialise the session
    call_timeout = 30                   # seconds one tools/call may take

    [servers.search]
    transport = "http"                  # streamable HTTP
    url = "https://mcp.example.com/mcp"
    headers_from = { Authorization = "SEARCH_MCP_AUTHORIZATION" }

Secrets never live in the file: header values and secret variables are named environment variables, read when the
server is contacted.

The file's shape is `McpFile` below (a server's is its transport's, `StdioServer` or `HttpServer`), checked by the one
schema engine (common/schemas.py); the project file's [mcp_servers.<name>] tables are its `servers`.
"""

from __future__ import annotations

import json
import os
import tomllib
from typing import Annotated, Any, Literal

from django.core.exceptions import ImproperlyConfigured
from pydantic import ConfigDict, Field

from common.inputs import ENV_NAME, path_of
from common.schemas import BLANK, Parts, Strict, checker, messages_for

# A Python server imports its SDK before it answers (1–2 s of CPU): 10 s was not enough on a busy machine (the guide's
# server, with the test suite pinned to one core beside it). A server that never starts still fails, after 30 s.
DEFAULT_CONNECT_TIMEOUT = 30.0
DEFAULT_CALL_TIMEOUT = 30.0
TRANSPORTS = ("stdio", "http")
# The server's name prefixes its tools' names (`<server>__<tool>`), so it may not contain the separator.
SERVER_NAME = r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$"
MAX_SERVER_NAME = 30

# --- The file's shape, checked by the one schema engine (common/schemas.py) ----------------------------------------
# Each message is what follows the server it is about (`server 'time': …`, `_problems`); {at} is the place in the
# server (`args[0]`, `env.TZ`). A name ends at the end of the text, not before a last line end: \Z, not $.
_NAMED_ENV = rf"^{ENV_NAME.pattern}\Z"
_HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z"
# A process cannot be started with NUL in its command, arguments, directory or environment: the server would fail at
# its first start, far from this file.
_NO_NUL = r"^[^\x00]*$"
_NUL = "must not contain NUL (\\u0000): no process can be started with it"
_SETTINGS = "must be a table of settings"
_SECONDS = "field '{at}' must be a number of seconds greater than 0, got {got}"
_COMMAND = "field 'command' must name the program that starts the server"
_ARGS = "field 'args' must be a list of strings"
_CWD = "field 'cwd' must be a directory path"
_URL = "field 'url' must be an http:// or https:// URL, got {got}"
_NAME_OF_VALUE = "{at} must be the NAME of an environment variable holding the value (never the value itself)"

Argument = Annotated[str, Field(pattern=_NO_NUL, json_schema_extra=messages_for(type=_ARGS, pattern=f"{{at}} {_NUL}"))]
Value = Annotated[str, Field(pattern=_NO_NUL, json_schema_extra=messages_for(
    type="{at} must be a string", pattern=f"{{at}} {_NUL}",
))]
NameOfValue = Annotated[str, Field(
    pattern=_NAMED_ENV, json_schema_extra=messages_for(type=_NAME_OF_VALUE, pattern=_NAME_OF_VALUE),
)]


def _table(names: str) -> dict[str, Any]:
    """A table of name → value whose names follow the pattern `names`."""
    invalid = "{at}: {got} is not a valid name"
    return {
        "propertyNames": {"type": "string", "pattern": names, **messages_for(type=invalid, pattern=invalid)},
        **messages_for(type="field '{at}' must be a table"),
    }


def _seconds(default: float, description: str) -> Any:
    return Field(default, gt=0, description=description,
                 json_schema_extra=messages_for(type=_SECONDS, exclusiveMinimum=_SECONDS))


def _transport(name: str) -> ConfigDict:
    def words(schema: dict[str, Any]) -> None:
        # Listed sorted, as the file's messages always listed them.
        allowed = ", ".join(sorted(schema["properties"]))
        schema.update(messages_for(
            type=_SETTINGS, additionalProperties=f"unknown field {{key}} for transport {name!r} (allowed: {allowed})",
        ))

    # The patterns are Python's, as the engine reads them (\Z).
    return ConfigDict(extra="forbid", regex_engine="python-re", json_schema_extra=words)


class StdioServer(Strict):
    """A server agenttest starts, spoken to over its standard input and output."""

    model_config = _transport("stdio")

    transport: Literal["stdio"] = "stdio"
    command: str = Field(pattern=BLANK, description="The program that starts the server.", json_schema_extra={
        "allOf": [{"pattern": _NO_NUL, **messages_for(pattern=f"field 'command' {_NUL}")}],
        **messages_for(required=_COMMAND, type=_COMMAND, pattern=_COMMAND),
    })
    args: list[Argument] = Field([], json_schema_extra=messages_for(type=_ARGS))
    env: dict[str, Value] = Field({}, description="Literal values, for what is not secret.",
                                  json_schema_extra=_table(_NAMED_ENV))
    env_from: dict[str, NameOfValue] = Field(
        {}, description="Variable → the name of agenttest's environment variable holding its value.",
        json_schema_extra=_table(_NAMED_ENV),
    )
    cwd: str = Field(
        "", pattern=_NO_NUL, description="Relative: to this file's directory, where a server without cwd starts.",
        json_schema_extra=messages_for(type=_CWD, pattern=f"field 'cwd' {_NUL}"),
    )
    connect_timeout: float = _seconds(DEFAULT_CONNECT_TIMEOUT, "Seconds to start and initialise the session.")
    call_timeout: float = _seconds(DEFAULT_CALL_TIMEOUT, "Seconds one tools/call may take.")


class HttpServer(Strict):
    """A server reached over streamable HTTP."""

    model_config = _transport("http")

    transport: Literal["http"]
    url: str = Field(pattern=r"^https?://", json_schema_extra=messages_for(
        required=_URL.replace("{got}", "None"), type=_URL, pattern=_URL,
    ))
    headers_from: dict[str, NameOfValue] = Field(
        {}, description="Header → the name of agenttest's environment variable holding its value.",
        json_schema_extra=_table(_HEADER_NAME),
    )
    connect_timeout: float = _seconds(DEFAULT_CONNECT_TIMEOUT, "Seconds to connect and initialise the session.")
    call_timeout: float = _seconds(DEFAULT_CALL_TIMEOUT, "Seconds one tools/call may take.")


def _by_transport(schema: dict[str, Any]) -> None:
    """A server is checked by its transport's model alone, one if/then per transport (as an assertion's parameters
    are by its type, cases/schema.py): a wrong field is named by that transport's rules, and a transport neither has
    is said alone. No transport is stdio."""
    stdio, http = schema["additionalProperties"]["anyOf"]
    transport = f"field 'transport' must be one of {', '.join(TRANSPORTS)}, got {{got}}"
    schema["additionalProperties"] = {
        "type": "object",
        "properties": {"transport": {"enum": list(TRANSPORTS), **messages_for(enum=transport)}},
        "allOf": [
            {"if": {"properties": {"transport": {"const": "stdio"}}}, "then": stdio},
            {"if": {"properties": {"transport": {"const": "http"}}, "required": ["transport"]}, "then": http},
        ],
        **messages_for(type=_SETTINGS),
    }
    name = (f"server {{got}}: the name must be at most {MAX_SERVER_NAME} letters, digits, '-' or single '_' (it "
            "prefixes the server's tool names as <server>__<tool>)")
    schema["propertyNames"] = {
        "type": "string", "pattern": SERVER_NAME, "maxLength": MAX_SERVER_NAME,
        **messages_for(type=name, pattern=name, maxLength=name),
    }
    schema.update(messages_for(type="the servers must be a table of name → server, got {type}"))


class McpFile(Strict):
    """The MCP server file (AGENTTEST_MCP_FILE)."""

    model_config = ConfigDict(extra="forbid", title="agenttest MCP servers", json_schema_extra=messages_for(
        type="must hold a 'servers' table",
        additionalProperties="unknown top-level key {key} (only [servers.<name>] tables belong here)",
    ))

    servers: dict[str, StdioServer | HttpServer] = Field({}, json_schema_extra=_by_transport)


def load_mcp_servers(path: str) -> dict[str, dict[str, Any]]:
    """The servers configured in the file at `path` ("" → none), validated and normalised."""
    if not path:
        return {}
    where = f"MCP server file {path}"
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise ImproperlyConfigured(f"{where}: the file does not exist") from None
    except OSError as exc:
        raise ImproperlyConfigured(f"{where}: cannot be read ({exc.strerror})") from None
    try:
        data = json.loads(raw) if path.endswith(".json") else tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "JSON" if path.endswith(".json") else "TOML"
        raise ImproperlyConfigured(f"{where}: not valid {kind} ({exc})") from None
    problems = _problems(data)
    if problems:
        raise ImproperlyConfigured(f"{where}: " + "; ".join(problems))
    directory = os.path.dirname(os.path.abspath(path))
    return {name: normalise(spec, directory=directory) for name, spec in data.get("servers", {}).items()}


def validate_mcp_servers(servers: Any) -> list[str]:
    """Every problem with a servers mapping, each naming the server and the field."""
    return _problems({"servers": servers})


def _problems(document: Any) -> list[str]:
    """Every way an MCP file's document breaks its shape, in the file's words: `server 'time': field 'command' …`."""
    def words(parts: Parts, value: Any) -> dict[str, str]:
        return {"at": path_of(parts[2:]), "type": type(value).__name__}

    said = [
        f"server {parts[1]!r}: {message}" if len(parts) > 1 else message
        for parts, message in checker(McpFile).findings(document, words=words)
    ]
    # A list's items may each break one rule that speaks of the whole list (`field 'args' must be …`): said once.
    return list(dict.fromkeys(said))


def normalise(spec: dict[str, Any], *, directory: str = "") -> dict[str, Any]:
    """`spec` with every default filled in. Read from a file, a stdio server starts in `directory` (the file's):
    its `cwd` is relative to it, and is it when not given — so `args = ["server.py"]` works from anywhere."""
    transport = spec.get("transport", "stdio")
    normalised: dict[str, Any] = {
        "transport": transport,
        "connect_timeout": float(spec.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)),
        "call_timeout": float(spec.get("call_timeout", DEFAULT_CALL_TIMEOUT)),
    }
    if transport == "stdio":
        normalised.update(
            command=spec["command"],
            args=list(spec.get("args", [])),
            env=dict(spec.get("env", {})),
            env_from=dict(spec.get("env_from", {})),
            cwd=os.path.normpath(os.path.join(directory, spec.get("cwd", ""))) if directory else spec.get("cwd", ""),
        )
    else:
        normalised.update(url=spec["url"], headers_from=dict(spec.get("headers_from", {})))
    return normalised
