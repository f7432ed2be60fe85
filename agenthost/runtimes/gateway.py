"""The model gateway of a process agent (issue 39): an OpenAI-compatible HTTP endpoint for one turn of its program —
`POST /v1/chat/completions` and `POST /v1/responses`, streamed (SSE) or not — whose every request is answered
through the turn's model layer, exactly as a python-runtime loop's own client is (runtimes/python.py
`chat_completion`, runtimes/responses.py `responses_create`): the harness's model override, record and replay with
stale detection, budgets, the case's deadline, tokens and cost, and the seal's ledger all hold.

The program gets `OPENAI_BASE_URL` and a key made for the turn (`OPENAI_API_KEY`); a request with any other key is
refused with a 401 and never reaches the model layer. The server only accepts: each request is handed, through a
queue and a wake-up pipe, to the turn's own thread, which answers it (the turn's session is one thread's), and the
server thread writes the answer back. Under test it listens on a Unix socket in a scratch directory, which the
forwarder inside the program's network namespace reaches (netns_forwarder.py); in chat on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agenthost.llm.streams import chat_chunks, response_events, sse_body, unstreamed
from agenthost.runtimes.base import RuntimeTurn, TurnStopped
from agenthost.runtimes.python import chat_completion
from agenthost.runtimes.responses import responses_create
from agenthost.seal import exempt
from agenthost.turns import ConversationError

CHAT, RESPONSES = "chat", "responses"
# A tool call of the MCP gateway (runtimes/mcp_gateway.py), answered on the turn's thread like a model call.
TOOL = "tool"
# A request an ACP agent makes of its client (runtimes/acp.py): its own answer on the turn's thread (`submit`'s call).
CLIENT = "client"
ROUTES = {"/v1/chat/completions": CHAT, "/chat/completions": CHAT, "/v1/responses": RESPONSES, "/responses": RESPONSES}
# The largest request body taken: a conversation far past any model's context.
MAX_BODY_BYTES = 32 * 1024 * 1024


@dataclass
class Pending:
    """A request of the program's waiting for the turn's thread to answer it."""

    api: str
    body: dict[str, Any]
    status: int = 0
    payload: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    # What answers a CLIENT request, on the turn's thread.
    call: Callable[[RuntimeTurn, Pending], None] | None = None

    def answer(self, status: int, payload: dict[str, Any], events: list[dict[str, Any]] | None = None) -> None:
        self.status, self.payload, self.events = status, payload, events
        self.done.set()


def _error(message: str, kind: str, code: str = "") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code or None, "param": None}}


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class ModelGateway:
    """One turn's gateway. `unix_path`: listen there (under test); else on 127.0.0.1, a free port."""

    def __init__(self, *, unix_path: str = "") -> None:
        self.key = f"agenttest-{secrets.token_urlsafe(24)}"
        self._pending: queue.SimpleQueue[Pending] = queue.SimpleQueue()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        self._closed = threading.Event()
        handler = self._handler()
        self._server: socketserver.BaseServer
        if unix_path:
            self._server = _UnixHTTPServer(unix_path, handler)
            self.base_url = ""
        else:
            tcp = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            tcp.daemon_threads = True
            self._server = tcp
            self.base_url = f"http://127.0.0.1:{tcp.server_address[1]}/v1"
        with exempt():
            self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                            name="agenttest-model-gateway")
            self._thread.start()

    @property
    def wakeup(self) -> int:
        """Readable when a request waits for the turn's thread (`serve`)."""
        return self._wake_read

    def serve(self, turn: RuntimeTurn) -> None:
        """Answer every waiting request through `turn`'s model layer, on the turn's thread. A ConversationError (the
        model failed, the budget or the deadline ran out, the seal refused the request) is answered to the program
        and raised: it ends the turn, as it ends a native one."""
        try:
            while True:
                os.read(self._wake_read, 4096)
        except BlockingIOError:
            pass
        while True:
            try:
                pending = self._pending.get_nowait()
            except queue.Empty:
                return
            try:
                self._answer(turn, pending)
            except ConversationError as exc:
                pending.answer(502, _error(f"agenttest's model layer: {exc}", "api_error", exc.code))
                raise
            except TypeError as exc:
                # The layer refuses a field it cannot carry faithfully: the program is told which, as a 400.
                pending.answer(400, _error(str(exc), "invalid_request_error"))

    def submit(
        self, api: str, body: dict[str, Any], call: Callable[[RuntimeTurn, Pending], None] | None = None
    ) -> Pending:
        """Hand a request to the turn's thread; its answer is set on the returned pending request (by `call`, for a
        CLIENT request)."""
        pending = Pending(api, body, call=call)
        if self._closed.is_set():
            pending.answer(503, _error("the agent's turn is over", "api_error"))
            return pending
        self._pending.put(pending)
        try:
            os.write(self._wake_write, b"!")
        except OSError:
            pass
        return pending

    def _answer(self, turn: RuntimeTurn, pending: Pending) -> None:
        body = pending.body
        streamed = body.get("stream") is True
        if pending.call is not None:
            pending.call(turn, pending)
        elif pending.api == TOOL:
            _call_tool(turn, pending)
        elif pending.api == CHAT:
            completion = chat_completion(turn, unstreamed(body) if streamed else body)
            payload = completion.model_dump(mode="json", exclude_none=True)
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
            pending.answer(200, payload, list(chat_chunks(payload, include_usage=include_usage)) if streamed else None)
        else:
            payload = responses_create(turn, unstreamed(body) if streamed else body)
            pending.answer(200, payload, list(response_events(payload)) if streamed else None)

    def close(self) -> None:
        """Stop serving; a request still waiting is answered that the turn is over."""
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        while True:
            try:
                self._pending.get_nowait().answer(503, _error("the agent's turn is over", "api_error"))
            except queue.Empty:
                break
        os.close(self._wake_read)
        os.close(self._wake_write)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 — http.server's name
                api = ROUTES.get(self.path.split("?", 1)[0].rstrip("/"))
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if 0 < length <= MAX_BODY_BYTES else b""
                if self.headers.get("Authorization", "") != f"Bearer {gateway.key}":
                    self._json(401, _error("Incorrect API key provided: this endpoint takes only the key agenttest "
                                           "gave the agent for its turn (OPENAI_API_KEY)", "invalid_request_error",
                                           "invalid_api_key"))
                    return
                if api is None:
                    self._json(404, _error(f"agenttest's model gateway serves /v1/chat/completions and /v1/responses, "
                                           f"not {self.path}", "invalid_request_error", "unknown_url"))
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    self._json(400, _error("the request body must be a JSON object", "invalid_request_error"))
                    return
                pending = gateway.submit(api, body)
                pending.done.wait()
                if pending.events is None:
                    self._json(pending.status, pending.payload)
                else:
                    self._sse(pending.api, pending.events)

            def do_GET(self) -> None:  # noqa: N802 — http.server's name
                self._json(404, _error(f"agenttest's model gateway serves POST requests only, not GET {self.path}",
                                       "invalid_request_error", "unknown_url"))

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, api: str, events: list[dict[str, Any]]) -> None:
                # The Responses API ends its stream with its last event; chat completions with [DONE].
                data = sse_body(events, done=api == CHAT)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def address_string(self) -> str:
                return "agent"

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _call_tool(turn: RuntimeTurn, pending: Pending) -> None:
    """A tool call of the program through the function-executor factory; a call that stops the turn is answered as
    an error and ends it (TurnStopped, raised on)."""
    name, arguments = str(pending.body.get("name", "")), pending.body.get("arguments") or {}
    declared = turn.loaded.declaration(name)
    if declared is None:
        pending.answer(200, {"content": f"{name!r} is not a tool available to this agent", "error": True})
        return
    try:
        result = turn.call_tool(name=name, arguments=arguments, implementation=None, declaration=declared)
    except TurnStopped as stop:
        pending.answer(200, {"content": stop.result.content, "error": True})
        raise
    pending.answer(200, {"content": result.content, "error": bool(result.error)})
