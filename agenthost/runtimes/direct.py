"""The tools helper of a `python` agent run on its own, without agenttest (`agenttest.plugin.DirectTools`).

Kept free of Django and of the rest of the host: the guide's stand-alone snippet imports it in a plain script, where
no settings are configured and no app registry is ready."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agenthost.functions import as_function_result


def tool_name(function: Callable[..., Any]) -> str:
    name = getattr(function, "__name__", "")
    if not callable(function) or not isinstance(name, str) or not name or name == "<lambda>":
        raise TypeError(f"tools.call needs the tool's function (a named Python function), got {function!r}")
    return name


def tool_arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    value = json.loads(arguments) if isinstance(arguments, str) else arguments
    if not isinstance(value, dict):
        raise TypeError(f"a tool's arguments must be a JSON object, got {type(value).__name__}")
    return value


class DirectTools:
    """The tools helper without agenttest: each call runs the function. For running the team's function on its own."""

    def call(self, function: Callable[..., Any], arguments: str | dict[str, Any] | None = None, *,
             call_id: str = "") -> str:
        tool_name(function)
        return as_function_result(function(**tool_arguments(arguments))).content
