"""Record once, replay deterministically: the tapes a case's model traffic goes through in record and replay mode.

A tape belongs to one case × model conversation. In record mode the runtime provider `agenttest-record`
(runs/engine/model_providers.py) answers every model call of the conversation through a Recorder, which calls the
real model and keeps each exchange; in replay mode `agenttest-replay` answers through a Replayer, which serves the
kept exchanges by position and never builds a network client or reads a key. The judge of llmJudge assertions is
handed the same tape, so its exchanges are kept and served too, and so is a simulated user's model (purpose "user",
labelled with the turn whose line it writes): a replay plays both sides of the conversation.

An entry (one model call), as stored and as written to the JSONL files:

    {"purpose": "agent" | "judge" | "user", "turn": 0, "step": 1, "agent": "order-router", "scope": "",
     "model": "openai:gpt-4o-mini", "request_hash": "<sha256>", "request": {<normalised request>},
     "kind": "answer", "response": {"text": "", "tool_calls": [{"id", "name", "arguments"}],
                                    "finish_reason": "tool_calls", "usage": {"input_tokens", "output_tokens"},
                                    "model": "gpt-4o-mini"},
     "latency_ms": 812.5}

`kind` "error" carries {"error": {"code", "message", "partial_text"?}} instead of a response, and "hang" carries
neither: it blocks until the runner abandons the case at its timeout. Every request is compared with its entry by the
hash of its normalised form (volatile values replaced, secrets redacted); a difference stops the replay as stale.
"""

from __future__ import annotations

import abc
import hashlib
import json
import re
import threading
from typing import Any

from agenthost.seams import (
    DEADLINE,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
    api_problem,
    get_model,
    get_provider,
    redact,
)

RECORD_PROVIDER = "agenttest-record"
REPLAY_PROVIDER = "agenttest-replay"

ANSWER, ERROR, HANG = "answer", "error", "hang"
KINDS = (ANSWER, ERROR, HANG)
AGENT, JUDGE, USER = "agent", "judge", "user"
PURPOSES = (AGENT, JUDGE, USER)

# A hang is released when the runner abandons the case; this only bounds a tape nobody abandons.
MAX_HANG_SECONDS = 3600.0
# The most tokens one entry (and one case's tape, files.py) may say it used: results store token counts in
# columns that hold less than 2**31.
MAX_TOKENS = 2**31 - 1

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?(?!\d)")


# --- Normalising and comparing requests ------------------------------------------------------------------------


