"""A local OpenAI-compatible server for tests and benchmarks: real HTTP on 127.0.0.1, canned or rule-based answers.

    with OpenAIStub() as stub:
        stub.queue(429, Answer(tool_calls=[Call("lookup_order", {"order_id": "1042"})]), "It has shipped.")
        ...  # point an `openai` provider at stub.base_url
        assert stub.requests[1]["messages"][-1]["role"] == "tool"

It serves `POST /v1/chat/completions` and `POST /v1/responses` (the Responses API, non-streaming): a responder reads
a Responses request in the chat format (`chat_view`: its instructions and input items as messages) and its reply is
sent as the Responses API's output items; `requests` keeps each body as sent.

A reply is a string (text), an `Answer` (text and/or tool calls, a refusal, a finish reason, usage with cached and
reasoning tokens, as in the scripted provider), an int HTTP status, an `HttpError` (`rate_limited(seconds)` for a 429
with Retry-After) or a `RawCompletion` sent as it is (an empty `choices`, say).

It behaves like the OpenAI API where agenttest depends on it: a reasoning model (o-series, gpt-5 family, or one named
in `reasoning_models`) answers HTTP 400 to a `temperature` other than 1 and to `max_tokens`, as OpenAI does, and an
ordinary model to `reasoning_effort`; a reasoning model spends reasoning tokens; a prompt that starts with one the
model saw before is partly served from the prompt cache (`cached_tokens`). It is as strict as the strictest server
agenttest meets, llama.cpp's (llama-cpp-python), whose chat templates read every message's `content`: a message
without a `content` key, or with `content: null` (even an assistant message beside tool calls, where the OpenAI spec
allows both), is answered HTTP 500 with that server's words; `strict_content=False` accepts them as OpenAI does.
`delay` makes every answer take that long, as a slow model's does; a client that hangs up meanwhile gets none, as a
real server drops it. `in_flight` and `most_in_flight` count the requests the server is working on (received, client
still there, no answer sent yet): what a provider's concurrency limit is about. Command line (serves the echo rules
until stopped):

    python -m agenthost.testing.openai_stub --port 8001 --echo
    python -m agenthost.testing.openai_stub --port 8001 --script script.json --lenient-content

`--script` answers from a script file in the scripted provider's format (`load_script_file`: rules on the last
message, then answers in order), so one script serves a team's example on the scripted provider and over HTTP alike;
`--lenient-content` is `strict_content=False` (a framework that writes `content: null` beside tool calls, as OpenAI
allows).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import math
import re
import select
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agenthost.llm.base import ModelRequest, ModelResponse, ToolCall, Usage, input_as_chat
from agenthost.llm.responses import output_items, response_payload, tools_as_chat
from agenthost.llm.scripted import Answer, Call, Fail, Hang, estimate_usage, load_script_file


@dataclass(frozen=True)
class HttpError:
    status: int
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    # The OpenAI error's `param` and `code`; `body` replaces the whole error body (a FastAPI server's `detail`).
    param: str | None = None
    code: str | None = None
    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class RawCompletion:
    """A response body sent exactly as given, for answers no Answer describes (an empty `choices` list)."""

    payload: dict[str, Any]


def rate_limited(retry_after: float) -> HttpError:
    """A 429 as OpenAI sends it, asking the client to wait `retry_after` seconds."""
    return HttpError(
        429,
        "Rate limit reached for requests per minute. Please try again later.",
        {"Retry-After": f"{retry_after:g}", "retry-after-ms": str(int(retry_after * 1000))},
        code="rate_limit_exceeded",
    )


Reply = str | Answer | int | HttpError | RawCompletion
Responder = Callable[[dict[str, Any]], Reply]

# Retryable statuses tell the client to retry almost at once, so SDK retries don't slow tests and benchmarks down.
_RETRY_NOW = {"Retry-After": "0", "retry-after-ms": "1"}
_RETRYABLE = {408, 409, 429}
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found", 429: "rate_limit_exceeded"}
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")
# What a reasoning model of the stub spends thinking, per answer.
REASONING_TOKENS = 24


class _Server(ThreadingHTTPServer):
    # socketserver's default backlog is 5: cases side by side open more connections than that at once, and while the
    # accept loop waits for its turn (a loaded machine) the kernel dropped the rest, whose clients tried again after
    # 1, 3, 7, 15 s — past a 25 s call timeout once. A server's backlog, as gunicorn's.
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (its timeout) closed the connection: not the stub's error, and not worth a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def chat_view(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses API request as the chat request a responder reads (its instructions and input items as messages,
    its function tools as chat tools); the body as sent stays in `requests`."""
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    return {
        "model": body.get("model", ""),
        "messages": input_as_chat(body.get("instructions"), items),
        "tools": tools_as_chat(list(body.get("tools") or [])),
    }


