"""The scripted provider: plays a script of answers, failures and hangs, and records every request it received.

Scripts are process-wide and keyed by provider name, so a test installs one and every thread that asks that provider
(the conversation loop, a Celery task run eagerly, a worker thread) plays the same script in order.

    ScriptedProvider.install("scripted", [
        Answer(tool_calls=[Call("lookup_order", {"order_id": "1042"})]),
        Answer("Order 1042 has shipped."),
    ])

A provider of kind "scripted" in the providers file may instead name a script file (`script`, JSON) and a file to
append every request it receives to (`requests_log`, JSON lines), so another process — a real worker, a user's CI —
plays a script and a test reads what it was asked. The file's format is `load_script_file`'s.
"""

from __future__ import annotations

import copy
import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agenthost.llm.base import ModelProvider, ModelRequest, ModelResponse, ProviderError, ToolCall, Usage
from common.provider_config import is_number


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
    refusal: str = ""
    # Seconds to wait before answering, like a slow model.
    delay: float = 0.0


@dataclass(frozen=True)
class Fail:
    code: str = "provider_error"
    message: str = "scripted failure"
    delay: float = 0.0
    # A rate limit's Retry-After, in seconds.
    retry_after: float | None = None


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


_ANSWER_KEYS = {"text", "tool_calls", "finish_reason", "usage", "refusal", "delay", "when"}
_ERROR_KEYS = {"code", "message", "retry_after"}
_USAGE_KEYS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens")


class ScriptFileError(ValueError):
    """A script file that cannot be played: the message names the file and the entry."""


