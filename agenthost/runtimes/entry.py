"""Importing an agent's entry point ("module:attribute"), once per process, like a plugin: from the installed
packages, then the current directory (the team's repository), which comes after them so that a team's `cases/` or
`runs/` folder cannot shadow agenttest's."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from importlib import import_module
from typing import Any

ENTRY_PATTERN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
ENTRY_FORMAT = '"module:attribute", e.g. "shop.bot:respond"'
# An environment variable holding a model provider's key, as an SDK's error names it (OPENAI_API_KEY, …).
API_KEY_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9_]*_API_KEY\b")

_loaded: dict[str, Any] = {}
# Set while nothing of the team's code may be imported (`apply --dry-run`): the check that needs it waits for a real
# apply.
_refused: ContextVar[str] = ContextVar("agenttest_team_code_refused", default="")
# Set in the web process (agenttest/wsgi.py, asgi.py): there the team's code is only ever imported in a child process.
_kept_out = False
# Re-entrant: a team module whose import loads another agent's entry must not deadlock.
_lock = threading.RLock()


class EntryPointError(Exception):
    """The entry point is malformed, or importing it failed; the message names the entry point and the error."""


def entry_format_problem(entry: Any) -> str:
    if not isinstance(entry, str) or not ENTRY_PATTERN.match(entry):
        return f"entry {entry!r} must look like {ENTRY_FORMAT}"
    return ""


@contextmanager
def team_code_refused(reason: str) -> Iterator[None]:
    """Within the block no entry point is imported (load_entry raises EntryPointError giving `reason`)."""
    token = _refused.set(reason)
    try:
        yield
    finally:
        _refused.reset(token)


def keep_team_code_out() -> None:
    """Called by the web process as it starts: from then on what needs the team's code imported asks a child
    process (runtimes/child.py)."""
    global _kept_out
    _kept_out = True


def team_code_kept_out() -> bool:
    return _kept_out


def team_code_refusal() -> str:
    """Why the team's code may not be imported here, or "" when it may."""
    return _refused.get()


def load_entry(entry: str) -> Any:
    """The object the entry point names, imported the first time it is asked for and kept for the process."""
    if problem := entry_format_problem(entry):
        raise EntryPointError(problem)
    if reason := _refused.get():
        raise EntryPointError(f"entry point {entry!r} was not imported: {reason}")
    with _lock:
        if entry in _loaded:
            return _loaded[entry]
        module_name, _, attribute = entry.partition(":")
        if os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        try:
            target: Any = import_module(module_name)
        except Exception as exc:
            message = f"entry point {entry!r} failed to import: {type(exc).__name__}: {exc}"
            if hint := _api_key_hint(exc):
                message = f"{message.rstrip('.')}. {hint}"
            raise EntryPointError(message) from exc
        for part in attribute.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise EntryPointError(
                    f"entry point {entry!r}: module {module_name!r} has no attribute {attribute!r}"
                ) from None
        _loaded[entry] = target
        return target


def _api_key_hint(exc: Exception) -> str:
    """What to do when the team's module builds a model client at import (pydantic-ai's `Agent("openai:…")`, a
    module-level `OpenAI()`) and its SDK refuses to without a key: agenttest never sends the module's model calls
    with that key, and an SDK may refuse an empty one too."""
    found = API_KEY_VARIABLE.search(str(exc))
    if found is None:
        return ""
    name = found.group()
    return (
        f"The module builds a model client when it is imported, which wants {name}; under agenttest the agent's "
        f"model calls go through agenttest's model layer, never with that key, so set it to any placeholder "
        f"(e.g. {name}=unused; the openai SDK refuses an empty one)"
    )
