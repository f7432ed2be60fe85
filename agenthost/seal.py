"""The case seal (issue 33): while a case's turn runs, the team's code reaches nothing outside agenttest.

A held conversation (the harness's, services.conversation_open) has a `CaseSeal`. Each of its turns runs inside
`CaseSeal.sealing()`, which marks the turn's context (a context variable, so asyncio tasks and asgiref's thread hops
carry it; a thread started inside it inherits it too):

- the network: a process-wide audit hook (`sys.addaudithook`) refuses, inside a sealed context, every outbound
  connection and name lookup (`socket.connect`, `socket.getaddrinfo`, `socket.sendto`) and every new process
  (`subprocess.Popen`, `os.system`, `os.exec`, `os.posix_spawn`, `os.spawn`, `os.fork`, `os.forkpty`). Loopback is
  no exception: an MCP server is reached through the seam. What agenttest itself does there runs `exempt()`: the
  model layer's call (loop.call_model), the harness's executor providers, MCP calls made by the seam; and a
  connection agenttest's own code opens to its own database or broker is let through.
- the openai SDK: inside a sealed context, `SyncAPIClient.request` and `AsyncAPIClient.request` of any client the
  team's code made answer `chat.completions` and `responses.create` through the model layer (the turn's provider:
  recorded, replayed, budgeted and bound to the case's deadline like the runtime's own calls), streamed or not (a
  streamed call answered whole and handed back as the events the API streams, agenthost/llm/streams.py); any other
  endpoint (embeddings, a stored response, …) is refused, naming it.
- the ledger (agenthost/ledger.py): `check_request` refuses a model request carrying a tool result the seam never
  produced.

Whatever is refused is the case's breach, kept however the team's code handles the exception it gets: the turn ends
as an Error naming it (`raise_breach`), and no more model request of the case is sent.

What a context variable cannot follow: a thread the team's code started before the case (at import), or one started
through `_thread` directly, runs unsealed.
"""

from __future__ import annotations

import inspect
import os
import socket
import sys
import sysconfig
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from agenthost.ledger import ANY_CONTENT, strangers
from agenthost.llm.base import ModelRequest
from agenthost.redaction import redact_text
from agenthost.turns import ConversationError, TurnResult

_active: ContextVar[CaseSeal | None] = ContextVar("agenttest_case_seal", default=None)

_NETWORK = frozenset({"socket.connect", "socket.getaddrinfo", "socket.sendto"})
_PROCESSES = frozenset(
    {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty"}
)
_WATCHED = _NETWORK | _PROCESSES


class SealBroken(ConversationError):
    """The team's code did, during a case, what a case never lets it do: the case is an Error naming it."""

    code = "sealed"


class SealRefused(ConnectionRefusedError):
    """What the team's code gets when the seal refuses its connection, process or model request: an OSError, as a
    refused connection is, so that its libraries fail the way they fail offline."""


class CaseSeal:
    """The seal of one held conversation, for all its turns."""

    def __init__(self, session: Any, *, network_allow: frozenset[str] = frozenset()) -> None:
        self.session = session
        self.network_allow = network_allow
        # How a chat-completions request of a team's own openai client is answered through the model layer, as the
        # current turn's (held.run_send sets it).
        self.answer_chat: Callable[[dict[str, Any]], Any] | None = None
        # The same for a Responses API request (its JSON body → the `response` object as JSON).
        self.answer_responses: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self.breach: SealBroken | None = None
        self._addresses: frozenset[str] | None = None
        self._answered_by_framework: set[str] = set()
        self._spares: Counter[tuple[str, str | None]] = Counter()
        self._lock = threading.Lock()

    @contextmanager
    def sealing(self) -> Iterator[CaseSeal]:
        install()
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)

    def allows(self, host: str) -> bool:
        """Whether `host` (a name, or the address a connection goes to) is one of network_allow's."""
        if not self.network_allow:
            return False
        if host.lower() in self.network_allow:
            return True
        if self._addresses is None:
            # A connection goes to the address its name was resolved to: network_allow's names resolved once,
            # by agenttest itself.
            addresses: set[str] = set()
            with exempt():
                for name in self.network_allow:
                    try:
                        addresses.update(str(info[4][0]) for info in socket.getaddrinfo(name, None))
                    except OSError:
                        continue
            self._addresses = frozenset(addresses)
        return host in self._addresses

    def refuse(self, message: str) -> SealBroken:
        """Keep `message` as the case's breach (the first one counts) and return it."""
        with self._lock:
            if self.breach is None:
                self.breach = SealBroken(message)
            return self.breach

    def raise_breach(self, partial: TurnResult | None = None) -> None:
        """Raise the case's breach, if any, with what the turn did so far."""
        if self.breach is not None:
            raise SealBroken(str(self.breach), partial=partial)

    def note_spare(self, name: str, content: str | None = ANY_CONTENT) -> None:
        """A call the seam answered without the model's call id: one result of a call `name` with `content`
        (ANY_CONTENT: whatever the framework says, a hand-off's) counts as decided."""
        with self._lock:
            self._spares[(name, content)] += 1

    def note_framework_answer(self, call_id: str) -> None:
        """A call the framework answered itself, running nothing of the team's (pydantic-ai's retry prompt for
        arguments that do not validate): its result counts as decided, whatever it says."""
        with self._lock:
            self._answered_by_framework.add(call_id)

    def check_request(
        self, request: ModelRequest, partial: TurnResult | None, stored_id: Callable[[str], str] = str
    ) -> None:
        """Refuse (SealBroken) a request about to be sent when the case broke its seal, or when it carries a tool
        result the seam never produced in this conversation. `stored_id`: a call id as the transcript stores it."""
        if self.breach is not None:
            self.raise_breach(partial)
        decided: dict[str, set[str | None]] = {}
        for message in self.session.transcript():
            if message.role == "tool_result":
                decided.setdefault(message.tool_call_id, set()).add(message.content)
        with self._lock:
            spares = dict(self._spares)
            for call_id in self._answered_by_framework:
                decided.setdefault(stored_id(call_id), set()).add(None)
        found = strangers(request.messages, decided, spares, stored_id)
        if found:
            first = found[0]
            what = f"tool {first.name!r}" if first.name else f"the tool of call {first.call_id!r}"
            more = f" (and {len(found) - 1} more tool result(s) like it)" if len(found) > 1 else ""
            self.refuse(
                f"{what} ran outside agenttest: the agent's code sent the model a result for call {first.call_id!r}"
                f"{more} that agenttest's seam never produced — no mock, block or allowed run of the case answered "
                "it — so the tool ran (or was answered) in the agent's own code, beyond the case's mocks; the request "
                "was not sent. Call tools through the runtime's tool routing (a python-runtime loop: tools.call)"
            )
            self.raise_breach(partial)


