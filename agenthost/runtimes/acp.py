"""`protocol: acp` of the process runtime (issue 39): the agent is a program that speaks the Agent Client Protocol
over its stdio, and agenttest is its client, written with the `agent-client-protocol` library (`acp`).

Per user turn the program is started (as a jsonl one is, runtimes/process.py: its process group, the seal, the model
gateway) and agenttest sends `initialize` (offering `fs/read_text_file`, `fs/write_text_file` and `terminal/*`),
`session/new` (the session's `cwd` is the conversation's own directory; the MCP gateway, when the agent declares
functions, is offered as an http MCP server with the turn's key as its Authorization header) and one
`session/prompt`. The conversation so far — the program keeps nothing between turns — comes first in the prompt as
one text block, then the user's message. What the agent sends back in `session/update` is the turn: its message
chunks are the reply, the tool calls it reports (with their last status) and its plans are written to the transcript
as calls with the outcome "reported".

What the agent asks of its client goes through the function-executor factory like any tool, under these names:

- `fs_read_text_file` {path, line, limit} and `fs_write_text_file` {path, content};
- `terminal_create` {command, args, cwd} — the command runs to its end (or to the turn's deadline) there and then;
  `terminal/output`, `terminal/wait_for_exit`, `terminal/kill` and `terminal/release` answer from what it did;
- `session_request_permission` {tool_call, options} — the answer is the id of the option chosen.

Under test each is mocked (a mock's content is the file's text, the terminal's output or the option's id) or blocked:
the agent gets an error and the turn ends, as a block ends any turn. In chat each is executed in the conversation's
own directory (`AGENTTEST_VAR_DIR/conversations/<id>/`; a path outside it is refused), and a permission is granted
with the first option that allows once (else always).

At the turn's deadline the agent is sent `session/cancel`; then, as for any program, its group is killed. A program
that crashes, writes a line that is not JSON-RPC, floods stdout, answers a request with an error, or does not end
its prompt after `session/cancel` ends the turn with an Error naming what it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, Client, RequestError, connect_to_agent, text_block
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    EnvVariable,
    FileSystemCapabilities,
    HttpHeader,
    HttpMcpServer,
    Implementation,
    InitializeResponse,
    KillTerminalResponse,
    McpServerStdio,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)
from django.conf import settings

from agenthost import executor
from agenthost.calls import record_call
from agenthost.functions import FunctionResult
from agenthost.loop import record_result
from agenthost.redaction import redact_text
from agenthost.runtimes.acp_names import CLIENT_DECLARATIONS, FS_READ, FS_WRITE, PERMISSION, TERMINAL_CREATE
from agenthost.runtimes.base import RuntimeTurn, TurnStopped
from agenthost.runtimes.gateway import CLIENT, ModelGateway, Pending
from agenthost.runtimes.groups import kill_group
from agenthost.runtimes.process import (
    EXCHANGES,
    MAX_LINE_BYTES,
    MCP_STDIO_BRIDGE,
    Ended,
    ProcessSpec,
    exit_said,
    let_finish,
    program_failed,
    said_places,
    start_program,
    turn_deadline,
)
from agenthost.runtimes.protocol_transcript import joined_chunks, normalised, protocol_said
from agenthost.seal import exempt

# What the transcript calls what the agent reports (session/update), never through the seam: "acp_<kind>" and plans.
REPORTED = "reported"
PLAN = "acp_plan"
# Seconds the agent has, after session/cancel at the deadline, to end its prompt before it is killed: under the
# harness's grace for a case's thread after its timeout (runs/engine/case_runner.py LATE_ANSWER_GRACE_SECONDS, 2 s),
# so that how the agent took the cancel is said with the timeout.
CANCEL_GRACE_SECONDS = 1.0
# A hang guard on the connection's own end after the program's (its last words are read before its end is told).
DRAIN_SECONDS = 2.0
# The most of a terminal's output kept when the agent names no limit.
TERMINAL_OUTPUT_BYTES = 64 * 1024


def conversation_directory(conversation_id: int) -> Path:
    """The conversation's own directory: the ACP session's cwd, where chat runs the agent's file and terminal work."""
    return Path(settings.VAR_DIR, "conversations", str(conversation_id)).absolute()


def _inside(root: Path, path: str) -> Path:
    resolved = (root / path).resolve()
    if resolved != root.resolve() and root.resolve() not in resolved.parents:
        raise PermissionError(f"{path} is outside the conversation's directory {root}")
    return resolved


@dataclass
class _Terminal:
    output: str
    truncated: bool
    exit_code: int | None = 0
    signal: str | None = None


