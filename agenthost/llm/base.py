"""The one model-provider interface. Every model endpoint (real, scripted, simulated, replayed) implements it.

Messages and tools use the OpenAI chat format because every provider we talk to speaks it and it is the format
recordings and transcripts are written in — except a request a framework built for the Responses API
(`api="responses"`, agenthost/llm/responses.py): it carries the Responses request as the framework built it, so the
request recorded, diffed and sent is the one the team's agent sends in production, and `chat_messages()` reads it
in the chat format where agenttest only needs to read (the ledger, scripted rules).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    # Raw JSON text as the model produced it: malformed arguments must reach the loop, which reports them back.
    arguments: str

    def as_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class Usage:
    """Tokens of one or more calls. The details are parts of the totals, as the OpenAI API counts them: cached input
    tokens are input tokens the endpoint served from its prompt cache, reasoning tokens are output tokens the model
    spent thinking before it answered. Both are priced apart (ModelConfig.cost)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


# The most one model answer may say it used of any kind of token, and the longest it may say it took. Token counts are
# stored in columns that hold less than 2**31 (replayed answers are held to the same bound), and no endpoint spends
# that many on one answer: a figure beyond is absurd. It is counted as the bound and said (ModelResponse.notes),
# never allowed to fail a write.
MAX_ANSWER_TOKENS = 2**31 - 1
MAX_ANSWER_LATENCY_MS = 24 * 3600 * 1000.0
_USAGE_FIGURES = (
    ("input_tokens", "prompt tokens"),
    ("output_tokens", "completion tokens"),
    ("cached_input_tokens", "cached prompt tokens"),
    ("reasoning_tokens", "reasoning tokens"),
)


CHAT, RESPONSES = "chat", "responses"


# The chat-completions parameters a ModelRequest carries in `settings`, beside its own fields: what the OpenAI Agents
# SDK's ModelSettings put in a request, and what a team's plain loop commonly sets. Anything else a caller sets is
# refused by name, so that no setting the team's code relies on is dropped silently.
CHAT_SETTINGS = (
    "max_tokens", "max_completion_tokens", "top_p", "frequency_penalty", "presence_penalty", "tool_choice",
    "parallel_tool_calls", "seed", "stop", "reasoning_effort", "verbosity", "logprobs", "top_logprobs", "store",
)


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                value = part.get("text") if isinstance(part.get("text"), str) else part.get("refusal")
                if isinstance(value, str):
                    parts.append(value)
        return "".join(parts)
    return str(content)


def input_as_chat(instructions: Any, items: list[Any]) -> list[dict[str, Any]]:
    """A Responses request's instructions and input items as chat messages: a message item as a message of its role
    with its text, consecutive function_call items as one assistant message's tool calls, a function_call_output as
    the tool result of its call. Items with no chat equivalent (reasoning, hosted tools' calls) are left out."""
    messages: list[dict[str, Any]] = []
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "function_call":
            call = {
                "id": str(item.get("call_id") or ""), "type": "function",
                "function": {"name": str(item.get("name") or ""), "arguments": str(item.get("arguments") or "")},
            }
            last = messages[-1] if messages else None
            if last is not None and last.get("role") == "assistant" and last.get("tool_calls") is not None:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({
                "role": "tool", "tool_call_id": str(item.get("call_id") or ""), "content": _text_of(item.get("output"))
            })
        elif (kind in (None, "message")) and isinstance(item.get("role"), str):
            messages.append({"role": item["role"], "content": _text_of(item.get("content"))})
    return messages


@dataclass
class ModelRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    # None: the model's default (nothing is sent).
    temperature: float | None = None
    # A JSON Schema the answer must follow ({"name", "schema"}), for the providers and models that support
    # structured output; the others get the same request without it and the caller parses the text as before.
    response_schema: dict[str, Any] | None = None
    # Further chat-completions parameters the caller set, sent as given (a runtime's framework builds them: the
    # Agents SDK's `max_tokens`, `top_p`, `tool_choice`, `parallel_tool_calls` …; see CHAT_SETTINGS). Part of what
    # decides the answer, so record and replay key on them.
    settings: dict[str, Any] = field(default_factory=dict)
    # Where the request comes from (conversation id, turn, step); never sent to the model.
    metadata: dict[str, Any] = field(default_factory=dict)
    # When the caller stops waiting for the answer (time.monotonic()), e.g. a test case's timeout; never sent. A
    # provider that can caps each attempt's timeout at the time left and starts no retry past it, failing with
    # code DEADLINE. None: only the provider's own timeout and retries bound the call.
    deadline: float | None = None
    # Which API the request is for: "chat" (chat.completions) or "responses" (the Responses API: `messages` are its
    # input items, `tools` its tools, `settings` its other body fields — instructions, reasoning, text — as built).
    api: str = "chat"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def chat_messages(self) -> list[dict[str, Any]]:
        """The request's messages in the chat format: a Responses request's instructions and input items read as
        chat messages (function_call items as an assistant's tool calls, function_call_output items as tool
        results); items with no chat equivalent (reasoning) left out."""
        if self.api != RESPONSES:
            return self.messages
        return input_as_chat(self.settings.get("instructions"), self.messages)


