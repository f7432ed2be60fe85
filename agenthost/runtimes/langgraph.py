"""The `langgraph` runtime: the team's LangGraph graph runs with LangGraph's own loop, `entry: "shop.graph:graph"`
naming a compiled graph (a `CompiledStateGraph`, what `langchain.agents.create_agent` and
`langgraph.prebuilt.create_react_agent` return) or a zero-argument factory returning one.

- State: a messages-state graph (`{"messages": [...]}`), or one naming other keys for the user's message and the
  reply in its config's metadata, `graph.with_config(metadata={"agenttest": {"message": "question", "reply":
  "answer"}})` (`_keys`): what only the graph's code knows is said on the graph, as no agent-file field. Each
  conversation is one LangGraph thread, on the graph's own checkpointer or, for a graph compiled without one, an
  in-memory one of this process per conversation: a turn whose thread already holds the conversation sends only the
  user's new message; one whose thread is new (the first turn, or a chat turn in a fresh child process) sends the
  conversation so far (the latest message alone to a key of another name, as text), and the keys of the
  conversation's state (under test the case's `initial_state`) the graph has channels for. The answer is the reply
  key's value: the text of its last message, text as it is.
- Interrupts: a turn that ends on the graph's `interrupt(value)` answers with the value (text as it is, anything else
  as JSON); the next turn resumes the thread with the user's message, `Command(resume=text)`. A graph on the in-memory
  checkpointer keeps its paused thread in the conversation's state (`PAUSED_KEY`, `_paused_thread`), so that a chat
  turn in a fresh child process resumes it too; the key is cleared by the turn that resumes it.
- Nodes: the nodes each turn started, in order (a subgraph's as "parent/node"; a node an interrupt stopped, and one
  a resumed turn runs again, included), are the turn's `nodes_visited` (TurnResult), from the graph's own stream of
  tasks: what the `nodesVisited` assertion checks. The subgraphs a turn entered are added to its agent chain (by their
  node's path, "refund", "support/refund"), so `routedToAgent` and `agentChain` see a graph's sub-agents; the model
  and tool calls made inside a subgraph are made as its agent (`_calling_agent`), and a node's `Command(goto=…)` to
  another node is a hand-off, recorded as routing (`_Gotos`, `RuntimeTurn.record_routing`: "goto_<node>").
- Model calls: while a turn runs, every request of an openai client in the turn's context — the graph's `ChatOpenAI`
  (sync or async, chat completions or the Responses API, `with_raw_response` as it uses it), a client the team's
  code made itself — is built by the openai SDK exactly as it would be sent, its body taken from the request the SDK
  built, and answered through the turn's model layer (runtimes/python.chat_completion, runtimes/responses.
  responses_create: record, replay with stale detection, model override, budgets, deadlines); the answer is handed
  back to the SDK as the server's response, so the SDK parses it as its own. The openai SDK's base clients are
  patched once per process, outermost (over the case seal's patch, agenthost/seal.py), a no-op outside a turn. A
  streamed call (`streaming=True`, `stream`/`astream`, a graph streamed with `stream_mode="messages"`) is asked of
  the model layer as ChatOpenAI sends it unstreamed (`_unstreamed`) and its whole answer handed back to the SDK as
  the chunks or events the API streams for it (agenthost/llm/streams.py), so LangChain reads its own stream.
  A chat model not built on the openai SDK (another vendor's, a fake) cannot be answered so: under test its
  call is refused naming its class (`BaseChatModel`'s generate/agenerate/stream/astream), before it sends anything.
- Tools: routed at LangChain's single tool-invocation point, not by discovery: while a turn runs, every
  `BaseTool.run` / `BaseTool.arun` in the turn's context — a `ToolNode`'s tools (what `create_agent` runs), a tool a
  node invokes itself, `@tool` functions, `StructuredTool`s, tools bound per call — goes through the
  function-executor factory, LangChain's own run of the tool being the implementation, run only when nothing under
  test answers. A mocked call returns what the tool would (a `ToolMessage` for a model's call, the text otherwise).
  Discovery (the `ToolNode`s of the graph and its subgraphs) is for declaring the tools before the run.

LangGraph runs nodes on its own threads and event loop; Django's ORM and the conversation are the calling thread's.
The graph runs on a thread of its own (its context copied: the routing and the case seal follow it), and everything
that touches the conversation — model calls, tool calls — is handed back to the calling thread (`_Home`).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextvars
import functools
import inspect
import json
import platform
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from agenthost import seal
from agenthost.functions import FunctionContext, FunctionResult, declared_effects
from agenthost.llm.streams import as_stream, chat_chunks, response_events, unstreamed
from agenthost.redaction import redact_text
from agenthost.runtimes.base import (
    RETURNS,
    Runtime,
    RuntimeTurn,
    register_runtime,
    return_schema,
    zero_argument_factory,
)
from agenthost.runtimes.python import chat_completion
from agenthost.runtimes.responses import responses_create

NEEDS = "runtime 'langgraph' needs LangGraph: pip install 'agenttest[langgraph]'"
# In-memory threads of graphs compiled without a checkpointer, by conversation: the most recent ones of this process.
_THREADS_KEPT = 256
# The conversation's state key holding a paused thread of a graph on the in-memory checkpointer (see the docstring).
PAUSED_KEY = "langgraph_paused_thread"


def _pregel() -> type:
    from langgraph.pregel import Pregel

    return Pregel


class _Home:
    """The calling thread, serving what the graph's threads hand it (model and tool calls) until the graph is done."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )

    def submit(self, work: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if threading.get_ident() == self.thread:
            _settle(future, work)
        else:
            self._queue.put((future, work))
        return future

    def call(self, work: Callable[[], Any]) -> Any:
        return self.submit(work).result()

    def serve(self, done: concurrent.futures.Future[Any]) -> None:
        # The graph's end wakes the calling thread as a call does.
        done.add_done_callback(lambda _: self._queue.put(None))
        while (item := self._queue.get()) is not None:
            future, work = item
            if future.set_running_or_notify_cancel():
                _settle(future, work)


def _settle(future: concurrent.futures.Future[Any], work: Callable[[], Any]) -> None:
    try:
        future.set_result(work())
    except BaseException as exc:  # TurnStopped too: it goes back to the graph's thread that asked
        future.set_exception(exc)


class _Routing:
    """One turn's routing, in a context variable for the whole of the graph's run (its threads and tasks copy it)."""

    def __init__(self, turn: RuntimeTurn, home: _Home) -> None:
        self.turn = turn
        self.home = home

    def answer(self, method: str, path: str, body: dict[str, Any], agent: str) -> dict[str, Any]:
        """An openai SDK request's body answered through the turn's model layer, as the server's JSON, made as
        `agent` (a subgraph's path, "" for the graph's own). On the calling thread."""
        token = _routing.set(None)  # the model layer's own openai client goes to its provider
        try:
            return self._answer(method, path, body, agent)
        finally:
            _routing.reset(token)

    def _answer(self, method: str, path: str, body: dict[str, Any], agent: str) -> dict[str, Any]:
        endpoint = f"{method} {path}"
        if method == "POST" and path.endswith("/chat/completions"):
            return chat_completion(self.turn, body, agent=agent).model_dump(mode="json", exclude_unset=True)
        if method == "POST" and path.endswith("/responses"):
            return responses_create(self.turn, body, agent=agent)
        self._refuse(f"{endpoint}, an endpoint agenttest's model layer does not carry (it carries chat.completions "
                     "and responses.create)")

    def _refuse(self, what: str) -> NoReturn:
        message = f"the graph called the OpenAI API through an openai client: refused, nothing was sent — {what}"
        case = self.turn.session.case
        if case is not None:
            raise seal.SealRefused(case.refuse(message))
        raise TypeError(message)

    def refuse_chat_model(self, model: Any) -> None:
        """Under test, a chat model the model layer cannot answer for is refused by its class (the case seal's rule
        for another vendor's client); in chat it runs as the team wrote it. On the graph's thread (the seal is)."""
        case = self.turn.session.case
        if case is None:
            return
        kind = type(model)
        raise seal.SealRefused(case.refuse(
            f"the graph called a chat model of another vendor, {kind.__name__} ({kind.__module__}): refused, nothing "
            "was sent — under agenttest a graph's model calls go through the model layer, which carries chat models "
            "built on the openai SDK (ChatOpenAI, AzureChatOpenAI and other BaseChatOpenAI models)"
        ))

    def call_tool(self, tool: Any, tool_input: Any, tool_call_id: str | None, run: Callable[[], Any]) -> Any:
        """One run of LangChain tool `tool` through the function-executor factory; `run` is LangChain's own run of
        it. On the graph's thread: the call itself is made on the calling thread."""
        produced: list[Any] = []
        raised: list[BaseException] = []

        def implementation(_context: FunctionContext) -> FunctionResult:
            # LangChain's own run of the team's tool (its validation, callbacks, error handling): only here, when
            # nothing under test answered. What it lets through is raised again into the graph, as alone.
            try:
                output = run()
            except Exception as exc:
                raised.append(exc)
                self.turn.note_tool_raised(tool.name, exc)
                return FunctionResult(content=f"{type(exc).__name__}: {exc}", error=True)
            produced.append(output)
            return FunctionResult(content=_content(output), error=getattr(output, "status", "") == "error")

        arguments = _arguments(tool, tool_input)
        agent = _calling_agent()
        result = self.home.call(lambda: self.turn.call_tool(
            name=tool.name, arguments=arguments, implementation=implementation, call_id=tool_call_id or "",
            team_tool=tool, agent=agent,
        ))
        if raised:
            raise raised[0]
        if produced:
            return produced[0]
        from langchain_core.tools.base import _format_output

        return _format_output(result.content, None, tool_call_id, tool.name, "error" if result.error else "success")


_routing: contextvars.ContextVar[_Routing | None] = contextvars.ContextVar("agenttest_langgraph_routing",
                                                                           default=None)
_install_lock = threading.Lock()
_installed = False


def _calling_agent() -> str:
    """The subgraph a model or tool call is made in, by its node's path as the turn's agent chain names it
    ("refund", "support/refund"), "" in the graph itself: from the checkpoint namespace of the task running, which
    LangGraph's config carries into everything the node calls ("refund:<task>|confirm:<task>")."""
    from langgraph.config import get_config

    try:
        namespace = str(get_config().get("configurable", {}).get("checkpoint_ns", ""))
    except RuntimeError:  # not inside a node's run (the canary's probe)
        return ""
    path = [part.split(":", 1)[0] for part in namespace.split("|") if part]
    return "/".join(path[:-1])


def _content(output: Any) -> str:
    """A tool's output as the text the model reads: a ToolMessage's content, text as it is, anything else as JSON."""
    from langchain_core.messages import ToolMessage

    if isinstance(output, ToolMessage):
        output = output.content
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output)
    except (TypeError, ValueError):
        return str(output)