def active() -> CaseSeal | None:
    """The seal of the calling context, None outside a sealed turn (or inside `exempt()`)."""
    return _active.get()


@contextmanager
def exempt() -> Iterator[None]:
    """agenttest's own work inside a sealed turn (its model layer, its seam): not sealed."""
    token = _active.set(None)
    try:
        yield
    finally:
        _active.reset(token)


@contextmanager
def resealed(seal: CaseSeal | None) -> Iterator[None]:
    """The team's code again, inside agenttest's own work (an allowed tool's implementation run by the seam)."""
    token = _active.set(seal)
    try:
        yield
    finally:
        _active.reset(token)


_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Put the audit hook, the thread start and the openai clients' request in place, once per process (an audit
    hook cannot be removed: outside a sealed context it returns at once)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        _installed = True
    _patch_thread_start()
    _patch_openai()
    sys.addaudithook(_audit)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event not in _WATCHED:
        return
    seal = _active.get()
    if seal is None:
        return
    if event in _PROCESSES:
        raise SealRefused(seal.refuse(
            f"the agent's code tried to start a process ({event}{_command(args)}) while the case ran: refused by "
            "agenttest's seal — under test nothing runs outside agenttest"
        ))
    if event == "socket.getaddrinfo":
        host, port = args[0], args[1]
        if host is None:
            return
    else:
        address = args[1]
        if not isinstance(address, tuple):
            host, port = address, None
        else:
            host, port = address[0], address[1] if len(address) > 1 else None
    host_text = host.decode(errors="replace") if isinstance(host, bytes) else str(host)
    if seal.allows(host_text) or _own_connection(host_text, port):
        return
    where = f"{host_text}:{port}" if port is not None else host_text
    raise SealRefused(seal.refuse(
        f"the agent's code tried to connect to {where} while the case ran: refused by agenttest's network seal — "
        "under test its model calls go through agenttest's model layer and its tools through the seam, and nothing "
        "else reaches the network (a suite's network_allow names hosts its effect-free tools may reach)"
    ))


def _command(args: tuple[Any, ...]) -> str:
    if not args or args[0] is None:
        return ""
    shown = args[1] if len(args) > 1 and isinstance(args[1], list | tuple) else args[0]
    text = " ".join(str(part) for part in shown) if isinstance(shown, list | tuple) else str(shown)
    return f": {redact_text(text)[:200]}"


