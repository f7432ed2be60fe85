"""The ledger at the model layer (issue 33): every tool result a case's request carries to a model must be one that
agenttest's seam produced in that conversation — a mock's answer, a block, or the real result of a call the suite
allowed — for that call, with that content.

What the seam decided is the conversation's transcript: every tool result the seam produced is written there
(loop.record_result, the native loop's skipped calls), and so is the history a case starts from. A runtime's tool
call that reached the seam without the model's call id (a plain loop calling `tools.call` without `call_id=`, a
framework's hand-off, which runs no tool of the team's) is a *spare*: it may answer one call of that name in a
request, with its content (a hand-off: whatever its framework says of it).

A request for the Responses API carries its calls and results as `function_call` and `function_call_output` items;
they are read the same way.

A tool result found nowhere there — a loop that called its own function, a clone's tool, an inner agent's tool
reaching the outer conversation — ran outside agenttest: `strangers` names it, and the request is not sent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# A spare whose content is whatever its framework says (a hand-off's).
ANY_CONTENT = None


@dataclass(frozen=True)
class Stranger:
    """A tool result the seam never produced: its call id and the name of the call it answers ("" when the request
    does not carry that call)."""

    call_id: str
    name: str


def content_text(content: Any) -> str:
    """A message's content as text: a list of parts (the chat format's content parts) as their texts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        return "".join(
            part.get("text", "") if isinstance(part, Mapping) and isinstance(part.get("text"), str) else ""
            for part in content
        )
    return str(content)


def _field(message: Any, name: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name, None)


def strangers(
    messages: Iterable[Any],
    decided: Mapping[str, Iterable[str | None]],
    spares: Mapping[tuple[str, str | None], int] | None = None,
    stored_id: Callable[[str], str] = str,
) -> list[Stranger]:
    """The tool results of `messages` (chat messages, or the Responses API's input items: function_call and
    function_call_output) that answer no call the seam decided.

    `decided`: call id (as stored) → the contents the seam produced for it (ANY_CONTENT: a call its framework
    answered itself, running nothing of the team's — a retry prompt for arguments that do not validate).
    `spares`: (name, content or ANY_CONTENT) → how many results of calls without the model's id the seam produced;
    each answers one result of a call of that name in this request. `stored_id`: a call id as `decided` holds it (cut
    to its column)."""
    contents: dict[str, set[str | None]] = {call_id: set(values) for call_id, values in decided.items()}
    left = Counter(spares or {})
    names: dict[str, str] = {}
    found: list[Stranger] = []
    for message in messages:
        kind = _field(message, "type")
        if kind == "function_call":
            # The Responses API's items: a call, and (below) its output.
            call_id, name = _field(message, "call_id"), _field(message, "name")
            if isinstance(call_id, str):
                names[call_id] = name if isinstance(name, str) else ""
            continue
        role = "tool" if kind == "function_call_output" else _field(message, "role")
        if role == "assistant":
            for call in _field(message, "tool_calls") or ():
                function = _field(call, "function")
                call_id = _field(call, "id")
                if isinstance(call_id, str):
                    name = _field(function, "name") if function is not None else ""
                    names[call_id] = name if isinstance(name, str) else ""
            continue
        if role != "tool":
            continue
        raw_id = _field(message, "call_id" if kind == "function_call_output" else "tool_call_id")
        call_id = raw_id if isinstance(raw_id, str) else ""
        content = content_text(_field(message, "output" if kind == "function_call_output" else "content"))
        answered = contents.get(stored_id(call_id), ())
        if content in answered or ANY_CONTENT in answered:
            continue
        name = names.get(call_id, "")
        for key in ((name, content), (name, ANY_CONTENT)):
            if left[key] > 0:
                left[key] -= 1
                break
        else:
            found.append(Stranger(call_id=call_id, name=name))
    return found