def _arguments(tool: Any, tool_input: Any) -> dict[str, Any]:
    """The arguments the model (or the node) gave the tool, without what LangGraph injects (state, runtime, store)."""
    if isinstance(tool_input, str):
        names = list(tool.args)
        return {names[0] if len(names) == 1 else "input": tool_input}
    filtered = tool._filter_injected_args(tool_input) if isinstance(tool_input, dict) else {}
    arguments: dict[str, Any] = json.loads(json.dumps(filtered, default=str))
    return arguments


def _install() -> None:
    """Put the routing at the openai SDK's request and LangChain's tool run, once per process, over the case seal's
    patch of the same request. Outside a turn's context the patched functions are the originals."""
    global _installed
    seal.install()
    with _install_lock:
        if _installed:
            return
        _installed = True
    with seal.exempt():
        # LangChain's callbacks describe the platform (platform.platform(), which runs `uname -p` once per
        # process): done here, by agenttest, not as the team's code inside a sealed case.
        platform.platform()
    _patch_openai()
    _patch_chat_models()
    _patch_tools()


def _unstreamed(body: dict[str, Any]) -> dict[str, Any]:
    """A streamed request as the model layer is asked it: as ChatOpenAI sends it with streaming off — `stream`
    spelled out false, no `stream_options` — so a graph's recording holds whether it streams or not."""
    return {**unstreamed(body), "stream": False}