def echo_reply(body: dict[str, Any]) -> Reply:
    """The deterministic rules of `--echo`: call a tool the user names, answer after a tool result, else echo."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Answer(text=f"Done: {last.get('content') or ''}"[:500])
    text = given if isinstance(given := last.get("content"), str) else ""
    for tool in body.get("tools") or []:
        name = (tool.get("function") or {}).get("name", "")
        if name and name in text:
            return Answer(tool_calls=[Call(name, {})])
    return Answer(text=f"echo: {text}")


class OpenAIStub:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        models: tuple[str, ...] = ("gpt-4o-mini",),
        record: bool = True,
        reasoning_models: tuple[str, ...] = (),
        strict_content: bool = True,
    ) -> None:
        self.models = models
        self.reasoning_models = reasoning_models
        self.strict_content = strict_content
        # Hashes of the prompts (model + messages) seen, for the prompt cache.
        self._prompts: set[str] = set()
        # A long benchmark run would otherwise keep every request body in memory.
        self.record = record
        self._count = 0
        self._replies: collections.deque[Reply] = collections.deque()
        self._responder: Responder | None = None
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._paths: list[str] = []
        self._times: list[float] = []
        self._connections: set[socket.socket] = set()
        self._call_count = 0
        self._lock = threading.Lock()
        # Seconds each answer takes; may be changed while serving.
        self.delay = 0.0
        self._working_on: set[socket.socket] = set()
        self.most_in_flight = 0
        self._server = _Server((host, port), _handler_for(self))
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> OpenAIStub:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-stub", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        with self._lock:
            connections, self._connections = self._connections, set()
        # Keep-alive connections would otherwise keep their handler threads waiting for the next request.
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server.server_close()

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (the command line)."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def queue(self, *replies: Reply) -> None:
        """Answer the next requests with these replies, in order, before any responder."""
        with self._lock:
            self._replies.extend(replies)

    def respond_with(self, responder: Responder | None) -> None:
        """Answer requests the queue does not cover with responder(request JSON)."""
        with self._lock:
            self._responder = responder

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests received, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers (lower-case names) of the chat requests received, in order."""
        with self._lock:
            return list(self._headers)

    @property
    def paths(self) -> list[str]:
        """The paths (with their query) of the chat requests received, in order."""
        with self._lock:
            return list(self._paths)

    @property
    def times(self) -> list[float]:
        """When each chat request arrived (time.monotonic()), in order: how long a client waited between them."""
        with self._lock:
            return list(self._times)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._working_on)

    def _arrive(self, connection: socket.socket) -> None:
        with self._lock:
            # A client that hung up before this request came is no longer waiting for its answer.
            self._working_on = {other for other in self._working_on if not _hung_up(other, 0)}
            self._working_on.add(connection)
            self.most_in_flight = max(self.most_in_flight, len(self._working_on))

    def _answer_now(self, connection: socket.socket) -> bool:
        """Wait out the delay before answering; False when the client hung up meanwhile."""
        end = time.monotonic() + self.delay
        while (left := end - time.monotonic()) > 0:
            if _hung_up(connection, min(left, 0.05)):
                return False
        return True

    def _leave(self, connection: socket.socket) -> None:
        with self._lock:
            self._working_on.discard(connection)

    def _note(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        # A request the stub refused as the API would is still one it received.
        with self._lock:
            self._count += 1
            if self.record:
                self._requests.append(body)
                self._headers.append(headers)

    def _next_reply(self, body: dict[str, Any], headers: dict[str, str], view: dict[str, Any]) -> Reply | None:
        with self._lock:
            self._count += 1
            if self.record:
                self._requests.append(body)
                self._headers.append(headers)
            if self._replies:
                return self._replies.popleft()
            responder = self._responder
        return responder(view) if responder is not None else None

    def is_reasoning_model(self, model: str) -> bool:
        return model in self.reasoning_models or bool(_REASONING_MODEL.match(model))

    def refusal_of(self, body: dict[str, Any]) -> HttpError | None:
        """What the OpenAI API would refuse in this request, as it would say it; None when it would answer."""
        model = str(body.get("model", ""))
        if self.is_reasoning_model(model):
            temperature = body.get("temperature")
            if temperature is not None and temperature != 1:
                return HttpError(
                    400,
                    f"Unsupported value: 'temperature' does not support {temperature} with this model. Only the "
                    "default (1) value is supported.",
                    param="temperature",
                    code="unsupported_value",
                )
            if "max_tokens" in body:
                return HttpError(
                    400,
                    "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                    "'max_completion_tokens' instead.",
                    param="max_tokens",
                    code="unsupported_parameter",
                )
        elif "reasoning_effort" in body:
            return HttpError(
                400,
                "Unrecognized request argument supplied: reasoning_effort",
                param="reasoning_effort",
                code="unsupported_parameter",
            )
        if self.strict_content:
            for index, message in enumerate(body.get("messages") or []):
                if not isinstance(message, dict):
                    continue
                if "content" not in message:
                    # The chat template's Jinja error, as llama-cpp-python answers it.
                    return HttpError(500, "'dict object' has no attribute 'content'", {"x-should-retry": "true"})
                if message["content"] is None:
                    # llama-cpp-python's answer, a pydantic validation list inside a 500.
                    return HttpError(
                        500,
                        "1 validation error for ChatCompletionRequest\n"
                        f"messages.{index}.content\n"
                        "  Input should be a valid string [type=string_type, input_value=None, input_type=NoneType]",
                        {"x-should-retry": "true"},
                    )
        return None

    def responses_refusal_of(self, body: dict[str, Any]) -> HttpError | None:
        """What the OpenAI API would refuse in this Responses API request, as it would say it; None when it would
        answer."""
        model = str(body.get("model", ""))
        reasoning = given if isinstance(given := body.get("reasoning"), dict) else {}
        if self.is_reasoning_model(model):
            temperature = body.get("temperature")
            if temperature is not None and temperature != 1:
                return HttpError(
                    400,
                    "Unsupported parameter: 'temperature' is not supported with this model.",
                    param="temperature",
                    code="unsupported_parameter",
                )
        elif reasoning.get("effort") is not None:
            return HttpError(
                400,
                "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
                param="reasoning.effort",
                code="unsupported_parameter",
            )
        if not isinstance(body.get("input"), str | list):
            return HttpError(
                400, "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
            )
        return None

    def _response(self, body: dict[str, Any], answer: Answer) -> dict[str, Any]:
        """A Responses API answer: what `_completion` answers, as the Responses API's output items (a reasoning item
        first for a reasoning model, as OpenAI's)."""
        completion = self._completion(chat_view(body), answer)
        choice = completion["choices"][0]
        calls = [
            ToolCall(id=call["id"], name=call["function"]["name"], arguments=call["function"]["arguments"])
            for call in choice["message"].get("tool_calls") or []
        ]
        usage = completion["usage"]
        response = ModelResponse(
            text=answer.text, tool_calls=calls, finish_reason=choice["finish_reason"], refusal=answer.refusal,
            model=str(body.get("model", "")),
            usage=Usage(
                input_tokens=usage["prompt_tokens"], output_tokens=usage["completion_tokens"],
                cached_input_tokens=usage["prompt_tokens_details"]["cached_tokens"],
                reasoning_tokens=usage["completion_tokens_details"]["reasoning_tokens"],
            ),
        )
        response_id = f"resp_stub_{self._count}"
        items = output_items(response, prefix=response_id)
        if self.is_reasoning_model(response.model):
            items.insert(0, {"type": "reasoning", "id": f"rs_stub_{self._count}", "summary": []})
        response.output = items
        return response_payload(response, model=response.model, response_id=response_id, request_body=body)

    def _cached_tokens(self, model: str, messages: list[Any]) -> int:
        """Tokens of the longest prompt this model saw before that this one starts with (the prompt cache)."""
        digest = hashlib.sha256(model.encode())
        prefixes: list[tuple[str, int]] = []
        size = 0
        for message in messages:
            text = json.dumps(message, sort_keys=True)
            digest.update(text.encode())
            size += len(text)
            prefixes.append((digest.hexdigest(), size))
        with self._lock:
            cached = max((length for key, length in prefixes if key in self._prompts), default=0)
            if self.record and prefixes:
                self._prompts.add(prefixes[-1][0])
        return math.ceil(cached / 4)

    def _completion(self, body: dict[str, Any], answer: Answer) -> dict[str, Any]:
        with self._lock:
            first = self._call_count + 1
            self._call_count += len(answer.tool_calls)
        calls = [
            ToolCall(id=f"call_{first + offset}", name=call.name, arguments=call.raw_arguments())
            for offset, call in enumerate(answer.tool_calls)
        ]
        model = str(body.get("model", ""))
        request = ModelRequest(model=model, messages=body.get("messages") or [], tools=body.get("tools") or [])
        usage = answer.usage
        if usage is None:
            estimate = estimate_usage(request, answer.text, calls)
            reasoning = REASONING_TOKENS if self.is_reasoning_model(model) else 0
            usage = Usage(
                input_tokens=estimate.input_tokens,
                output_tokens=estimate.output_tokens + reasoning,
                cached_input_tokens=min(self._cached_tokens(model, request.messages), estimate.input_tokens),
                reasoning_tokens=reasoning,
            )
        message: dict[str, Any] = {
            "role": "assistant", "content": answer.text or None, "refusal": answer.refusal or None
        }
        if calls:
            message["tool_calls"] = [call.as_openai() for call in calls]
        return {
            "id": f"chatcmpl-stub-{self._count}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": answer.finish_reason or ("tool_calls" if calls else "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": usage.input_tokens,
                "completion_tokens": usage.output_tokens,
                "total_tokens": usage.total_tokens,
                "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
                "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            },
        }


def _hung_up(connection: socket.socket, wait: float) -> bool:
    """Whether the client closed the connection, waiting up to `wait` seconds to find out."""
    try:
        readable, _, _ = select.select([connection], [], [], wait)
        if not readable:
            return False
        # Never a blocking read: a request's arrival checks the other requests' connections from its own thread, and
        # a connection's handler may read the bytes that made it readable before this peek. A blocking peek then
        # waited, holding the stub's lock, for that client's next request or its timeout: every call to the stub
        # stalled 25 s, and a run's judge calls ended its cases in Error.
        if connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
            return True
    except BlockingIOError:
        pass
    except (OSError, ValueError):
        return True
    # Bytes of a next request (or read meanwhile by the connection's handler): the client is there.
    time.sleep(wait)
    return False


def _handler_for(stub: OpenAIStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out as two writes; without this, Nagle + delayed ACK add ~40 ms to each response.
        disable_nagle_algorithm = True

        def setup(self) -> None:
            super().setup()
            with stub._lock:
                stub._connections.add(self.connection)

        def finish(self) -> None:
            with stub._lock:
                stub._connections.discard(self.connection)
            super().finish()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: benchmarks send thousands of requests."""

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                data = [{"id": name, "object": "model", "created": 0, "owned_by": "stub"} for name in stub.models]
                self._send(200, {"object": "list", "data": data})
            else:
                self._error(HttpError(404, f"no route GET {self.path}"))

        def do_POST(self) -> None:
            stub._arrive(self.connection)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            # Azure OpenAI adds the deployment to the path and the API version to the query.
            route = urllib.parse.urlsplit(self.path).path.rstrip("/")
            responses = route.endswith("/responses")
            if not responses and not route.endswith("/chat/completions"):
                self._error(HttpError(404, f"no route POST {self.path}"))
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._error(HttpError(400, "the request body is not JSON"))
                return
            if not isinstance(body, dict) or body.get("stream"):
                self._error(HttpError(400, "the stub answers non-streaming chat completions and responses only"))
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            with stub._lock:
                if stub.record:
                    stub._paths.append(self.path)
                    stub._times.append(time.monotonic())
            reply: Reply | None
            try:
                reply = stub.responses_refusal_of(body) if responses else stub.refusal_of(body)
                if reply is None:
                    reply = stub._next_reply(body, headers, chat_view(body) if responses else body)
                else:
                    stub._note(body, headers)
            except Exception as exc:  # a broken responder becomes a 500 the test can see
                reply = HttpError(500, f"the stub's responder failed: {exc!r}", {"x-should-retry": "false"})
            if reply is None:
                reply = HttpError(500, "OpenAIStub: no reply queued and no responder set", {"x-should-retry": "false"})
            if isinstance(reply, int):
                reply = HttpError(reply)
            if isinstance(reply, str):
                reply = Answer(text=reply)
            if isinstance(reply, HttpError):
                self._error(reply)
            elif isinstance(reply, RawCompletion):
                self._send(200, reply.payload)
            elif responses:
                self._send(200, stub._response(body, reply))
            else:
                self._send(200, stub._completion(body, reply))

        def _error(self, error: HttpError) -> None:
            headers = dict(_RETRY_NOW) if error.status in _RETRYABLE or error.status >= 500 else {}
            headers.update(error.headers)
            payload = error.body or {
                "error": {
                    "message": error.message or f"stub error {error.status}",
                    "type": _ERROR_TYPES.get(error.status, "server_error" if error.status >= 500 else "api_error"),
                    "param": error.param,
                    "code": error.code,
                }
            }
            self._send(error.status, payload, headers)

        def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            if self.connection in stub._working_on:
                answered = stub._answer_now(self.connection)
                # Done with before the answer goes out: the client may send its next request as soon as it has it.
                stub._leave(self.connection)
                if not answered:
                    self.close_connection = True
                    return
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


def script_reply(path: str) -> Responder:
    """The answers of a scripted-provider script file, over HTTP: an entry's failure becomes a 500 the client sees."""
    responder = load_script_file(path)

    def reply(body: dict[str, Any]) -> Reply:
        entry = responder(ModelRequest(model=str(body.get("model") or ""), messages=list(body.get("messages") or []),
                                       tools=list(body.get("tools") or [])))
        if isinstance(entry, Fail):
            return HttpError(500, f"{entry.code}: {entry.message}", {"x-should-retry": "false"})
        if isinstance(entry, Hang):
            return HttpError(500, "the script hangs here; the stub does not", {"x-should-retry": "false"})
        return entry

    return reply


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A local OpenAI-compatible chat completions server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--echo", action="store_true", help="answer every request with the deterministic echo rules")
    parser.add_argument("--script", metavar="FILE", help="answer from a script file in the scripted provider's format")
    parser.add_argument("--lenient-content", action="store_true",
                        help="accept content: null and missing content, as OpenAI does (default: as llama.cpp)")
    parser.add_argument("--model", action="append", dest="models", help="a model name for GET /v1/models")
    options = parser.parse_args(argv)
    if options.echo and options.script:
        parser.error("give --echo or --script, not both")
    stub = OpenAIStub(options.host, options.port, models=tuple(options.models or ("gpt-4o-mini",)), record=False,
                      strict_content=not options.lenient_content)
    if options.echo:
        stub.respond_with(echo_reply)
    if options.script:
        stub.respond_with(script_reply(options.script))
    how = " (echo)" if options.echo else f" (script {options.script})" if options.script else ""
    print(f"OpenAI stub listening on {stub.base_url}{how}", flush=True)
    try:
        stub.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