@dataclass
class ModelResponse:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    latency_ms: float = 0.0
    model: str = ""
    # The model declined to answer (the OpenAI API's `refusal`): the answer is the refusal, not `text`.
    refusal: str = ""
    # For an answer cut off at its length limit: what set that limit, as the provider knows it (the option of the
    # providers file that was sent, or the server's own limit); "" when the provider does not say.
    length_limit: str = ""
    # What was wrong with the answer's figures without making it unusable (an absurd usage, bounded), for whoever
    # reads the result; never part of the answer itself.
    notes: list[str] = field(default_factory=list)
    # A Responses API answer's output items as the endpoint sent them (reasoning items included), so the framework
    # that asked gets them back as they were; [] for a chat answer, and for a provider that only says text and calls
    # (the scripted one), whose items are built from them.
    output: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Every answer is built here, whichever provider made it: the one place a figure from an endpoint enters.
        # What is not a number at all is left for response_problem to refuse.
        usage = self.usage
        if isinstance(usage, Usage):
            bounded = {}
            for name, label in _USAGE_FIGURES:
                value = getattr(usage, name)
                if isinstance(value, int) and not isinstance(value, bool) and value > MAX_ANSWER_TOKENS:
                    bounded[name] = MAX_ANSWER_TOKENS
                    self.notes.append(f"{label} {value} (counted as {MAX_ANSWER_TOKENS})")
            if bounded:
                self.usage = replace(usage, **bounded)
        latency = self.latency_ms
        if (
            isinstance(latency, int | float) and not isinstance(latency, bool) and math.isfinite(latency)
            and latency > MAX_ANSWER_LATENCY_MS
        ):
            self.latency_ms = MAX_ANSWER_LATENCY_MS
            self.notes.append(f"a latency of {latency:g} ms (counted as {MAX_ANSWER_LATENCY_MS:g} ms)")

    def as_dict(self) -> dict[str, Any]:
        data = {
            "text": self.text,
            "refusal": self.refusal,
            "tool_calls": [asdict(call) for call in self.tool_calls],
            "finish_reason": self.finish_reason,
            "usage": asdict(self.usage),
            "latency_ms": self.latency_ms,
            "model": self.model,
        }
        if self.length_limit:
            data["length_limit"] = self.length_limit
        if self.output:
            data["output"] = self.output
        return data


# The code of a call that ended because its request's deadline came before an answer did.
DEADLINE = "deadline"


class ProviderError(Exception):
    """The model endpoint failed (after its retries). `code` is short and stable: 'rate_limited', 'timeout', …"""

    def __init__(
        self,
        message: str,
        *,
        code: str = "provider_error",
        provider: str = "",
        model: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.provider = provider
        self.model = model
        # Seconds the endpoint asked to wait before trying again (a 429's Retry-After), when it said.
        self.retry_after = retry_after


@dataclass(frozen=True)
class ModelConfig:
    """One configured `provider:model` with prices in USD per million tokens. Cached input tokens cost
    `cached_input_price` and reasoning tokens `reasoning_price`; None means the plain input or output price."""

    provider: str
    model: str
    input_price: float = 0.0
    output_price: float = 0.0
    label: str = ""
    cached_input_price: float | None = None
    reasoning_price: float | None = None

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.model}"

    def cost(self, usage: Usage) -> float:
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        reasoning = min(usage.reasoning_tokens, usage.output_tokens)
        cached_price = self.input_price if self.cached_input_price is None else self.cached_input_price
        reasoning_price = self.output_price if self.reasoning_price is None else self.reasoning_price
        return (
            (usage.input_tokens - cached) * self.input_price
            + cached * cached_price
            + (usage.output_tokens - reasoning) * self.output_price
            + reasoning * reasoning_price
        ) / 1_000_000