@dataclass
class _Transcript:
    """What the agent sent in session/update during its prompt."""

    chunks: list[str] = field(default_factory=list)
    # Every update as the ACP schema writes it, for a snapshot of the turn (runtimes/protocol_transcript.py).
    updates: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    plans: list[list[dict[str, str]]] = field(default_factory=list)


class _Transport:
    """The library's Transport over the program's stdio (newline-delimited JSON-RPC), which — unlike the library's
    own, which logs and skips a line it cannot parse — names the first line that is not JSON-RPC and ends there."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self.problem = ""

    async def send(self, message: dict[str, Any]) -> None:
        self._writer.write(json.dumps(message).encode() + b"\n")
        await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                line = exc.partial
                if not line.strip():
                    return None
            except asyncio.LimitOverrunError:
                self.problem = f"flooded its stdout: more than {MAX_LINE_BYTES} bytes without a line end"
                return None
            if not line.strip():
                continue
            shown = redact_text(line[:200].decode("utf-8", errors="replace").strip())
            try:
                message = json.loads(line)
            except ValueError as exc:
                self.problem = f"wrote a line that is not JSON-RPC (not JSON: {exc}): {shown!r}"
                return None
            if not (isinstance(message, dict) and message.get("jsonrpc") == "2.0"
                    and ("method" in message or "id" in message)):
                self.problem = f"wrote a line that is not a JSON-RPC 2.0 message: {shown!r}"
                return None
            return message

    async def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self._writer.close()


class _Client:
    """agenttest's side of ACP. Runs on the connection's event loop; whatever touches the turn (the seam, the
    transcript) is handed to the turn's thread through the model gateway's inbox."""

    def __init__(self, gateway: ModelGateway, root: Path, deadline: float) -> None:
        self._gateway, self._root, self._deadline = gateway, root, deadline
        self.transcript = _Transcript()
        self._terminals: dict[str, _Terminal] = {}

    async def _through_seam(self, name: str, arguments: dict[str, Any], run: Any) -> str:
        """`name` called through the function-executor factory on the turn's thread; `run(arguments)` is its
        implementation in chat. A refusal (blocked, failed) is the agent's error; a stop ends the turn too.

        The tool calls the agent reported open (session/update, read before this request on the same stream) are
        what it makes this request for: their results, which the agent words itself, count as the seam's for the
        ledger — under the model's call ids, which an ACP agent reports its tool calls by. A tool call of the agent's
        inside which no request reached the seam is its own code's, and the ledger refuses its result."""
        open_calls = [call_id for call_id, seen in self.transcript.tool_calls.items()
                      if seen["status"] not in ("completed", "failed")]

        def call(turn: RuntimeTurn, pending: Pending) -> None:
            def implementation(context: Any) -> FunctionResult:
                try:
                    return FunctionResult(content=run(arguments))
                except (OSError, subprocess.SubprocessError, ValueError) as exc:
                    return FunctionResult(content=f"{name} failed: {exc}", error=True)

            try:
                result = turn.call_tool(name=name, arguments=arguments, implementation=implementation,
                                        declaration=CLIENT_DECLARATIONS[name])
            except TurnStopped as stop:
                pending.answer(200, {"content": stop.result.content, "error": True})
                raise
            if turn.session.case is not None:
                for call_id in open_calls:
                    turn.session.case.note_framework_answer(call_id)
            pending.answer(200, {"content": result.content, "error": bool(result.error)})

        pending = self._gateway.submit(CLIENT, {"name": name}, call=call)
        await _answered(pending)
        content = str(pending.payload.get("content", ""))
        if pending.status != 200 or pending.payload.get("error"):
            raise RequestError(-32000, f"agenttest refused {name}: {content}")
        return content

    async def read_text_file(self, session_id: str, path: str, line: int | None = None, limit: int | None = None,
                             **kwargs: Any) -> ReadTextFileResponse:
        def run(arguments: dict[str, Any]) -> str:
            lines = _inside(self._root, path).read_text(encoding="utf-8").splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            return "".join(lines[start:start + limit] if limit else lines[start:])

        return ReadTextFileResponse(
            content=await self._through_seam(FS_READ, {"path": path, "line": line, "limit": limit}, run)
        )

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        def run(arguments: dict[str, Any]) -> str:
            target = _inside(self._root, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
            return f"wrote {len(content)} characters to {path}"

        await self._through_seam(FS_WRITE, {"path": path, "content": content}, run)
        return WriteTextFileResponse()

    async def create_terminal(self, session_id: str, command: str, args: list[str] | None = None, env: Any = None,
                              cwd: str | None = None, output_byte_limit: int | None = None,
                              **kwargs: Any) -> CreateTerminalResponse:
        limit = output_byte_limit or TERMINAL_OUTPUT_BYTES
        ran: dict[str, _Terminal] = {}

        def run(arguments: dict[str, Any]) -> str:
            directory = _inside(self._root, cwd or ".")
            directory.mkdir(parents=True, exist_ok=True)
            variables = {**os.environ, **{item.name: item.value for item in env or []}}
            try:
                done = subprocess.run(
                    [command, *(args or [])], cwd=directory, env=variables, capture_output=True, check=False,
                    timeout=max(self._deadline - time.monotonic(), 0.1),
                )
            except subprocess.TimeoutExpired as exc:
                output = (exc.stdout or b"") + (exc.stderr or b"")
                ran["it"] = _Terminal(output[-limit:].decode(errors="replace"), len(output) > limit, None, "SIGKILL")
                return ran["it"].output
            output = done.stdout + done.stderr
            ran["it"] = _Terminal(output[-limit:].decode(errors="replace"), len(output) > limit,
                                  done.returncode if done.returncode >= 0 else None,
                                  None if done.returncode >= 0 else "SIGKILL")
            return ran["it"].output

        said = await self._through_seam(TERMINAL_CREATE, {"command": command, "args": args or [], "cwd": cwd}, run)
        terminal_id = f"terminal-{len(self._terminals) + 1}"
        # A mock's content is the terminal's output, of a command that exited 0.
        self._terminals[terminal_id] = ran.get("it") or _Terminal(said, False)
        return CreateTerminalResponse(terminal_id=terminal_id)

    def _terminal(self, terminal_id: str) -> _Terminal:
        if terminal_id not in self._terminals:
            raise RequestError.invalid_params({"terminalId": f"no terminal {terminal_id!r} in this session"})
        return self._terminals[terminal_id]

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> TerminalOutputResponse:
        terminal = self._terminal(terminal_id)
        return TerminalOutputResponse(output=terminal.output, truncated=terminal.truncated, exit_status=(
            TerminalExitStatus(exit_code=terminal.exit_code, signal=terminal.signal)))

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str,
                                     **kwargs: Any) -> WaitForTerminalExitResponse:
        terminal = self._terminal(terminal_id)
        return WaitForTerminalExitResponse(exit_code=terminal.exit_code, signal=terminal.signal)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse:
        self._terminal(terminal_id)
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> ReleaseTerminalResponse:
        self._terminals.pop(terminal_id, None)
        return ReleaseTerminalResponse()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[PermissionOption],
                                 **kwargs: Any) -> RequestPermissionResponse:
        def run(arguments: dict[str, Any]) -> str:
            for kind in ("allow_once", "allow_always"):
                for option in options:
                    if option.kind == kind:
                        return option.option_id
            return options[0].option_id if options else ""

        chosen = await self._through_seam(PERMISSION, {
            "tool_call": {"id": tool_call.tool_call_id, "title": tool_call.title},
            "options": [{"id": option.option_id, "kind": option.kind} for option in options],
        }, run)
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.strip()))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        transcript = self.transcript
        if hasattr(update, "model_dump"):
            transcript.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))
        if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock):
            transcript.chunks.append(update.content.text)
        elif isinstance(update, ToolCallStart | ToolCallProgress):
            seen = transcript.tool_calls.setdefault(update.tool_call_id, {"kind": "other", "title": "", "status": ""})
            for name in ("kind", "title", "status"):
                value = getattr(update, name, None)
                if value:
                    seen[name] = str(getattr(value, "value", value))
        elif isinstance(update, AgentPlanUpdate):
            transcript.plans.append(
                [{"content": entry.content, "status": str(entry.status)} for entry in update.entries]
            )

    def on_connect(self, conn: Any) -> None:
        pass


