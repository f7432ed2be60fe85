"""The MCP client side: one supervised background event loop per process holding one session per configured server.

The host is synchronous Django code; the SDK is async and its transports are context managers that must be entered
and left in one task. So each server's session lives in a holder task on the loop thread, and the sync side submits
coroutines to that loop (`asyncio.run_coroutine_threadsafe`) and waits on them with a bound.

- started on first use: nothing is spawned or contacted until a call or a tools/list needs the server;
- restarted after a crash: a holder watches its transport; when the stream ends (the process exited, the HTTP
  session broke) the session is dropped and the next use starts a new one. A call in flight when it breaks fails
  with a clear error — it is never retried, since the server may have acted on it;
- stopped at exit: `shutdown()` (registered with atexit) closes every session, which ends stdio processes (stdin
  closed, then terminated). A process killed outright leaves no orphan either: its servers read EOF on stdin and exit;
- a forked child (a prefork worker) never shares its parent's loop: the supervisor belongs to the process that made it.

Every failure becomes McpCallFailed with a sentence for the model; nothing here raises anything else to the host.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

# How much longer the sync side waits than the server's own timeouts before it gives up on the loop itself.
_MARGIN = 5.0
_STOP_SECONDS = 5.0
# What a stdio server that dies at start is reported with: the last lines it wrote to stderr.
_STDERR_LINES = 10
_STDERR_CHARS = 1000
# How long a failed start waits for the dead server's last stderr lines to arrive.
_STDERR_WAIT = 1.0


class McpCallFailed(Exception):
    """A call or listing that did not give an answer: the server is not configured, could not start, crashed, hung."""


@dataclass(frozen=True)
class CallAnswer:
    text: str
    is_error: bool


def server_spec(server: str) -> dict[str, Any]:
    servers = settings.AGENTTEST_MCP_SERVERS
    spec = servers.get(server)
    if spec is None:
        configured = ", ".join(sorted(servers)) or "none"
        raise McpCallFailed(f"MCP server {server!r} is not configured (configured: {configured}; AGENTTEST_MCP_FILE)")
    return spec


def _from_environment(server: str, field: str, names: dict[str, str]) -> dict[str, str]:
    values = {}
    for key, variable in names.items():
        value = os.environ.get(variable)
        if value is None:
            raise McpCallFailed(f"MCP server {server!r}: {field}.{key} names the environment variable {variable}, "
                                "which is not set")
        values[key] = value
    return values


def _errlog() -> Any:
    # The server's stderr goes to ours, where its own logs belong; a test runner's captured stream has no file.
    stream = sys.__stderr__
    try:
        if stream is not None:
            stream.fileno()
            return stream
    except (OSError, ValueError):
        pass
    return open(os.devnull, "w")  # noqa: SIM115 — lives as long as the process


class _ServerStderr:
    """A stdio server's stderr: passed on to ours as it comes (where the server's own logs belong), its last lines
    kept, so that a server that dies at start is reported with what it said."""

    def __init__(self, server: str) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")
        self._lines: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self._ended = threading.Event()
        threading.Thread(target=self._pump, args=(read_fd,), name=f"mcp-stderr-{server}", daemon=True).start()

    def _pump(self, read_fd: int) -> None:
        out = _errlog()
        try:
            with os.fdopen(read_fd, "rb") as stream:
                for raw in stream:
                    line = raw.decode(errors="replace")
                    self._lines.append(line.rstrip())
                    with contextlib.suppress(OSError, ValueError):
                        out.write(line)
                        out.flush()
        finally:
            self._ended.set()

    def spawned(self) -> None:
        """The server process holds its own end of the pipe now (or was never started): ours is closed, so the pump
        ends when the process does."""
        with contextlib.suppress(OSError):
            self.writer.close()

    async def tail(self) -> str:
        """The last lines the server wrote, once it has ended (waiting a moment for them)."""
        self.spawned()
        deadline = time.monotonic() + _STDERR_WAIT
        while not self._ended.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        text = " | ".join(line for line in self._lines if line.strip())
        return text if len(text) <= _STDERR_CHARS else "…" + text[-_STDERR_CHARS:]


class _Connection:
    """One server's session, owned by its holder task on the supervisor's loop."""

    def __init__(self, server: str, spec: dict[str, Any]) -> None:
        self.server = server
        self.spec = spec
        self.session: Any = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._stderr: _ServerStderr | None = None

    @property
    def alive(self) -> bool:
        return self.session is not None and self._stop is not None and not self._stop.is_set()

    async def ensure(self) -> Any:
        async with self._lock:
            if self.alive:
                return self.session
            await self.close()
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[Any] = loop.create_future()
            self._stop = asyncio.Event()
            self._task = loop.create_task(self._hold(ready, self._stop), name=f"mcp-{self.server}")
            try:
                return await asyncio.wait_for(asyncio.shield(ready), self.spec["connect_timeout"])
            except TimeoutError:
                await self.close()
                raise McpCallFailed(
                    f"MCP server {self.server!r} did not start within {self.spec['connect_timeout']:g} s"
                ) from None

    async def _hold(self, ready: asyncio.Future[Any], stop: asyncio.Event) -> None:
        import anyio
        from mcp import ClientSession

        self._stderr = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                try:
                    read, write = await stack.enter_async_context(self._transport())
                finally:
                    if self._stderr is not None:
                        self._stderr.spawned()
                inner_send, inner_read = anyio.create_memory_object_stream[Any](0)
                group = await stack.enter_async_context(anyio.create_task_group())

                async def pump() -> None:
                    # The transport's stream ending is how a crash shows: mark the session dead at once, so the next
                    # use starts a new one instead of writing into a closed pipe.
                    try:
                        async with inner_send:
                            async for message in read:
                                await inner_send.send(message)
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                        pass
                    finally:
                        stop.set()

                group.start_soon(pump)
                session = await stack.enter_async_context(ClientSession(inner_read, write))
                await session.initialize()
                self.session = session
                if not ready.done():
                    ready.set_result(session)
                await stop.wait()
                self.session = None
                group.cancel_scope.cancel()
        except BaseException as exc:  # noqa: BLE001 — whatever ended the session, the caller gets a sentence
            if not ready.done():
                stderr = None if isinstance(exc, asyncio.CancelledError) else self._stderr
                said = await stderr.tail() if stderr is not None else ""
                said = f"; its stderr ended with: {said}" if said else ""
                ready.set_exception(
                    McpCallFailed(f"MCP server {self.server!r} could not be started: {_describe(exc)}{said}")
                )
            if isinstance(exc, asyncio.CancelledError):
                raise
            logger.warning("MCP server %s: session ended: %s", self.server, _describe(exc))
        finally:
            self.session = None
            stop.set()

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        spec = self.spec
        if spec["transport"] == "stdio":
            from mcp import StdioServerParameters, stdio_client

            env = {**spec["env"], **_from_environment(self.server, "env_from", spec["env_from"])}
            parameters = StdioServerParameters(
                command=spec["command"], args=spec["args"], env=env or None, cwd=spec["cwd"] or None
            )
            self._stderr = _ServerStderr(self.server)
            return stdio_client(parameters, errlog=self._stderr.writer)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        headers = _from_environment(self.server, "headers_from", spec["headers_from"])
        timeout = httpx2.Timeout(spec["connect_timeout"], read=max(spec["call_timeout"], spec["connect_timeout"]))
        client = httpx2.AsyncClient(headers=headers, timeout=timeout)
        return _owning(client, streamable_http_client(spec["url"], http_client=client))

    async def close(self) -> None:
        if self._stop is not None:
            self._stop.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(task, _STOP_SECONDS)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
        self.session = None

    async def list_tools(self) -> list[dict[str, Any]]:
        from mcp.types import PaginatedRequestParams

        session = await self.ensure()
        tools: list[dict[str, Any]] = []
        cursor = None
        try:
            async with asyncio.timeout(self.spec["call_timeout"]):
                while True:
                    page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                    tools.extend(tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        return tools
        except TimeoutError:
            raise McpCallFailed(
                f"MCP server {self.server!r} did not list its tools within {self.spec['call_timeout']:g} s"
            ) from None
        except McpCallFailed:
            raise
        except Exception as exc:
            await self._drop_if_dead()
            raise McpCallFailed(f"MCP server {self.server!r} could not list its tools: {_describe(exc)}") from None

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallAnswer:
        session = await self.ensure()
        timeout = self.spec["call_timeout"]
        try:
            async with asyncio.timeout(timeout):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            raise McpCallFailed(
                f"MCP server {self.server!r} did not answer {tool} within {timeout:g} s (the call was abandoned)"
            ) from None
        except Exception as exc:
            crashed = await self._drop_if_dead()
            what = "stopped during the call (it will be restarted on next use)" if crashed else "failed"
            raise McpCallFailed(f"MCP server {self.server!r} {what}: {tool}: {_describe(exc)}") from None
        return CallAnswer(text=result_text(result), is_error=bool(result.is_error))

    async def _drop_if_dead(self) -> bool:
        # Give the holder a moment to see its transport end: a crash mid-call closes both at once.
        await asyncio.sleep(0.05)
        if not self.alive:
            await self.close()
            return True
        return False


@contextlib.asynccontextmanager
async def _owning(client: Any, transport: contextlib.AbstractAsyncContextManager[Any]) -> Any:
    async with client, transport as streams:
        yield streams


def result_text(result: Any) -> str:
    """A CallToolResult as the text the model reads: its text blocks, a note for each block of another kind, or its
    structured content as JSON when it has nothing else."""
    import json

    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            parts.append(getattr(resource, "text", None) or f"[resource {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}]")
        else:
            parts.append(f"[{kind} content, {getattr(block, 'mime_type', '') or 'binary'}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, McpCallFailed) else text


class Supervisor:
    """The process's MCP loop and its connections. Use `supervisor()`, not this class."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agenttest-mcp", daemon=True)
        self._thread.start()
        self._connections: dict[str, _Connection] = {}
        self._closed = False

    def _submit(self, coroutine: Coroutine[Any, Any, _T], bound: float) -> _T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(bound)
        except TimeoutError:
            future.cancel()
            raise McpCallFailed(f"the MCP client did not answer within {bound:g} s") from None

    async def _connection(self, server: str, spec: dict[str, Any]) -> _Connection:
        connection = self._connections.get(server)
        if connection is not None and connection.spec != spec:
            # The configuration changed (a reloaded settings file, a test's override): the old session is not it.
            await connection.close()
            connection = None
        if connection is None:
            connection = self._connections[server] = _Connection(server, spec)
        return connection

    def call(self, server: str, tool: str, arguments: dict[str, Any]) -> CallAnswer:
        spec = server_spec(server)

        async def run() -> CallAnswer:
            return await (await self._connection(server, spec)).call(tool, arguments)

        return self._submit(run(), spec["connect_timeout"] + spec["call_timeout"] + _MARGIN)

    def list_tools(self, server: str) -> list[dict[str, Any]]:
        spec = server_spec(server)

        async def run() -> list[dict[str, Any]]:
            return await (await self._connection(server, spec)).list_tools()

        return self._submit(run(), spec["connect_timeout"] + spec["call_timeout"] + _MARGIN)

    def running(self) -> list[str]:
        """The servers with a live session now."""
        return sorted(name for name, connection in self._connections.items() if connection.alive)

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True

        async def close_all() -> None:
            await asyncio.gather(*(connection.close() for connection in self._connections.values()))

        try:
            asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(_STOP_SECONDS * 2)
        except Exception:  # noqa: BLE001 — at exit, a server that will not stop must not stop the others
            logger.warning("MCP servers did not all stop within %s s", _STOP_SECONDS * 2)
        self._connections.clear()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_STOP_SECONDS)


_supervisor: Supervisor | None = None
_supervisor_lock = threading.Lock()


def supervisor() -> Supervisor:
    global _supervisor
    with _supervisor_lock:
        if _supervisor is None or _supervisor.pid != os.getpid() or _supervisor._closed:
            _supervisor = Supervisor()
        return _supervisor


def started() -> bool:
    """Whether this process has contacted an MCP server since its sessions were last stopped (a test run must leave
    this False)."""
    current = _supervisor
    return current is not None and current.pid == os.getpid() and not current._closed and bool(current._connections)


def shutdown() -> None:
    """Stop every server session of this process (atexit does it too)."""
    with _supervisor_lock:
        current = _supervisor
    if current is not None and current.pid == os.getpid():
        current.shutdown()


atexit.register(shutdown)