def normalise_request(request: ModelRequest, model_key: str) -> dict[str, Any]:
    """The parts of a request that decide the answer, with values that differ on every run made stable: the ids
    the host generates from the conversation id (`rule_<conversation>_<seq>`), UUIDs and timestamps. Secrets are
    redacted, so the stored form never holds one."""
    conversation_id = request.metadata.get("conversation_id")
    generated_id = re.compile(rf"\b(rule|direct)_{int(conversation_id)}_(\d+)\b") if conversation_id else None

    def stable(value: Any) -> Any:
        if isinstance(value, str):
            if generated_id is not None:
                value = generated_id.sub(r"\1_<conversation>_\2", value)
            return _TIMESTAMP.sub("<timestamp>", _UUID.sub("<uuid>", value))
        if isinstance(value, dict):
            return {key: stable(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [stable(item) for item in value]
        return value

    normalised = {
        "model": model_key,
        "temperature": request.temperature,
        "messages": stable([_with_content(message) for message in request.messages]),
        "tools": stable(request.tools),
    }
    if request.api != "chat":
        # Only for another API than chat completions, so that every chat recording keeps its key: a Responses
        # request's input items and tools are under messages and tools, its instructions among its settings.
        normalised["api"] = request.api
    if request.settings:
        # Only when set, so that every recording made without settings keeps its key.
        normalised["settings"] = stable(request.settings)
    if request.response_schema and request.metadata.get("runtime"):
        # A runtime's structured output type is part of the request its framework built (a changed output_type makes
        # the replay stale); the judge's fixed schema stays out, so its recordings keep their keys.
        normalised["response_schema"] = stable(request.response_schema)
    return redact(normalised)


def _with_content(message: Any) -> Any:
    # An empty content beside tool calls has been sent as null, left out, and now as "" (what every server
    # accepts); recordings made with any of them must still match, so all three read as null here.
    if (
        isinstance(message, dict)
        and message.get("role") == "assistant"
        and message.get("tool_calls")
        and not message.get("content")
    ):
        return {**message, "content": None}
    return message


def request_hash(normalised: dict[str, Any]) -> str:
    canonical = json.dumps(normalised, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


_MISSING = object()
_CONTEXT = 30
_SHOWN = 60


def first_difference(recorded: Any, now: Any, path: str = "") -> str:
    """Where two normalised requests first differ, e.g. `messages[0].content: recorded '…help…' now '…assist…'`;
    "" when they are equal."""
    where = path or "the request"
    if recorded is _MISSING or now is _MISSING:
        return f"{where}: recorded {_shown(recorded)} now {_shown(now)}"
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in [*recorded, *(key for key in now if key not in recorded)]:
            found = first_difference(recorded.get(key, _MISSING), now.get(key, _MISSING), f"{path}.{key}" if path
                                     else str(key))
            if found:
                return found
        return ""
    if isinstance(recorded, list) and isinstance(now, list):
        for index in range(max(len(recorded), len(now))):
            found = first_difference(
                recorded[index] if index < len(recorded) else _MISSING,
                now[index] if index < len(now) else _MISSING,
                f"{path}[{index}]",
            )
            if found:
                return found
        return ""
    if isinstance(recorded, str) and isinstance(now, str):
        if recorded == now:
            return ""
        at = next((i for i, (a, b) in enumerate(zip(recorded, now, strict=False)) if a != b), min(len(recorded),
                                                                                                    len(now)))
        return f"{where}: recorded {_around(recorded, at)!r} now {_around(now, at)!r}"
    if type(recorded) is type(now) and recorded == now:
        return ""
    return f"{where}: recorded {_shown(recorded)} now {_shown(now)}"


def _around(text: str, at: int) -> str:
    start = max(0, at - _CONTEXT)
    end = at + _SHOWN - _CONTEXT
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _shown(value: Any) -> str:
    if value is _MISSING:
        return "(nothing)"
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


# --- Tapes -------------------------------------------------------------------------------------------------------


def _labels(request: ModelRequest) -> dict[str, Any]:
    metadata = request.metadata
    if metadata.get("purpose") == JUDGE:
        return {"purpose": JUDGE, "turn": None, "step": None, "agent": "", "scope": str(metadata.get("scope", ""))}
    if metadata.get("purpose") == USER:
        return {"purpose": USER, "turn": metadata.get("turn"), "step": None, "agent": "", "scope": ""}
    return {
        "purpose": AGENT,
        "turn": metadata.get("turn"),
        "step": metadata.get("step"),
        "agent": str(metadata.get("agent", "")),
        "scope": "",
    }


def changed_tools(recorded: Any, now: Any) -> str:
    """The tools offered to the model whose definition differs between two requests, by name — an MCP server whose
    tools/list changed shows here as the tool it changed: "orders__lookup (changed), orders__refund (added)"."""

    def by_name(tools: Any) -> dict[str, Any]:
        if not isinstance(tools, list):
            return {}
        named = {}
        for tool in tools:
            # A chat tool names its function; a Responses API tool is the function itself.
            function = tool.get("function", tool) if isinstance(tool, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                named[function["name"]] = function
        return named

    before, after = by_name(recorded), by_name(now)
    changes = [f"{name} (removed)" for name in before if name not in after]
    changes += [f"{name} (added)" for name in after if name not in before]
    changes += [f"{name} (changed)" for name in before if name in after and before[name] != after[name]]
    return ", ".join(changes)


def describe(entry: dict[str, Any]) -> str:
    """Where an entry sits, as the messages say it: "the request at turn 0 step 1", "the judge request for turn 0"."""
    if entry.get("purpose") == JUDGE:
        scope = entry.get("scope") or "case"
        return f"the judge request for {'the case' if scope == 'case' else scope}"
    if entry.get("purpose") == USER:
        return f"the simulated user's request for turn {entry.get('turn')}"
    return f"the request at turn {entry.get('turn')} step {entry.get('step')}"


def user_stale_reason(recorded: Any, now: dict[str, Any], request: ModelRequest) -> str:
    """Why a simulated user's request differs from its recording, in the words that say what to do. The request's
    metadata `message_turns` names, per message, the turn it belongs to (None: not a turn's); a differing message
    in the user role is an agent's reply (the user model reads the agent as its interlocutor)."""
    difference = first_difference(recorded, now) or "the request hash differs"
    recorded_messages = recorded.get("messages") if isinstance(recorded, dict) else None
    if not isinstance(recorded_messages, list):
        recorded_messages = []
    turns = request.metadata.get("message_turns") or []
    for index, message in enumerate(now["messages"]):
        if index < len(recorded_messages) and recorded_messages[index] == message:
            continue
        turn = turns[index] if index < len(turns) else None
        if message.get("role") == "user" and turn is not None:
            return f"the agent answered differently at turn {turn}; record again. First difference: {difference}"
        if message.get("role") == "system":
            return (
                "the simulated user's persona, goal or facts changed since the recording; record again. First "
                f"difference: {difference}"
            )
        break
    return (
        f"stale recording: the simulated user's request for turn {request.metadata.get('turn')} differs from the "
        f"recording — record again. First difference: {difference}"
    )


class Tape(abc.ABC):
    """The model traffic of one case × model conversation. `complete` answers a request (for `model_key`, default
    the model under test); `abandon` is called by the runner when the case times out."""

    provider_name = ""
    spends = True

    def __init__(self, *, case_name: str, model_key: str) -> None:
        self.case_name = case_name
        self.model_key = model_key
        self.failure = ""
        self._abandoned = threading.Event()
        self._lock = threading.Lock()

    @abc.abstractmethod
    def complete(self, request: ModelRequest, model_key: str | None = None) -> ModelResponse:
        """Answer the request as the tape's mode does (keeping or serving the exchange)."""

    def abandon(self) -> None:
        self._abandoned.set()

    @property
    def abandoned(self) -> bool:
        return self._abandoned.is_set()


class Recorder(Tape):
    """Calls the real model and keeps every exchange — answers and provider errors alike, so a replay fails where
    the recorded run failed. A call still in flight when the case is abandoned is kept as a hang."""

    provider_name = RECORD_PROVIDER

    def __init__(self, *, case_name: str, model_key: str) -> None:
        super().__init__(case_name=case_name, model_key=model_key)
        self._entries: list[dict[str, Any]] = []
        self._in_flight: dict[str, Any] | None = None

    def complete(self, request: ModelRequest, model_key: str | None = None) -> ModelResponse:
        key = model_key or self.model_key
        normalised = normalise_request(request, key)
        entry = {**_labels(request), "model": key, "request_hash": request_hash(normalised), "request": normalised}
        with self._lock:
            if self.abandoned:
                # The runner gave up on this case: nothing it does any more may cost a model call.
                raise ProviderError(
                    "the case was abandoned (timed out); no further model call is made",
                    code="abandoned",
                    provider=self.provider_name,
                    model=request.model,
                )
            self._in_flight = entry
        try:
            response = self.answer(request, key)
        except ProviderError as exc:
            if exc.code == DEADLINE:
                # Ended by the case's timeout, not by the model: a replay must time out there too.
                self._keep({**entry, "kind": HANG})
            else:
                self._keep({**entry, "kind": ERROR, "error": redact({"code": exc.code, "message": str(exc)})})
            raise
        self._keep(
            {
                **entry,
                "kind": ANSWER,
                "response": redact(
                    {
                        "text": response.text,
                        "tool_calls": [
                            {"id": call.id, "name": call.name, "arguments": call.arguments}
                            for call in response.tool_calls
                        ],
                        "finish_reason": response.finish_reason,
                        "usage": _usage_entry(response.usage),
                        "model": response.model,
                        # Only when there is one: recordings without it stay as they were.
                        **({"refusal": response.refusal} if response.refusal else {}),
                        # A Responses API answer's output items (reasoning included), replayed as they came.
                        **({"output": response.output} if response.output else {}),
                    }
                ),
                "latency_ms": round(response.latency_ms, 3),
            }
        )
        return response

    def answer(self, request: ModelRequest, model_key: str) -> ModelResponse:
        """What the model says: the real model's answer. A tape whose answers come from elsewhere (a production
        trace's, runs/engine/trace_tapes.py) overrides it, and its exchanges are kept the same way."""
        provider = get_provider(get_model(model_key).provider)
        if unsupported := api_problem(provider, request):
            raise ProviderError(unsupported, code="unsupported_api", provider=self.provider_name, model=request.model)
        return provider.complete(request)

    def _keep(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._in_flight = None
            if not self.abandoned:
                self._entries.append(entry)

    def abandon(self) -> None:
        with self._lock:
            if not self.abandoned and self._in_flight is not None:
                self._entries.append({**self._in_flight, "kind": HANG})
                self._in_flight = None
            self._abandoned.set()

    def entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._entries)


class Replayer(Tape):
    """Serves a recording by position. Anything it cannot serve faithfully — an exhausted recording, a request that
    differs from the recorded one, an entry it does not understand — stops the replay with `failure` set, which the
    runner makes the case's Error reason. It holds no client and reads no key."""

    provider_name = REPLAY_PROVIDER
    spends = False

    def __init__(self, *, case_name: str, model_key: str, entries: list[dict[str, Any]]) -> None:
        super().__init__(case_name=case_name, model_key=model_key)
        self._entries = list(entries)
        self._position = 0
        self.hanging_at = ""

    def complete(self, request: ModelRequest, model_key: str | None = None) -> ModelResponse:
        key = model_key or self.model_key
        labels = _labels(request)
        with self._lock:
            if self.failure:
                # Nothing more is served after a failure: an answer now would belong to another request.
                raise ProviderError(
                    self.failure, code="replay_stopped", provider=self.provider_name, model=request.model
                )
            if self._position >= len(self._entries):
                raise self._fail(
                    f"the recording of case '{self.case_name}' on {self.model_key} is exhausted: it has "
                    f"{len(self._entries)} entries and none for {describe(labels)} — re-record",
                    "recording_exhausted",
                    request,
                )
            entry = self._entries[self._position]
            self._position += 1
        normalised = normalise_request(request, key)
        if request_hash(normalised) != entry.get("request_hash") and labels["purpose"] == USER == entry.get("purpose"):
            # Never an invented line: the user's next line answered what the agent said then, not what it says now.
            raise self._fail(user_stale_reason(entry.get("request", {}), normalised, request), "stale_recording",
                             request)
        if request_hash(normalised) != entry.get("request_hash"):
            recorded = entry.get("request", {})
            difference = first_difference(recorded, normalised) or "the request hash differs"
            changed = changed_tools(recorded.get("tools") if isinstance(recorded, dict) else None, normalised["tools"])
            tools_note = f"Tools changed since the recording: {changed}. " if changed else ""
            raise self._fail(
                f"stale recording: {describe(labels)} differs from the recording — re-record. "
                f"{tools_note}First difference: {difference}",
                "stale_recording",
                request,
            )
        kind = entry.get("kind")
        if kind == ANSWER:
            try:
                return _response(entry, request)
            except UnreadableEntry as exc:
                raise self._fail(
                    f"the recording is unreadable: {exc} in {describe(labels)} — re-record it", "bad_recording", request
                ) from None
        if kind == ERROR:
            error = entry["error"]
            partial = error.get("partial_text") or ""
            message = error["message"] + (f" (after partial output {partial!r})" if partial else "")
            raise ProviderError(message, code=error["code"], provider=self.provider_name, model=request.model)
        if kind == HANG:
            self.hanging_at = describe(labels)
            self._abandoned.wait(MAX_HANG_SECONDS)
            raise ProviderError(
                f"the recorded request hung ({self.hanging_at}) and was abandoned",
                code="timeout",
                provider=self.provider_name,
                model=request.model,
            )
        raise self._fail(
            f"the recording of case '{self.case_name}' on {self.model_key} has an entry of unknown kind {kind!r} "
            f"for {describe(labels)}; kinds are {', '.join(KINDS)}",
            "bad_recording",
            request,
        )

    def _fail(self, reason: str, code: str, request: ModelRequest) -> ProviderError:
        """Remember the first reason the replay could not go on; the error to raise."""
        self.failure = self.failure or reason
        return ProviderError(reason, code=code, provider=self.provider_name, model=request.model)


class UnreadableEntry(ValueError):
    """A stored entry holds what no recording does (checked where it is read, for tapes stored before import checked
    them, files.py)."""


def _stored_tokens(usage: dict[str, Any], key: str) -> int:
    # int() of "³", 1e999 or 10**25 either raises deep in the runner or overflows the result's column when stored.
    value = usage.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        try:
            shown = repr(value)
        except ValueError:  # an integer of more than 4,300 digits has no repr
            shown = "an integer too long to show"
        shown = shown if len(shown) <= 40 else f"{shown[:40]}…"
        raise UnreadableEntry(f"usage.{key} must be a whole number from 0 to {MAX_TOKENS}, got {shown}")
    return value


def _usage_entry(usage: Usage) -> dict[str, int]:
    entry = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    # The details only when the endpoint reported them, so recordings of endpoints without them are unchanged.
    if usage.cached_input_tokens:
        entry["cached_input_tokens"] = usage.cached_input_tokens
    if usage.reasoning_tokens:
        entry["reasoning_tokens"] = usage.reasoning_tokens
    return entry


def _output(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise UnreadableEntry("response.output must be a list of the Responses API's output items (objects)")
    return value


def _response(entry: dict[str, Any], request: ModelRequest) -> ModelResponse:
    response = entry["response"]
    usage = response.get("usage") or {}
    if not isinstance(usage, dict):
        raise UnreadableEntry("usage must be an object")
    return ModelResponse(
        text=response.get("text") or "",
        tool_calls=[
            ToolCall(id=call["id"], name=call["name"], arguments=call["arguments"])
            for call in response.get("tool_calls") or []
        ],
        finish_reason=response.get("finish_reason") or "stop",
        usage=Usage(
            _stored_tokens(usage, "input_tokens"),
            _stored_tokens(usage, "output_tokens"),
            _stored_tokens(usage, "cached_input_tokens"),
            _stored_tokens(usage, "reasoning_tokens"),
        ),
        refusal=response.get("refusal") or "",
        length_limit=str(response.get("length_limit") or ""),
        output=_output(response.get("output")),
        # As recorded: a replayed comparison shows what the model took, not how fast a lookup is.
        latency_ms=float(entry.get("latency_ms", 0.0)),
        model=response.get("model") or request.model,
    )