async def _answered(pending: Pending) -> None:
    """Until the turn's thread has answered `pending`. Waited for on a daemon thread of its own, not the loop's
    executor, so that a turn that ends without answering never holds the loop's end (the gateway's close answers)."""
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not answered.done():
            answered.set_result(None)

    def wait() -> None:
        pending.done.wait()
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle)

    with exempt():
        threading.Thread(target=wait, daemon=True, name="agenttest-acp-answer").start()
    await answered


class _Session:
    """The ACP conversation of one turn, on an event loop of its own thread; the turn's thread waits on `done`."""

    def __init__(self, process: subprocess.Popen[bytes], client: _Client, root: Path, prompt: list[str],
                 mcp_url: str, key: str) -> None:
        self._process, self._client, self._root, self._prompt = process, client, root, prompt
        self._mcp_url, self._key = mcp_url, key
        self.done_read, self._done_write = os.pipe()
        self.stop_reason = ""
        self.failure = ""
        self.cancelled = False
        # The request the agent is to answer; a deadline before its session exists has nothing to cancel.
        self.step = "initialize"
        self.transport: _Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: Any = None
        self._session_id = ""
        self._thread = threading.Thread(target=self._run, daemon=True, name="agenttest-acp-client")
        with exempt():
            # agenttest's own side of the connection, not the team's code: outside the case's seal.
            self._thread.start()

    def _run(self) -> None:
        try:
            asyncio.run(self._converse())
        finally:
            os.write(self._done_write, b"!")

    async def _converse(self) -> None:
        self._loop = asyncio.get_running_loop()
        assert self._process.stdout is not None and self._process.stdin is not None
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        reading, _ = await self._loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), self._process.stdout
        )
        pipe, protocol = await self._loop.connect_write_pipe(asyncio.streams.FlowControlMixin, self._process.stdin)
        writer = asyncio.StreamWriter(pipe, protocol, None, self._loop)
        self.transport = _Transport(reader, writer)
        # The library's Client protocol names every method a client may have; it routes the ones it lacks (the
        # unstable elicitation, extensions) as "method not found".
        self._conn = connect_to_agent(cast("Client", self._client), self.transport)
        try:
            initialized = await self._conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
                ),
                client_info=Implementation(name="agenttest", version="1"),
            )
            self.step = "session/new"
            session = await self._conn.new_session(cwd=str(self._root), mcp_servers=self._servers(initialized))
            self._session_id = session.session_id
            self.step = "session/prompt"
            response = await self._conn.prompt(session_id=self._session_id,
                                               prompt=[text_block(text) for text in self._prompt])
            self.stop_reason = str(getattr(response.stop_reason, "value", response.stop_reason))
        except RequestError as exc:
            self.failure = f"answered {self.step} with an error: {redact_text(str(exc))[:500]}"
        except (ConnectionError, asyncio.CancelledError):
            self.failure = f"ended its side of the connection before it answered {self.step}"
        finally:
            # The program's stdin closed: an agent reading it to its end exits on its own.
            await self.transport.close()
            with contextlib.suppress(Exception):
                await self._conn.close()
            reading.close()

    def _servers(self, initialized: InitializeResponse) -> list[HttpMcpServer | McpServerStdio]:
        """agenttest's MCP gateway as the agent can take it: over HTTP when it says it can (`mcpCapabilities.http`),
        else over stdio, which every ACP agent must take — a relay it starts itself, to the same gateway."""
        if not self._mcp_url:
            return []
        capabilities = initialized.agent_capabilities
        mcp = capabilities.mcp_capabilities if capabilities is not None else None
        if mcp is not None and mcp.http:
            return [HttpMcpServer(type="http", name="agenttest", url=self._mcp_url,
                                  headers=[HttpHeader(name="Authorization", value=f"Bearer {self._key}")])]
        return [McpServerStdio(
            name="agenttest", command=sys.executable, args=["-I", MCP_STDIO_BRIDGE],
            env=[EnvVariable(name="AGENTTEST_MCP_URL", value=self._mcp_url),
                 EnvVariable(name="AGENTTEST_MCP_KEY", value=self._key)],
        )]

    def cancel(self) -> None:
        """Send session/cancel (the turn's deadline)."""
        self.cancelled = True
        if self._loop is not None and self._conn is not None and self._session_id:
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(self._conn.cancel(session_id=self._session_id), self._loop)

    def close(self) -> None:
        """After the program's group is gone, its connection ends: the thread is waited for (a hang guard)."""
        self._thread.join(timeout=DRAIN_SECONDS * 2)
        if self._thread.is_alive():
            # Still running, the thread may yet write its end: its pipe is left open.
            return
        os.close(self.done_read)
        os.close(self._done_write)