_LIBRARY_ROOTS = tuple(
    {str(Path(path).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib")
     if (path := sysconfig.get_paths().get(key))}
)
_AGENTTEST_ROOT = Path(__file__).resolve().parent.parent
_AGENTTEST_PACKAGES = tuple(
    str(_AGENTTEST_ROOT / name) + os.sep
    for name in ("agenthost", "agenttest", "runs", "cases", "recording", "traces", "common")
)


def _own_endpoints() -> set[tuple[str, int | None]]:
    from django.conf import settings

    endpoints: set[tuple[str, int | None]] = set()
    for database in settings.DATABASES.values():
        if database.get("HOST"):
            port = database.get("PORT")
            endpoints.add((str(database["HOST"]), int(port) if port else 5432))
    for url in (getattr(settings, "CELERY_BROKER_URL", ""), os.environ.get("AGENTTEST_CACHE_URL", "")):
        parts = urlsplit(url or "")
        if parts.hostname:
            endpoints.add((parts.hostname, parts.port))
    return endpoints


def _own_connection(host: str, port: Any) -> bool:
    """A connection agenttest's own code opens to its own database or broker (a reconnect while a turn runs): the
    nearest caller outside the libraries is agenttest's, and the endpoint is one of its settings'."""
    endpoints = _own_endpoints()
    if (host, port) not in endpoints and not any(host == known and port is None for known, _ in endpoints):
        return False
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename != __file__ and not filename.startswith(_LIBRARY_ROOTS) and not filename.startswith("<"):
            return filename.startswith(_AGENTTEST_PACKAGES)
        frame = frame.f_back
    return False


def _patch_thread_start() -> None:
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        seal = _active.get()
        if seal is not None:
            run = self.run

            def sealed_run() -> None:
                # A new thread starts with an empty context: the team's thread stays inside its case's seal.
                _active.set(seal)
                run()

            self.run = sealed_run  # type: ignore[method-assign]
        original(self)

    threading.Thread.start = start  # type: ignore[method-assign]


def _patch_openai() -> None:
    from openai import _base_client

    sync_request = _base_client.SyncAPIClient.request
    async_original = _base_client.AsyncAPIClient.request

    def request(self: Any, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None) -> Any:
        seal = _active.get()
        if seal is None:
            return sync_request(self, cast_to, options, stream=stream, stream_cls=stream_cls)
        return _through_model_layer(seal, self, options, cast_to, stream_cls if stream else None)

    async def async_request(
        self: Any, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None
    ) -> Any:
        seal = _active.get()
        if seal is None:
            return await async_original(self, cast_to, options, stream=stream, stream_cls=stream_cls)
        from asgiref.sync import sync_to_async

        answer = await sync_to_async(_through_model_layer, thread_sensitive=True)(
            seal, self, options, cast_to, stream_cls if stream else None
        )
        # A stream is processed by the async client itself (agenthost/llm/streams.py): awaited here, on its loop.
        return await answer if inspect.isawaitable(answer) else answer

    _base_client.SyncAPIClient.request = request  # type: ignore[method-assign]
    _base_client.AsyncAPIClient.request = async_request  # type: ignore[method-assign]


def _through_model_layer(seal: CaseSeal, client: Any, options: Any, cast_to: Any, stream_cls: Any) -> Any:
    """A request of an openai client the team's code made itself, inside a sealed turn: chat completions and the
    Responses API through the model layer — a streamed one (`stream_cls`) answered whole and handed back as the events
    the API streams for it (agenthost/llm/streams.py) — anything else refused."""
    from openai import NotGiven

    from agenthost.llm.responses import as_response, is_responses, request_body
    from agenthost.llm.streams import as_stream, chat_chunks, response_events, unstreamed

    path = "/" + str(options.url).split("?", 1)[0].strip("/")
    method = str(options.method).upper()
    endpoint = f"{method} {path}"
    body = request_body(options)
    if method == "POST" and path.endswith("/chat/completions") and seal.answer_chat is not None:
        completion = seal.answer_chat(unstreamed(body))
        if stream_cls is not None:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return as_stream(chat_chunks(completion.model_dump(mode="json"), include_usage=include_usage),
                             client=client, options=options, cast_to=cast_to, stream_cls=stream_cls)
        parser = options.post_parser
        return completion if isinstance(parser, NotGiven) else parser(completion)
    if is_responses(options) and seal.answer_responses is not None:
        try:
            # Unstreamed, the body goes as built (a `stream: false` spelled out included), as the runtimes send it.
            payload = seal.answer_responses(unstreamed(body) if stream_cls is not None else body)
        except TypeError as exc:
            # A field the model layer cannot carry: refused like any request that does not go through it.
            raise SealRefused(seal.refuse(
                f"the agent's code called the OpenAI API ({endpoint}) through its own openai client while the case "
                f"ran: refused, nothing was sent — {exc}"
            )) from None
        if stream_cls is not None:
            return as_stream(response_events(payload), client=client, options=options, cast_to=cast_to,
                             stream_cls=stream_cls)
        return as_response(payload, cast_to, options)
    what = (
        "the Responses API beyond responses.create (client.responses)" if "/responses/" in path
        else "an endpoint agenttest's model layer does not carry"
    )
    raise SealRefused(seal.refuse(
        f"the agent's code called the OpenAI API ({endpoint}: {what}) through its own openai client while the case "
        "ran: refused, nothing was sent — under test every model call goes through agenttest's model layer, which "
        "carries chat.completions and responses.create, streamed or not"
    ))