class ModelProvider(abc.ABC):
    """A configured endpoint. Implementations must be thread-safe: one instance serves the whole process.

    A kind (`kind = "<name>"` in the providers file) is a subclass: it names the keys only it understands, beyond
    the common ones (kind, base_url, api_key_env, timeout, max_retries, models; a model's name, prices and label),
    and checks their values in validate_options. Any other key is refused with the list of allowed ones.

    Options naming files go in path_option_keys too: a relative path is then relative to the directory of the file
    that configured the provider (a providers file, or the project's agenttest.toml), before validate_options or
    the constructor sees it."""

    kind: str = ""
    # Whether the kind answers requests for the Responses API (ModelRequest.api "responses"); one that does not is
    # never handed one (its answer would be to a request it did not read).
    speaks_responses: bool = False
    # Whether the kind's answers cost nothing — it runs offline, with no key (the scripted kind, a plugin's rule-based
    # models): a zero cost on its models is "$0", free, where a configured endpoint without a price is "unpriced".
    # Declared by the kind, so that nothing else keeps a list of free kinds.
    free: bool = False
    option_keys: frozenset[str] = frozenset()
    model_option_keys: frozenset[str] = frozenset()
    path_option_keys: frozenset[str] = frozenset()

    @classmethod
    def validate_options(cls, spec: dict[str, Any]) -> list[str]:
        """Problems with this kind's own options in `spec` (the provider's table, common fields already checked),
        each a sentence naming the field, e.g. "field 'greeting' must be a string". [] when all is well."""
        return []

    @classmethod
    def prepare(cls) -> None:
        """Import what answering a request needs (an SDK), for a process about to call models many times — a
        worker before its pool forks — so that the first call does not pay it. Nothing by default."""
        return None

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        self.name = name
        self.options = options

    @abc.abstractmethod
    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one chat request. Raise ProviderError on failure; measure latency_ms and usage."""


def api_problem(provider: ModelProvider, request: ModelRequest) -> str:
    """Why `provider` cannot answer `request`'s API, or ""."""
    if request.api == RESPONSES and not getattr(provider, "speaks_responses", False):
        return (
            f"the agent calls the Responses API (/responses), and provider {provider.name!r} (kind "
            f"{getattr(provider, 'kind', '') or type(provider).__name__!r}) answers chat completions only — use an "
            "'openai' or 'scripted' provider for this model, or have the agent use chat completions"
        )
    return ""


def response_problem(response: Any) -> str:
    """What makes a provider's answer unusable as a ModelResponse, or "" when it is one. A plugin's provider kind is
    code agenttest did not write: its answer is checked before the loop reads it."""
    if not isinstance(response, ModelResponse):
        return f"got {type(response).__name__}, not a ModelResponse"
    if not isinstance(response.text, str | None):
        return f"text must be a string, got {type(response.text).__name__}"
    if not isinstance(response.usage, Usage):
        return f"usage must be a Usage, got {type(response.usage).__name__}"
    for name in ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens"):
        value = getattr(response.usage, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"usage.{name} must be a whole number ≥ 0, got {value!r}"[:200]
    if not isinstance(response.refusal, str):
        return f"refusal must be a string, got {type(response.refusal).__name__}"
    if not isinstance(response.finish_reason, str | None):
        return f"finish_reason must be a string, got {type(response.finish_reason).__name__}"
    latency = response.latency_ms
    if isinstance(latency, bool) or not isinstance(latency, int | float) or not math.isfinite(latency) or latency < 0:
        return f"latency_ms must be a finite number ≥ 0, got {latency!r}"[:200]
    if not isinstance(response.tool_calls, list):
        return f"tool_calls must be a list, got {type(response.tool_calls).__name__}"
    if not isinstance(response.output, list) or not all(isinstance(item, dict) for item in response.output):
        return "output must be a list of the Responses API's output items (objects)"
    for index, call in enumerate(response.tool_calls):
        if not isinstance(call, ToolCall):
            return f"tool_calls[{index}] must be a ToolCall, got {type(call).__name__}"
        for name in ("id", "name", "arguments"):
            if not isinstance(getattr(call, name), str):
                return f"tool_calls[{index}].{name} must be a string, got {type(getattr(call, name)).__name__}"
    return ""


def unfinished_answer(response: ModelResponse) -> str:
    """Why a model's answer cannot be used as one, or "": it refused, or the endpoint stopped it before its end.
    Every caller (the agent loop, the judge, extraction) treats each as a failure that says so."""
    if response.refusal:
        return f"the model refused to answer: {response.refusal[:500]}"
    if response.finish_reason == "length":
        limit = response.length_limit or (
            "the model's max_completion_tokens in the providers file (or the server's own limit)"
        )
        return (
            f"the answer was cut off at the length limit (finish_reason: length) after "
            f"{response.usage.output_tokens} output tokens; raise {limit} if it needs more"
        )
    if response.finish_reason == "content_filter":
        return "the endpoint's content filter stopped the answer (finish_reason: content_filter)"
    return ""