def _prompt(turn: RuntimeTurn) -> list[str]:
    messages = turn.messages()
    earlier = [
        f"{message['role']}: {message['content']}" for message in messages[:-1]
        if message.get("role") in ("user", "assistant") and isinstance(message.get("content"), str)
        and message["content"]
    ]
    said = messages[-1].get("content", "") if messages else ""
    return ([
        "The conversation so far (you keep nothing between turns):\n" + "\n".join(earlier)
    ] if earlier else []) + [said if isinstance(said, str) else json.dumps(said)]


def _wait(session: _Session, process: subprocess.Popen[bytes], deadline: float, budget: str, turn: RuntimeTurn,
          gateway: ModelGateway) -> None:
    """Serve the turn's model and client calls until the prompt ends; raise Ended naming how it did not."""
    exited = os.pidfd_open(process.pid)
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(session.done_read, selectors.EVENT_READ)
            selector.register(exited, selectors.EVENT_READ)
            selector.register(gateway.wakeup, selectors.EVENT_READ)
            give_up = deadline
            while True:
                left = give_up - time.monotonic()
                ready = {key.fd for key, _ in selector.select(timeout=left)} if left > 0 else set()
                if gateway.wakeup in ready:
                    gateway.serve(turn)
                if session.done_read in ready:
                    return
                if exited in ready:
                    # Its last words are read before its end is told.
                    selector.unregister(exited)
                    give_up = min(give_up, time.monotonic() + DRAIN_SECONDS)
                    continue
                if ready:
                    continue
                if session.cancelled:
                    ignored = (f"did not answer within {budget} and ignored session/cancel (its prompt had not "
                               f"ended {CANCEL_GRACE_SECONDS:g} s after it), so it was killed")
                    executor.case_stopped(turn.conversation_id, f"the agent's program {ignored}")
                    raise Ended(ignored)
                if process.poll() is not None:
                    raise Ended(f"{exit_said(process.returncode)} without answering")
                if session.step != "session/prompt":
                    unanswered = f"did not answer {session.step} within {budget}, so it was killed"
                    executor.case_stopped(turn.conversation_id, f"the agent's program {unanswered}")
                    raise Ended(unanswered)
                session.cancel()
                give_up = time.monotonic() + CANCEL_GRACE_SECONDS
    finally:
        os.close(exited)


