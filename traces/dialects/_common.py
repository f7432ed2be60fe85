"""What every dialect module reads a span into, so one assembler can build a conversation from any of them.

A dialect module turns one `SpanRecord` into a `Step`: a model call (its input and output messages, system
instruction, tools offered, model, usage), a tool execution, an agent invocation, or nothing it knows. Messages are
normalized to `Msg` (role, text, tool calls, tool results) whatever the wire shape was. Nothing here raises on odd
input: attribute values come from other people's exporters and are read defensively.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from traces.spans import TRUNCATED, SpanRecord, StoredValue

MODEL = "model"
TOOL = "tool"
AGENT = "agent"
OTHER = "other"

# What instrumentations write in place of content they were told to hide: OpenInference's sentinel and the
# openai-agents-v2 instrumentation's (sic).
REDACTED = frozenset({"__REDACTED__", "readacted"})


@dataclass
class Call:
    id: str
    name: str
    arguments: Any = None  # a JSON object, the text the model wrote, or None when not captured
    provider_executed: bool = False


@dataclass
class Result:
    id: str
    name: str
    content: Any = None  # None when not captured
    provider_executed: bool = False


@dataclass
class Msg:
    role: str  # "system", "user", "assistant" or "tool"
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    _fingerprint: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def fingerprint(self) -> tuple:
        """What makes two copies of a message in different spans' histories the same message."""
        if self._fingerprint is None:
            self._fingerprint = (
                self.role,
                self.text,
                tuple((c.id, c.name) for c in self.calls) if self.calls else (),
                tuple(r.id for r in self.results) if self.results else (),
            )
        return self._fingerprint


@dataclass
class Step:
    span: SpanRecord
    dialect: str
    kind: str = OTHER
    agent_name: str = ""  # an agent span: the agent it runs; any other: the name the span itself claims, if any
    conversation_id: str = ""
    instructions: list[str] = field(default_factory=list)  # the system instruction attribute's texts
    # A model call's input is read only when needed: every call repeats the history, and only the last call of a turn
    # (and the first call's system messages) make the conversation.
    load_input: Callable[[], list[Msg]] | None = None
    output: list[Msg] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    provider: str = ""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    tool_name: str = ""
    tool_call_id: str = ""
    tool_arguments: Any = None
    tool_result: Any = None
    # Whether the span's tool arguments or result are content (a model call's content is `has_content()`).
    content: bool = False
    # A model call whose messages were over the receiver's attribute limit and cut: `input` and `output` hold only the
    # messages that arrived whole; whatever was in the cut tail (often the turn's new question) is unknown.
    messages_cut: bool = False
    _input: list[Msg] | None = field(default=None, init=False, repr=False)
    _system: list[str] = field(default_factory=list, init=False, repr=False)

    @property
    def input(self) -> list[Msg]:
        """The messages the model was sent, without the system ones."""
        if self._input is None:
            loaded = self.load_input() if self.load_input else []
            self._system = [m.text for m in loaded if m.role == "system" and m.text]
            self._input = [m for m in loaded if m.role != "system"]
        return self._input

    @property
    def system(self) -> list[str]:
        """The system instruction: the input's system messages, then the instruction attribute's texts."""
        self.input  # noqa: B018 - reads the input, which holds the system messages
        return [*self._system, *self.instructions]

    def has_content(self) -> bool:
        """Whether the span carried any message content at all (text, arguments, results, instructions)."""
        if self.content or any(has_content(t) for t in self.instructions) or any(map(msg_has_content, self.output)):
            return True
        return self.load_input is not None and (bool(self.system) or any(map(msg_has_content, self.input)))


def text(value: Any) -> str:
    """A value as text: strings as they are, anything else as compact JSON (how a tool result reached the model)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(value)


def parse_json(value: Any) -> Any:
    """A JSON attribute's value decoded; the value itself when it is already decoded (OTLP arrays and kvlists) or is
    not JSON. Never raises."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return value
    stripped = value.strip()
    if not stripped or stripped[0] not in "[{\"":
        return value
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return value


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def as_int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and value == value and 0 <= value < 2**63:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return 0


def has_content(value: Any) -> bool:
    """Whether a captured value is real content: not missing, empty or a redaction sentinel."""
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value) and value not in REDACTED
    return value != {} and value != []


def arguments(value: Any) -> Any:
    """Tool call arguments as the exporter wrote them: a JSON object stays an object, JSON text is decoded when it
    is an object, any other text is kept as text (the model's own words), absent stays None."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        decoded = parse_json(value)
        return decoded if isinstance(decoded, dict) else value
    return text(value)


def msg_has_content(msg: Msg) -> bool:
    return (
        has_content(msg.text)
        or any(has_content(c.arguments) for c in msg.calls)
        or any(has_content(r.content) for r in msg.results)
    )


def indexed(attributes: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """Flattened indexed attributes (`prefix.N.rest`) grouped by N, each as {rest: value}, in one pass."""
    found: dict[int, dict[str, Any]] = {}
    cut = len(prefix) + 1
    for key, value in attributes.items():
        if not key.startswith(prefix) or key[len(prefix) : cut] != ".":
            continue
        head, dot, rest = key[cut:].partition(".")
        if dot and head.isdigit() and len(head) < 7:
            found.setdefault(int(head), {})[rest] = value
    return found


def ordered(groups: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    return [groups[index] for index in sorted(groups)]


_SPACE = re.compile(r"[ \t\n\r]*")


def _space_end(text: str, at: int) -> int:
    """Where the JSON whitespace from `at` ends; _SPACE matches the empty string, so it always matches."""
    match = _SPACE.match(text, at)
    assert match is not None
    return match.end()


def was_cut(value: Any) -> bool:
    """Whether the receiver cut this value to its attribute limit (traces.otlp: a text ends with TRUNCATED, a list's
    last item is TRUNCATED, an object's last key is). Only a value's tail is ever cut."""
    if isinstance(value, StoredValue):
        return value.cut
    if isinstance(value, str):
        return value.endswith(TRUNCATED)
    if isinstance(value, list):
        return bool(value) and was_cut(value[-1])
    if isinstance(value, dict):
        return bool(value) and (TRUNCATED in value or was_cut(next(reversed(value.values()))))
    return False


def whole_items(value: Any) -> list[Any]:
    """The items of a cut JSON array — as text, or as an OTLP array already decoded — that arrived whole, in order:
    what the exporter wrote before the cut, and nothing made of the cut tail."""
    if isinstance(value, list):
        items = list(value)
        while items and was_cut(items[-1]):
            items.pop()
        return items
    if not isinstance(value, str):
        return []
    body = value[: -len(TRUNCATED)] if value.endswith(TRUNCATED) else value
    index = _space_end(body, 0)
    if body[index : index + 1] != "[":
        return []
    decoder = json.JSONDecoder()
    items = []
    index += 1
    while True:
        index = _space_end(body, index)
        try:
            item, end = decoder.raw_decode(body, index)
        except (ValueError, RecursionError):
            return items
        after = _space_end(body, end)
        # Whole only when the array goes on or closes after it: "12" may be the cut start of "123".
        if body[after : after + 1] not in (",", "]"):
            return items
        items.append(item)
        if body[after] == "]":
            return items
        index = after + 1


def loaded(value: Any) -> Any:
    """The value itself, read from where it is stored when it was left there (StoredValue)."""
    return value.load() if isinstance(value, StoredValue) else value
