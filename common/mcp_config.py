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
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from common.inputs import ENV_NAME, is_env_name

# A Python server imports its SDK before it answers (1–2 s of CPU): 10 s was not enough on a busy machine (the guide's
# server, with the test suite pinned to one core beside it). A server that never starts still fails, after 30 s.
DEFAULT_CONNECT_TIMEOUT = 30.0
DEFAULT_CALL_TIMEOUT = 30.0
TRANSPORTS = ("stdio", "http")
# The server's name prefixes its tools' names (`<server>__<tool>`), so it may not contain the separator.
SERVER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$")
MAX_SERVER_NAME = 30
# A process cannot be started with NUL in its command, arguments, directory or environment: the server would fail at
# its first start, far from this file.
_NUL = "must not contain NUL (\\u0000): no process can be started with it"
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

_COMMON = {"transport", "connect_timeout", "call_timeout"}
_KEYS = {"stdio": _COMMON | {"command", "args", "env", "env_from", "cwd"}, "http": _COMMON | {"url", "headers_from"}}


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
    if not isinstance(data, dict):
        raise ImproperlyConfigured(f"{where}: must hold a 'servers' table")
    problems = [f"unknown top-level key {key!r} (only [servers.<name>] tables belong here)" for key in data
                if key != "servers"]
    servers = data.get("servers", {})
    problems.extend(validate_mcp_servers(servers))
    if problems:
        raise ImproperlyConfigured(f"{where}: " + "; ".join(problems))
    directory = os.path.dirname(os.path.abspath(path))
    return {name: normalise(spec, directory=directory) for name, spec in servers.items()}


def validate_mcp_servers(servers: Any) -> list[str]:
    """Every problem with a servers mapping, each naming the server and the field."""
    if not isinstance(servers, dict):
        return [f"the servers must be a table of name → server, got {type(servers).__name__}"]
    problems: list[str] = []
    for name, spec in servers.items():
        problems.extend(_server_problems(name, spec))
    return problems


def _server_problems(name: Any, spec: Any) -> list[str]:
    where = f"server {name!r}"
    if not isinstance(name, str) or not SERVER_NAME.match(name) or len(name) > MAX_SERVER_NAME:
        return [f"{where}: the name must be at most {MAX_SERVER_NAME} letters, digits, '-' or single '_' (it "
                "prefixes the server's tool names as <server>__<tool>)"]
    if not isinstance(spec, dict):
        return [f"{where}: must be a table of settings"]
    transport = spec.get("transport", "stdio")
    if transport not in TRANSPORTS:
        return [f"{where}: field 'transport' must be one of {', '.join(TRANSPORTS)}, got {transport!r}"]
    allowed = _KEYS[transport]
    problems = [
        f"{where}: unknown field {key!r} for transport {transport!r} (allowed: {', '.join(sorted(allowed))})"
        for key in spec
        if key not in allowed
    ]
    for field in ("connect_timeout", "call_timeout"):
        value = spec.get(field, 1.0)
        if not _is_number(value) or value <= 0:
            problems.append(f"{where}: field {field!r} must be a number of seconds greater than 0, got {value!r}")
    if transport == "stdio":
        if not isinstance(spec.get("command"), str) or not spec["command"].strip():
            problems.append(f"{where}: field 'command' must name the program that starts the server")
        elif "\x00" in spec["command"]:
            problems.append(f"{where}: field 'command' {_NUL}")
        args = spec.get("args", [])
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            problems.append(f"{where}: field 'args' must be a list of strings")
        else:
            problems.extend(f"{where}: args[{index}] {_NUL}" for index, arg in enumerate(args) if "\x00" in arg)
        if not isinstance(spec.get("cwd", ""), str):
            problems.append(f"{where}: field 'cwd' must be a directory path")
        elif "\x00" in spec.get("cwd", ""):
            problems.append(f"{where}: field 'cwd' {_NUL}")
        problems.extend(_mapping_problems(where, "env", spec.get("env", {}), ENV_NAME, value_is_env=False))
        problems.extend(_mapping_problems(where, "env_from", spec.get("env_from", {}), ENV_NAME, value_is_env=True))
    else:
        url = spec.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            problems.append(f"{where}: field 'url' must be an http:// or https:// URL, got {url!r}")
        problems.extend(
            _mapping_problems(where, "headers_from", spec.get("headers_from", {}), _HEADER_NAME, value_is_env=True)
        )
    return problems


def _mapping_problems(where: str, field: str, value: Any, key_pattern: re.Pattern[str], *, value_is_env: bool
                      ) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: field {field!r} must be a table"]
    problems = []
    for key, item in value.items():
        if not isinstance(key, str) or not key_pattern.fullmatch(key):
            problems.append(f"{where}: {field}: {key!r} is not a valid name")
        elif not isinstance(item, str) or (value_is_env and not is_env_name(item)):
            wanted = "the NAME of an environment variable holding the value (never the value itself)" \
                if value_is_env else "a string"
            problems.append(f"{where}: {field}.{key} must be {wanted}")
        elif "\x00" in item:
            problems.append(f"{where}: {field}.{key} {_NUL}")
    return problems


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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