def _record(turn: RuntimeTurn, transcript: _Transcript) -> None:
    """The agent's own account of its tool calls and plans, as calls of the transcript (outcome "reported")."""
    reported = [(f"acp_{seen['kind']}", {"id": call_id, "title": seen["title"]}, seen["status"] or "reported")
                for call_id, seen in transcript.tool_calls.items()]
    reported += [(PLAN, {"entries": entries}, "; ".join(f"{entry['content']} ({entry['status']})" for entry in entries))
                 for entries in transcript.plans]
    for index, (name, arguments, content) in enumerate(reported):
        call_id = f"acp_{turn.conversation_id}_{turn.turn}_{index}"
        raw = json.dumps(arguments)
        record_call(turn.session, turn.loaded, turn.turn, call_id, name, arguments, raw, "model")
        record_result(turn.session, turn.loaded, turn.turn, call_id=call_id, name=name, raw_arguments=raw,
                      arguments=arguments, problem=None, outcome=FunctionResult(content=content, outcome=REPORTED),
                      result=turn.result)


def acp_exchange(
    turn: RuntimeTurn, spec: ProcessSpec, argv: list[str], env: dict[str, str], gateway: ModelGateway
) -> str:
    deadline = turn_deadline(turn)
    budget = f"the turn's {max(deadline - time.monotonic(), 0):.0f} s"
    root = conversation_directory(turn.conversation_id)
    # There for the agent to find (an agent may start in its session's cwd), and under test gone again when nothing
    # was put there (everything mocked or blocked).
    root.mkdir(parents=True, exist_ok=True)
    client = _Client(gateway, root, deadline)
    with tempfile.TemporaryFile(prefix="agenttest-acp-") as log:
        process = start_program(argv, env, spec, log)
        session = _Session(process, client, root, _prompt(turn), env.get("AGENTTEST_MCP_URL", ""),
                           env["OPENAI_API_KEY"])
        try:
            _wait(session, process, deadline, budget, turn, gateway)
            problem = session.transport.problem if session.transport is not None else ""
            if problem or session.failure:
                code = process.poll()
                ended = f" ({exit_said(code)})" if code is not None and not problem else ""
                raise Ended((problem or session.failure) + ended)
            if session.cancelled:
                cancelled = (f"did not answer within {budget}; it was sent session/cancel and ended its prompt "
                             f"({session.stop_reason})")
                executor.case_stopped(turn.conversation_id, f"the agent's program {cancelled}")
                raise Ended(cancelled)
            let_finish(process, deadline)
        except Ended as ended:
            raise program_failed(f"{spec.shown}, ACP", ended, turn, log) from None
        finally:
            kill_group(process)
            session.close()
            if turn.session.case is not None:
                with contextlib.suppress(OSError):
                    root.rmdir()
    _record(turn, client.transcript)
    said = [{"turn": turn.turn, "update": update} for update in joined_chunks(client.transcript.updates)]
    protocol_said(turn.conversation_id, normalised(said, said_places(spec, env, **{"<cwd>": str(root)})))
    return redact_text("".join(client.transcript.chunks))


EXCHANGES["acp"] = acp_exchange