def _events(path: str, body: dict[str, Any], payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The model layer's whole answer to a streamed request as the events the API streams for it: chat-completion
    chunks (the usage last, when `stream_options.include_usage` asked for it — ChatOpenAI's `stream_usage`), or the
    Responses API's events."""
    if path.endswith("/chat/completions"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return chat_chunks(payload, include_usage=include_usage)
    return response_events(payload)


def _patch_openai() -> None:
    import httpx2
    from openai import _base_client
    from openai._compat import model_copy

    sync_request = _base_client.SyncAPIClient.request
    async_request = _base_client.AsyncAPIClient.request

    def built(client: Any, options: Any) -> tuple[Any, str, str, dict[str, Any]]:
        request = client._build_request(options)
        path = "/" + str(request.url.path).strip("/")
        body = json.loads(request.content or b"{}")
        return request, str(request.method).upper(), path, body

    def request(self: Any, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None) -> Any:
        routing = _routing.get()
        if routing is None:
            return sync_request(self, cast_to, options, stream=stream, stream_cls=stream_cls)
        options = self._prepare_options(model_copy(options))
        http_request, method, path, body = built(self, options)
        agent = _calling_agent()
        payload = routing.home.call(lambda: routing.answer(method, path, _unstreamed(body) if stream else body, agent))
        if stream:
            return as_stream(_events(path, body, payload), client=self, options=options,
                             cast_to=self._maybe_override_cast_to(cast_to, options), stream_cls=stream_cls)
        return self._process_response(
            cast_to=self._maybe_override_cast_to(cast_to, options), options=options, stream=stream,
            stream_cls=stream_cls, response=httpx2.Response(200, json=payload, request=http_request),
        )

    async def arequest(self: Any, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None) -> Any:
        routing = _routing.get()
        if routing is None:
            return await async_request(self, cast_to, options, stream=stream, stream_cls=stream_cls)
        options = await self._prepare_options(model_copy(options))
        http_request, method, path, body = built(self, options)
        agent = _calling_agent()
        payload = await asyncio.wrap_future(
            routing.home.submit(lambda: routing.answer(method, path, _unstreamed(body) if stream else body, agent))
        )
        if stream:
            return await as_stream(_events(path, body, payload), client=self, options=options,
                                   cast_to=self._maybe_override_cast_to(cast_to, options), stream_cls=stream_cls)
        return await self._process_response(
            cast_to=self._maybe_override_cast_to(cast_to, options), options=options, stream=stream,
            stream_cls=stream_cls, response=httpx2.Response(200, json=payload, request=http_request),
        )

    _base_client.SyncAPIClient.request = request  # type: ignore[method-assign]
    _base_client.AsyncAPIClient.request = arequest  # type: ignore[method-assign]


def _patch_chat_models() -> None:
    """A chat model not built on the openai SDK (another vendor's, a fake) would answer the graph from outside the
    model layer: under test its call is refused, naming its class, before it sends anything; in chat it runs."""
    from langchain_core.language_models import BaseChatModel

    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:  # langgraph without langchain-openai: no chat model of the graph's is over the openai SDK
        openai_models: tuple[type, ...] = ()
    else:
        openai_models = (BaseChatOpenAI,)

    def check(model: Any) -> None:
        routing = _routing.get()
        if routing is not None and not isinstance(model, openai_models):
            routing.refuse_chat_model(model)

    def guarded(original: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(original):
            @functools.wraps(original)
            async def acall(self: Any, *args: Any, **kwargs: Any) -> Any:
                check(self)
                return await original(self, *args, **kwargs)

            return acall

        @functools.wraps(original)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            check(self)
            return original(self, *args, **kwargs)

        return call

    # Every call of a chat model comes through one of these: invoke/batch through generate, ainvoke/abatch through
    # agenerate; stream and astream call the model's _stream/_astream themselves.
    for name in ("generate", "agenerate", "stream", "astream"):
        setattr(BaseChatModel, name, guarded(getattr(BaseChatModel, name)))


def _patch_tools() -> None:
    from langchain_core.tools import BaseTool

    original_run = BaseTool.run
    original_arun = BaseTool.arun

    def run(self: Any, tool_input: Any, *args: Any, tool_call_id: str | None = None, **kwargs: Any) -> Any:
        routing = _routing.get()
        if routing is None:
            return original_run(self, tool_input, *args, tool_call_id=tool_call_id, **kwargs)
        return routing.call_tool(
            self, tool_input, tool_call_id,
            lambda: original_run(self, tool_input, *args, tool_call_id=tool_call_id, **kwargs),
        )

    async def arun(self: Any, tool_input: Any, *args: Any, tool_call_id: str | None = None, **kwargs: Any) -> Any:
        routing = _routing.get()
        if routing is None:
            return await original_arun(self, tool_input, *args, tool_call_id=tool_call_id, **kwargs)
        loop = asyncio.get_running_loop()

        def on_the_graphs_loop() -> Any:
            # LangChain's own async run, on the graph's event loop (free meanwhile: it awaits this call).
            return asyncio.run_coroutine_threadsafe(
                original_arun(self, tool_input, *args, tool_call_id=tool_call_id, **kwargs), loop
            ).result()

        return await loop.run_in_executor(
            None, contextvars.copy_context().run, routing.call_tool, self, tool_input, tool_call_id,
            on_the_graphs_loop,
        )

    BaseTool.run = run  # type: ignore[method-assign]
    BaseTool.arun = arun  # type: ignore[method-assign]


@contextmanager
def _routed(routing: _Routing) -> Iterator[None]:
    _install()
    token = _routing.set(routing)
    try:
        yield
    finally:
        _routing.reset(token)


def _tool_nodes(graph: Any) -> Iterator[tuple[str, Any]]:
    """The `ToolNode`s of the graph and of its subgraphs, with the node's name."""
    from langgraph.prebuilt import ToolNode

    graphs = [graph]
    try:
        graphs.extend(subgraph for _, subgraph in graph.get_subgraphs(recurse=True))
    except Exception:  # a subgraph built inside a node's function is not known before it runs
        pass
    for each in graphs:
        for name, node in each.nodes.items():
            if isinstance(node.bound, ToolNode):
                yield name, node.bound


def _declarations(graph: Any) -> list[dict[str, Any]]:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    declarations: dict[str, dict[str, Any]] = {}
    for _, tool_node in _tool_nodes(graph):
        for name, tool in tool_node.tools_by_name.items():
            function = convert_to_openai_tool(tool)["function"]
            declared = declarations.setdefault(name, {
                "name": name, "description": function.get("description", ""),
                "parameters": function.get("parameters", {}),
            })
            if (by_plugin := declared_effects(tool)) is not None:
                declared["outside_effects"] = by_plugin
            func = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
            if func is not None and (returns := return_schema(func)) is not None:
                declared[RETURNS] = returns
    return list(declarations.values())


class _Threads:
    """In-memory checkpointers of graphs compiled without one, by conversation (the most recent of the process)."""

    def __init__(self) -> None:
        self._savers: OrderedDict[int, Any] = OrderedDict()
        self._lock = threading.Lock()

    def saver(self, conversation_id: int) -> Any:
        from langgraph.checkpoint.memory import InMemorySaver

        with self._lock:
            saver = self._savers.pop(conversation_id, None) or InMemorySaver()
            self._savers[conversation_id] = saver
            while len(self._savers) > _THREADS_KEPT:
                self._savers.popitem(last=False)
            return saver


_threads = _Threads()


def _paused_thread(saver: Any, config: dict[str, Any]) -> dict[str, Any] | None:
    """The thread's latest checkpoint of each namespace (the graph's and each paused subgraph's) with its pending
    writes (the interrupts), as LangGraph's own serializer writes them, for the conversation's state; None when the
    thread holds anything redaction would hide (the state is stored as it is given here, and a checkpoint of the
    conversation's messages must not keep what their stored copy does not)."""
    latest: dict[str, Any] = {}
    for each in saver.list(config):  # newest first
        latest.setdefault(each.config["configurable"]["checkpoint_ns"], each)
    # Messages and interrupts by their repr, which holds their text.
    view = json.dumps([[each.checkpoint["channel_values"], each.pending_writes] for each in latest.values()],
                      default=repr, ensure_ascii=False)
    if redact_text(view) != view:
        return None

    def typed(value: Any) -> list[str]:
        kind, data = saver.serde.dumps_typed(value)
        return [kind, base64.b64encode(data).decode()]

    return {"namespaces": [
        {"ns": ns, "parent": (each.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
         "checkpoint": typed(each.checkpoint), "metadata": typed(each.metadata),
         "writes": [[task, channel, typed(value)] for task, channel, value in each.pending_writes]}
        for ns, each in latest.items()
    ]}


def _thread_restore(saver: Any, config: dict[str, Any], paused: dict[str, Any]) -> None:
    """Put a thread `_paused_thread` wrote back into an empty in-memory checkpointer."""
    def value(typed: list[str]) -> Any:
        return saver.serde.loads_typed((typed[0], base64.b64decode(typed[1])))

    thread = config["configurable"]["thread_id"]
    for namespace in paused["namespaces"]:
        at = {"thread_id": thread, "checkpoint_ns": namespace["ns"]}
        if namespace["parent"]:
            at["checkpoint_id"] = namespace["parent"]
        checkpoint = value(namespace["checkpoint"])
        stored = saver.put({"configurable": at}, checkpoint, value(namespace["metadata"]),
                           checkpoint["channel_versions"])
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task, channel, written in namespace["writes"]:
            by_task.setdefault(task, []).append((channel, value(written)))
        for task, writes in by_task.items():
            saver.put_writes(stored, writes, task)


def _text(message: Any) -> str:
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part if isinstance(part, str) else str(part.get("text", "")) if isinstance(part, dict) else ""
            for part in content
        )
    return json.dumps(content, default=str)


def _reply(value: Any) -> str:
    """The reply key's value as text: a list of messages by its last one's text, anything else as `_text` shows it."""
    if isinstance(value, list):
        return _text(value[-1]) if value else ""
    return "" if value is None else _text(value)


def _keys(graph: Any) -> tuple[str, str] | str:
    """The state keys of the user's message and of the reply: ("messages", "messages") unless the graph's config
    metadata names others (see the module's docstring); a text saying what is wrong with what it names."""
    named = ((getattr(graph, "config", None) or {}).get("metadata") or {}).get("agenttest")
    if named is None:
        return "messages", "messages"
    how = 'with_config(metadata={"agenttest": {"message": "<state key>", "reply": "<state key>"}})'
    if not isinstance(named, dict) or set(named) - {"message", "reply"}:
        return f"the graph's metadata \"agenttest\" must be {{\"message\": …, \"reply\": …}}: {how}"
    channels = set(getattr(graph, "channels", {}) or {})
    keys = (named.get("message", "messages"), named.get("reply", "messages"))
    for role, key in zip(("message", "reply"), keys, strict=True):
        if not isinstance(key, str) or key not in channels:
            known = ", ".join(sorted(each for each in channels if not each.startswith(("__", "branch:"))))
            return f"the graph's metadata \"agenttest\" names {role} key {key!r}, not a key of its state ({known})"
    return keys


def _interrupt_text(interrupts: Any) -> str:
    values = [getattr(each, "value", each) for each in interrupts]
    shown = [value if isinstance(value, str) else json.dumps(value, default=str) for value in values]
    return "\n".join(shown)


class _Gotos:
    """Which node started because another one returned `Command(goto=…)`, from the graph's stream of tasks: a node
    that declares where its Commands go (its `destinations`, or its return annotation `Command[Literal[...]]`) ended
    in the step before, the started node is one of those, and no edge of the graph's leads there from it."""

    def __init__(self, graph: Any) -> None:
        self._graph = graph
        self._ended: dict[tuple[str, ...], list[str]] = {}  # the nodes of the step running, by graph
        self._before: dict[tuple[str, ...], list[str]] = {}  # those of the step before
        self._builders: dict[tuple[str, ...], Any] = {}

    def ended(self, path: list[str], node: str) -> None:
        self._ended.setdefault(tuple(path), []).append(node)

    def started(self, path: list[str], node: str) -> bool:
        """Whether a node's Command started `node`."""
        key = tuple(path)
        if self._ended.get(key):
            self._before[key] = self._ended.pop(key)
        builder = self._builder(key)
        if builder is None:
            return False
        return any(
            node in (getattr(builder.nodes.get(source), "ends", None) or ()) and (source, node) not in builder.edges
            for source in self._before.get(key, [])
        )

    def _builder(self, key: tuple[str, ...]) -> Any:
        if key not in self._builders:
            graph = self._graph
            if key:
                try:
                    graph = dict(self._graph.get_subgraphs(namespace="|".join(key), recurse=True)).get("|".join(key))
                except Exception:  # a subgraph built inside a node's function is not known to the graph
                    graph = None
            self._builders[key] = getattr(graph, "builder", None)
        return self._builders[key]


class LangGraphRuntime(Runtime):
    name = "langgraph"
    framework_modules = (
        "langgraph.pregel", "langgraph.graph", "langgraph.prebuilt", "langchain_core.messages", "langchain_openai",
    )

    def _graph(self, target: Any) -> Any:
        graph = target if isinstance(target, _pregel()) else target()
        if not isinstance(graph, _pregel()):
            raise TypeError(f"the entry point's factory returned a {type(graph).__name__}, not a compiled graph")
        return graph

    def entry_problem(self, target: Any, entry: str) -> str:
        try:
            pregel = _pregel()
            from langgraph.graph import StateGraph
        except ImportError:
            return NEEDS
        if isinstance(target, pregel):
            keys = _keys(target)
            return f"entry point {entry!r}: {keys}" if isinstance(keys, str) else ""
        if isinstance(target, StateGraph):
            return f"entry point {entry!r} is a StateGraph that is not compiled: name the graph its .compile() returns"
        if zero_argument_factory(target):
            return ""
        return (f"entry point {entry!r} must be a compiled LangGraph graph (what StateGraph.compile() or "
                "create_agent return) or a zero-argument function returning one")

    def tool_declarations(self, target: Any) -> list[dict[str, Any]]:
        return _declarations(self._graph(target))

    def _threaded(self, turn: RuntimeTurn, graph: Any) -> tuple[Any, dict[str, Any], Any]:
        """The graph on the conversation's thread: its own checkpointer, else this process's in-memory one (the
        third value; None for the graph's own), holding the thread the conversation's state kept paused if this
        process has not run the thread yet (a chat turn in a fresh child process)."""
        from langgraph.checkpoint.base import BaseCheckpointSaver

        config = {"configurable": {"thread_id": f"agenttest-{turn.conversation_id}"}}
        if isinstance(graph.checkpointer, BaseCheckpointSaver):
            return graph, config, None
        saver = _threads.saver(turn.conversation_id)
        paused = turn.session.state.get(PAUSED_KEY)
        if isinstance(paused, dict) and saver.get_tuple(config) is None:
            _thread_restore(saver, config, paused)
        return graph.copy(update={"checkpointer": saver}), config, saver

    def _keep_paused(self, turn: RuntimeTurn, saver: Any, config: dict[str, Any], interrupted: bool) -> None:
        """The in-memory thread kept in the conversation's state while it waits for the user, cleared once not."""
        if saver is None:
            return
        paused = _paused_thread(saver, config) if interrupted else None
        if paused is not None or turn.session.state.get(PAUSED_KEY) is not None:
            turn.session.write_state({PAUSED_KEY: paused}, None)

    def run_turn(self, turn: RuntimeTurn, target: Any) -> str:
        from langchain_core.messages import HumanMessage, convert_to_messages
        from langgraph.types import Command

        graph = self._graph(target)
        keys = _keys(graph)
        if isinstance(keys, str):
            raise TypeError(f"the graph the entry point's factory returned: {keys}")
        message_key, reply_key = keys
        graph, config, saver = self._threaded(turn, graph)
        # Read here, on the calling thread: the graph's threads never touch the ORM.
        history = turn.messages()
        text = str(history[-1]["content"]) if history else ""
        state = {key: value for key, value in turn.session.state.items() if key != PAUSED_KEY}
        home = _Home()
        routing = _Routing(turn, home)
        nodes: list[str] = []
        subgraphs: list[str] = []
        interrupted: list[Any] = []
        gotos = _Gotos(graph)

        async def run() -> str:
            snapshot = await graph.aget_state(config)
            if snapshot.interrupts:
                # The graph asked the user (interrupt): this turn's message is the answer it waits for.
                given: Any = Command(resume=text)
            elif snapshot.values.get(message_key):
                given = {message_key: [HumanMessage(text)] if message_key == "messages" else text}
            else:
                channels = set(getattr(graph, "channels", {}) or {})
                given = {key: value for key, value in state.items() if key in channels and key != message_key}
                # A key of another name holds the user's message as text: the conversation so far is the thread's.
                given[message_key] = convert_to_messages(history) if message_key == "messages" else text
            chunks = graph.astream(given, config, stream_mode=["tasks", "updates"], subgraphs=True)
            async for namespace, mode, data in chunks:
                if mode == "tasks":
                    path = [part.split(":", 1)[0] for part in namespace]
                    if "input" not in data:  # a node's end
                        gotos.ended(path, data["name"])
                        continue
                    # A node starting: visited, interrupted or not.
                    nodes.append("/".join([*path, data["name"]]))
                    if path and "/".join(path) not in subgraphs:
                        subgraphs.append("/".join(path))
                    if gotos.started(path, data["name"]):
                        # A Command(goto=…) hand-off, recorded as routing (by the graph it was made in) as a
                        # framework's hand-off is: routedToAgent sees it.
                        await asyncio.wrap_future(home.submit(functools.partial(
                            turn.record_routing, from_agent="/".join(path) or turn.loaded.name,
                            to_agent="/".join([*path, data["name"]]), name=f"goto_{data['name']}",
                        )))
                    continue
                # A subgraph's interrupt comes up through each graph above it: once each.
                interrupted.extend(each for each in (data or {}).get("__interrupt__", ()) if each not in interrupted)
            if interrupted:
                return _interrupt_text(interrupted)
            final = await graph.aget_state(config)
            return _reply(final.values.get(reply_key))

        done: concurrent.futures.Future[str] = concurrent.futures.Future()

        def drive() -> None:
            _settle(done, lambda: asyncio.run(run()))

        with _routed(routing):
            context = contextvars.copy_context()
            threading.Thread(target=context.run, args=(drive,), name="agenttest-langgraph", daemon=True).start()
            home.serve(done)
        if done.exception() is None:
            self._keep_paused(turn, saver, config, bool(interrupted))
        turn.result.nodes_visited.extend(nodes)
        # A subgraph is an agent of the graph's (a create_agent agent as a node, a team's sub-agent): the turn was
        # routed to it, as routedToAgent and agentChain read the turn.
        turn.result.agent_chain.extend(name for name in subgraphs if name not in turn.result.agent_chain)
        return done.result()

    def invoke(self, turn: RuntimeTurn, target: Any, name: str, arguments: dict[str, Any]) -> FunctionResult:
        from langchain_core.tools import StructuredTool

        def stand_in(**_arguments: Any) -> str:
            return f"[{name} ran outside agenttest's seam]"

        probe = StructuredTool.from_function(
            func=stand_in, name=name, description="agenttest's canary",
            args_schema={"type": "object", "properties": {}, "additionalProperties": True},
        )
        with _routed(_Routing(turn, _Home())):
            # The very run LangChain makes for every tool: the canary proves the routing is in place.
            return FunctionResult(content=_content(probe.run(arguments)))


register_runtime(LangGraphRuntime())
