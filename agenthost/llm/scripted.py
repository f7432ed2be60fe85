"""The scripted provider: plays a script of answers, failures and hangs, and records every request it received.

Scripts are process-wide and keyed by provider name, so a test installs one and every thread that asks that provider
(the conversation loop, a Celery task run eagerly, a worker thread) plays the same script in order.

    ScriptedProvider.install("scripted", [
        Answer(tool_calls=[Call("lookup_order", {"order_id": "1042"})]),
        Answer("Order 1042 has shipped."),
    ])
"""

from __future__ import annotations

import copy
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agenthost.llm.base import ModelProvider, ModelRequest, ModelResponse, ProviderError, ToolCall, Usage


@dataclass(frozen=True)
class Call:
    """A tool call. `arguments` is a dict (sent as JSON) or a raw string, sent as-is to simulate malformed JSON."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)

    def raw_arguments(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class Answer:
    text: str = ""
    tool_calls: list[Call] = field(default_factory=list)
    # None: "tool_calls" when there are tool calls, else "stop".
    finish_reason: str | None = None
    # None: a deterministic estimate from the request and answer sizes.
    usage: Usage | None = None


@dataclass(frozen=True)
class Fail:
    code: str = "provider_error"
    message: str = "scripted failure"


@dataclass(frozen=True)
class Hang:
    """Block until released (ScriptedProvider.release_hangs) or `seconds` pass, then fail with code "timeout"."""

    seconds: float = 3600.0


# A plain string is shorthand for Answer(text=...).
Entry = Answer | Fail | Hang | str
Script = list[Entry] | tuple[Entry, ...] | Callable[[ModelRequest], Entry]


def estimate_usage(request: ModelRequest, text: str, tool_calls: list[ToolCall]) -> Usage:
    """Roughly 4 characters per token: deterministic, so costs and budgets are testable without a tokenizer."""
    prompt = json.dumps(request.messages, sort_keys=True) + json.dumps(request.tools, sort_keys=True)
    answer = text + "".join(call.name + call.arguments for call in tool_calls)
    return Usage(input_tokens=math.ceil(len(prompt) / 4), output_tokens=math.ceil(len(answer) / 4))


class _Script:
    def __init__(self, script: Script | None) -> None:
        self.installed = script is not None
        self.responder = script if callable(script) else None
        self.entries = [] if script is None or callable(script) else list(script)
        self.position = 0
        self.call_count = 0
        self.requests: list[ModelRequest] = []


class ScriptedProvider(ModelProvider):
    kind = "scripted"

    _scripts: dict[str, _Script] = {}
    _hangs: set[threading.Event] = set()
    _lock = threading.Lock()

    @classmethod
    def install(cls, provider_name: str, script: Script) -> None:
        """Replace the script of `provider_name` (a list of entries, or a callable request → entry)."""
        if not callable(script) and not isinstance(script, list | tuple):
            raise TypeError("a script is a list of entries or a callable (ModelRequest) -> entry")
        with cls._lock:
            cls._scripts[provider_name] = _Script(script)

    @classmethod
    def requests_for(cls, provider_name: str) -> list[ModelRequest]:
        with cls._lock:
            state = cls._scripts.get(provider_name)
            return list(state.requests) if state else []

    @classmethod
    def reset(cls, provider_name: str | None = None) -> None:
        """Forget the script and recorded requests of one provider, or of all of them."""
        with cls._lock:
            if provider_name is None:
                cls._scripts.clear()
            else:
                cls._scripts.pop(provider_name, None)

    @classmethod
    def release_hangs(cls) -> None:
        """Wake every request blocked in a Hang (they fail with code "timeout"), so tests leave no thread behind."""
        with cls._lock:
            hangs, cls._hangs = cls._hangs, set()
        for event in hangs:
            event.set()

    def complete(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        entry = self._next_entry(request)
        if isinstance(entry, str):
            entry = Answer(text=entry)
        if isinstance(entry, Fail):
            raise ProviderError(entry.message, code=entry.code, provider=self.name, model=request.model)
        if isinstance(entry, Hang):
            self._hang(entry, request)
        if not isinstance(entry, Answer):
            raise ProviderError(
                f"scripted provider {self.name!r}: the script gave {entry!r}; expected Answer, Fail, Hang or a string",
                code="bad_script",
                provider=self.name,
                model=request.model,
            )
        with self._lock:
            state = self._scripts.setdefault(self.name, _Script(None))
            first_number = state.call_count + 1
            state.call_count += len(entry.tool_calls)
        tool_calls = [
            ToolCall(id=f"call_{first_number + offset}", name=call.name, arguments=call.raw_arguments())
            for offset, call in enumerate(entry.tool_calls)
        ]
        return ModelResponse(
            text=entry.text,
            tool_calls=tool_calls,
            finish_reason=entry.finish_reason or ("tool_calls" if tool_calls else "stop"),
            usage=entry.usage or estimate_usage(request, entry.text, tool_calls),
            latency_ms=(time.perf_counter() - started) * 1000,
            model=request.model,
        )

    def _next_entry(self, request: ModelRequest) -> Entry:
        recorded = copy.deepcopy(request)
        with self._lock:
            state = self._scripts.setdefault(self.name, _Script(None))
            state.requests.append(recorded)
            number = len(state.requests)
            responder = state.responder
            entry: Entry | None = None
            if responder is None and state.position < len(state.entries):
                entry = state.entries[state.position]
                state.position += 1
            total, installed = len(state.entries), state.installed
        if responder is not None:
            # Outside the lock: a rule may be slow or read this provider's recorded requests.
            return responder(copy.deepcopy(request))
        if entry is None and not installed:
            raise ProviderError(
                f"scripted provider {self.name!r} has no script installed; install one with "
                "ScriptedProvider.install() or scripted_model.play()",
                code="script_exhausted",
                provider=self.name,
                model=request.model,
            )
        if entry is None:
            raise ProviderError(
                f"scripted provider {self.name!r} has no answer left for request #{number} (the script had {total} "
                "entries); play more entries or install a responder",
                code="script_exhausted",
                provider=self.name,
                model=request.model,
            )
        return entry

    def _hang(self, entry: Hang, request: ModelRequest) -> None:
        event = threading.Event()
        with self._lock:
            self._hangs.add(event)
        released = event.wait(entry.seconds)
        with self._lock:
            self._hangs.discard(event)
        how = "was released" if released else f"gave up after {entry.seconds:g}s"
        raise ProviderError(
            f"scripted provider {self.name!r}: the request hung and {how}",
            code="timeout",
            provider=self.name,
            model=request.model,
        )
