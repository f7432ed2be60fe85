"""What an ACP agent asks of agenttest, as the functions it calls through the seam: names and declarations, apart
from runtimes/acp.py so that declaring an ACP agent's tools (runtimes/child.py, on every process's start) does not
import the ACP library — about a CPU second of imports only a case or a chat of an ACP agent needs."""

from __future__ import annotations

from typing import Any

# The names the client's side of ACP goes through the seam under (a mock or a case's `toolCalled` names them).
FS_READ, FS_WRITE = "fs_read_text_file", "fs_write_text_file"
TERMINAL_CREATE, PERMISSION = "terminal_create", "session_request_permission"
_PATH = {"type": "string", "description": "an absolute path in the session's directory"}
# Their declarations: what a case may mock, and whether each reaches outside agenttest when it runs.
CLIENT_DECLARATIONS: dict[str, dict[str, Any]] = {
    FS_READ: {"description": "ACP fs/read_text_file: a text file of the session's directory (the mock: its text)",
              "parameters": {"type": "object", "properties": {
                  "path": _PATH, "line": {"type": ["integer", "null"]}, "limit": {"type": ["integer", "null"]}}},
              "outside_effects": False},
    FS_WRITE: {"description": "ACP fs/write_text_file: write a text file in the session's directory",
               "parameters": {"type": "object", "properties": {"path": _PATH, "content": {"type": "string"}}},
               "outside_effects": True},
    TERMINAL_CREATE: {"description": "ACP terminal/create: run a command in the session's directory (the mock: its "
                                     "output, of a command that exited 0)",
                      "parameters": {"type": "object", "properties": {
                          "command": {"type": "string"}, "args": {"type": "array", "items": {"type": "string"}},
                          "cwd": {"type": ["string", "null"]}}},
                      "outside_effects": True},
    PERMISSION: {"description": "ACP session/request_permission: the id of the option chosen (the mock: that id)",
                 "parameters": {"type": "object", "properties": {
                     "tool_call": {"type": "object"}, "options": {"type": "array", "items": {"type": "object"}}}},
                 "outside_effects": False},
}


def client_declarations() -> list[dict[str, Any]]:
    """The client's side of ACP as the functions an ACP agent calls (a case's mocks and assertions name them)."""
    return [{"name": name, **declared, "runtime": "process"} for name, declared in CLIENT_DECLARATIONS.items()]
