"""What a process agent's program said over its protocol, normalised so that a case can compare it with a committed
expectation (issue 39 item 5, decision 0046): the `snapshotMatches` assertion.

One entry per thing the program said, in order, each tagged with its turn:

- `protocol: acp` — `{"turn": N, "update": {...}}` per `session/update` notification, the update as the ACP schema
  writes it (camelCase, fields left out when absent);
- `protocol: jsonl` — `{"turn": N, "reply": {...}}` per turn, the reply object the program wrote.

The normaliser keeps what the program decided and drops what changes from one run to the next by itself:

- **Streamed text is joined.** Consecutive `agent_message_chunk` (and `agent_thought_chunk`, `user_message_chunk`)
  updates of text become one, their texts concatenated: where a stream happens to split its text is not behaviour.
- **Ids become ordinals.** The value of every `toolCallId`, `terminalId` and `sessionId` key becomes
  `<toolCallId 1>`, `<toolCallId 2>`, … in the order each value first appears in the turn, so two updates of one tool
  call still name the same call.
- **Places become names.** The conversation's own directory (an ACP session's cwd) becomes `<cwd>`, the program's
  directory `<program>`, the gateways' addresses `<gateway>` and `<mcp>` (a free port in chat, loopback under test),
  wherever they appear in a string.
- **Secrets and times go.** The turn's gateway key becomes `<key>`; text is redacted as every transcript is; an ISO
  8601 timestamp becomes `<time>`.

Nothing else changes: a different word, tool, status or order is a different snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from agenthost import executor
from agenthost.redaction import redact

ID_KEYS = ("toolCallId", "terminalId", "sessionId")
JOINED_UPDATES = frozenset({"agent_message_chunk", "agent_thought_chunk", "user_message_chunk"})
TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?\b")


def joined_chunks(updates: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """ACP updates with each run of text chunks of one kind joined into the first of them."""
    joined: list[dict[str, Any]] = []
    for update in updates:
        kind = update.get("sessionUpdate")
        content: Any = update.get("content")
        previous = joined[-1] if joined else None
        if (
            kind in JOINED_UPDATES and previous is not None and previous.get("sessionUpdate") == kind
            and _text_block(content) and _text_block(previous.get("content"))
            and set(update) == set(previous)
        ):
            kept = previous["content"]
            previous["content"] = {**kept, "text": kept["text"] + content["text"]}
            continue
        joined.append({**update, "content": dict(content)} if isinstance(content, dict) else dict(update))
    return joined


def _text_block(content: Any) -> bool:
    return isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str) and (
        set(content) <= {"type", "text"}
    )


def normalised(entries: Iterable[dict[str, Any]], places: Mapping[str, str]) -> list[dict[str, Any]]:
    """One turn's entries normalised; `places` maps each absolute path (or other volatile text) to its stand-in."""
    return _Normaliser(places).entries(entries)


class _Normaliser:
    def __init__(self, places: Mapping[str, str]) -> None:
        self._ids: dict[str, dict[str, str]] = {key: {} for key in ID_KEYS}
        # The longest first, so a path inside another is replaced by its own name.
        self._places = sorted(((text, name) for text, name in places.items() if text), key=lambda item: -len(item[0]))

    def entries(self, entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        # The places first: redaction must not see the turn's key and mask it some other way.
        return [redact(self._value(entry, self._places)) for entry in entries]

    def _value(self, value: Any, places: list[tuple[str, str]], key: str = "") -> Any:
        if isinstance(value, dict):
            return {name: self._value(item, places, name) for name, item in value.items()}
        if isinstance(value, list):
            return [self._value(item, places) for item in value]
        if not isinstance(value, str):
            return value
        if key in self._ids:
            seen = self._ids[key]
            return seen.setdefault(value, f"<{key} {len(seen) + 1}>")
        for text, name in places:
            value = value.replace(text, name)
        return TIMESTAMP.sub("<time>", value)


def protocol_said(conversation_id: int | None, entries: list[dict[str, Any]]) -> None:
    """Hand one turn's normalised entries to whoever runs the conversation under test (the harness's case, through
    an executor provider's optional `protocol(conversation_id, entries)`); nothing outside a case."""
    executor.case_protocol(conversation_id, entries)