def load_script_file(path: str) -> Callable[[ModelRequest], Entry]:
    """The responder a script file describes. The file is JSON: {"answers": [entry, …]} or the list itself. An entry
    is an answer — {"text": …}, {"tool_calls": [{"name": …, "arguments": {…} or "raw text"}]}, with optional
    "finish_reason", "refusal", "usage" {input_tokens, output_tokens, cached_input_tokens, reasoning_tokens} and
    "delay" (seconds) — or a failure {"error": {"code", "message", "retry_after"}, "delay"}, or a hang {"hang": s}.
    Entries play in order; an entry with "when": "<text>" is a rule instead, answering (every time) a request whose
    last message contains the text, so one script can serve many cases in any order."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ScriptFileError(f"script file {path}: the file does not exist") from None
    except OSError as exc:
        raise ScriptFileError(f"script file {path}: cannot be read ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScriptFileError(f"script file {path}: not valid JSON ({exc})") from None
    items = data.get("answers") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise ScriptFileError(f'script file {path}: expected {{"answers": [...]}} with at least one entry')
    ordered: list[Entry] = []
    rules: list[tuple[str, Entry]] = []
    for index, item in enumerate(items):
        try:
            entry = _entry_from(item)
        except ValueError as exc:
            raise ScriptFileError(f"script file {path}: answers[{index}]: {exc}") from None
        if isinstance(item, dict) and "when" in item:
            rules.append((item["when"], entry))
        else:
            ordered.append(entry)
    return _FileResponder(path, ordered, rules)


def _entry_from(item: Any) -> Entry:
    if isinstance(item, str):
        return Answer(text=item)
    if not isinstance(item, dict):
        raise ValueError(f"an entry is an object or a string, got {type(item).__name__}")
    delay = item.get("delay", 0.0)
    if not is_number(delay) or delay < 0:
        raise ValueError(f"field 'delay' must be a number of seconds ≥ 0, got {delay!r}")
    when = item.get("when", "")
    if not isinstance(when, str) or ("when" in item and not when):
        raise ValueError("field 'when' must be the non-empty text a request's last message contains")
    if "hang" in item:
        seconds = item["hang"]
        if not is_number(seconds) or seconds <= 0:
            raise ValueError(f"field 'hang' must be a number of seconds > 0, got {seconds!r}")
        return Hang(float(seconds))
    if "error" in item:
        error = item["error"]
        if not isinstance(error, dict) or not isinstance(error.get("message", ""), str) or not isinstance(
            error.get("code", "provider_error"), str
        ):
            raise ValueError("field 'error' must be an object with the strings code and message")
        unknown = set(error) - _ERROR_KEYS
        if unknown:
            raise ValueError(f"unknown field(s) in 'error': {', '.join(sorted(unknown))}")
        retry_after = error.get("retry_after")
        if retry_after is not None and (not is_number(retry_after) or retry_after < 0):
            raise ValueError(f"field 'error.retry_after' must be a number of seconds ≥ 0, got {retry_after!r}")
        return Fail(
            code=error.get("code", "provider_error"),
            message=error.get("message", "scripted failure"),
            delay=float(delay),
            retry_after=retry_after,
        )
    unknown = set(item) - _ANSWER_KEYS
    if unknown:
        allowed = ", ".join(sorted(_ANSWER_KEYS | {"error", "hang"}))
        raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))} (allowed: {allowed})")
    for name in ("text", "refusal"):
        if not isinstance(item.get(name, ""), str):
            raise ValueError(f"field {name!r} must be a string")
    finish = item.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise ValueError("field 'finish_reason' must be a string")
    calls = item.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ValueError("field 'tool_calls' must be a list of {name, arguments}")
    parsed_calls = []
    for number, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise ValueError(f"tool_calls[{number}] must be an object with a non-empty name")
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict | str):
            raise ValueError(f"tool_calls[{number}].arguments must be an object or a (raw) string")
        parsed_calls.append(Call(call["name"], arguments))
    usage = item.get("usage")
    if usage is not None:
        if not isinstance(usage, dict) or set(usage) - set(_USAGE_KEYS) or not all(
            isinstance(value, int) and not isinstance(value, bool) and value >= 0 for value in usage.values()
        ):
            raise ValueError(f"field 'usage' must be an object of whole numbers ≥ 0 among {', '.join(_USAGE_KEYS)}")
        usage = Usage(**usage)
    return Answer(
        text=item.get("text", ""),
        tool_calls=parsed_calls,
        finish_reason=finish,
        usage=usage,
        refusal=item.get("refusal", ""),
        delay=float(delay),
    )


class _FileResponder:
    def __init__(self, path: str, ordered: list[Entry], rules: list[tuple[str, Entry]]) -> None:
        self.path, self.ordered, self.rules = path, ordered, rules
        self.position = 0
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> Entry:
        messages = request.chat_messages()
        last = messages[-1] if messages else {}
        content = last.get("content") if isinstance(last, dict) else ""
        text = content if isinstance(content, str) else json.dumps(content)
        for when, entry in self.rules:
            if when in text:
                return entry
        with self._lock:
            if self.position < len(self.ordered):
                self.position += 1
                return self.ordered[self.position - 1]
        return Fail(
            code="script_exhausted",
            message=f"the script {self.path} has no answer left for this request ({len(self.ordered)} in order, "
            f"and no rule's 'when' is in the last message {text[:200]!r})",
        )


class ScriptedProvider(ModelProvider):
    kind = "scripted"
    # A Responses API request is answered like a chat one (rules read its last message in the chat format); the
    # answer's output items are built from the entry's text and calls.
    speaks_responses = True
    free = True
    option_keys = frozenset({"script", "requests_log"})
    path_option_keys = option_keys

    _scripts: dict[str, _Script] = {}
    _hangs: set[threading.Event] = set()
    _lock = threading.Lock()

    @classmethod
    def validate_options(cls, spec: dict[str, Any]) -> list[str]:
        problems = []
        for field_name in ("script", "requests_log"):
            if field_name in spec and (not isinstance(spec[field_name], str) or not spec[field_name].strip()):
                problems.append(f"field {field_name!r} must be a file path, got {spec[field_name]!r}")
        if isinstance(spec.get("script"), str) and spec["script"].strip():
            try:
                load_script_file(spec["script"])
            except ScriptFileError as exc:
                problems.append(f"field 'script': {exc}")
        log = spec.get("requests_log")
        if isinstance(log, str) and log.strip() and not os.path.isdir(os.path.dirname(os.path.abspath(log))):
            problems.append(f"field 'requests_log': the folder of {log} does not exist")
        return problems

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        super().__init__(name, options)
        self._requests_log = options.get("requests_log") or ""
        script = options.get("script")
        if script:
            # Built once per process and configuration (the registry's cache): the script plays from its start.
            self.install(name, load_script_file(script))

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
        if isinstance(entry, Answer | Fail) and entry.delay:
            time.sleep(entry.delay)
        if isinstance(entry, Fail):
            raise ProviderError(
                entry.message, code=entry.code, provider=self.name, model=request.model, retry_after=entry.retry_after
            )
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
            refusal=entry.refusal,
        )

    def _next_entry(self, request: ModelRequest) -> Entry:
        recorded = copy.deepcopy(request)
        if self._requests_log:
            self._log(recorded)
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

    def _log(self, request: ModelRequest) -> None:
        line = json.dumps(request.as_dict(), default=str, ensure_ascii=False)
        with self._lock, open(self._requests_log, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

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
