"""The `process` runtime (issue 39): the team's agent is a program in any language, started by agenttest and spoken
to over its stdio. The agent file names it — `command`, `args`, `cwd`, `env` (names of variables passed on from
agenttest's environment; their values are never stored) — and how to speak to it, `protocol`:

- `jsonl`: agenttest writes one JSON object, one line, per user turn —
  `{"turn": 0, "message": "<the user's text>", "messages": [<the conversation so far as OpenAI chat messages, this
  turn's user message last>], "state": {<the conversation's state>}}` — and reads one JSON object, one line, back:
  `{"reply": "<text>"}`, optionally with `"output": <any JSON>` (structured output, which is then the turn's answer),
  or `{"error": "<what went wrong>"}`. Blank lines are skipped; stdout carries nothing else (logs go to stderr).
- `acp`: the Agent Client Protocol, agenttest its client (runtimes/acp.py): `initialize`, `session/new`, one
  `session/prompt` per turn; what the agent asks of its client (files, terminals, permission) goes through the seam.

The program is started for each turn (the line holds the whole conversation, so it keeps no state of its own) in a
process group of its own, which is killed when the turn ends, whatever the program left running. A program that
exits, hangs past the turn's deadline (the case's under test), floods stdout with a line past MAX_LINE_BYTES or
writes something that is not a reply ends the turn with an Error naming what it did and quoting the end of its
stderr.

A program given functions reaches them over MCP: `AGENTTEST_MCP_URL` (streamable HTTP, its key `OPENAI_API_KEY` as a
bearer token), or, for a client that takes only stdio servers, the relay `AGENTTEST_MCP_COMMAND` names (a JSON array;
started with the program's environment, it reads the URL and `AGENTTEST_MCP_KEY`).

Under test the program runs sealed: in a network namespace of its own (`unshare`), where nothing is reachable. A
machine with no such sandbox refuses to run it under test — never unsealed. In chat it runs as started.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.utils import timezone

from agenthost import executor
from agenthost.functions import FunctionResult
from agenthost.loading import LoadedAgent
from agenthost.models import Agent
from agenthost.redaction import redact_text
from agenthost.runtimes.base import AgentCodeFailed, Runtime, RuntimeTurn, register_runtime
from agenthost.runtimes.gateway import ModelGateway
from agenthost.runtimes.groups import kill_group
from agenthost.runtimes.protocol_transcript import normalised, protocol_said
from agenthost.seal import exempt
from agenthost.turns import ConversationError
from common.inputs import is_env_name

PROTOCOLS = ("jsonl", "acp")
# Set by agenttest for the program itself (the model gateway); a file may not pass its own.
RESERVED_ENV = frozenset({"OPENAI_BASE_URL", "OPENAI_API_KEY"})
# What any program needs to start at all; everything else of agenttest's environment is passed only when named.
BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")
PROCESS_FIELDS = ("command", "args", "cwd", "env", "protocol")
# The longest line the program may write: past it, it is flooding stdout, not answering.
MAX_LINE_BYTES = 1024 * 1024
# How much of the program's stderr an Error quotes.
STDERR_TAIL_CHARS = 600
# Seconds of a chat turn's claim left to the child running it (runtimes/child.py) after the program is stopped, so
# the program is stopped before that child is.
CLAIM_MARGIN_SECONDS = 4.0
# Where the model gateway is on the loopback of the program's own network namespace (any port: nothing else is there).
GATEWAY_PORT = 8639
MCP_PORT = 8640
FORWARDER = str(Path(__file__).with_name("netns_forwarder.py"))
# The stdio MCP server a program that takes no HTTP server starts: a relay to the turn's gateway (run as a script).
MCP_STDIO_BRIDGE = str(Path(__file__).with_name("mcp_stdio_bridge.py"))
# A hang guard on the program's own exit after its reply.
EXIT_GRACE_SECONDS = 2.0
# The file the forwarder in the namespace writes the program's own network attempts to.
ATTEMPTS = "attempts"


class SandboxUnavailable(ConversationError):
    """Under test a process agent runs only sealed; this machine offers no sandbox to seal it in."""

    code = "sandbox_unavailable"


@dataclass(frozen=True)
class ProcessSpec:
    command: str
    args: tuple[str, ...]
    cwd: str
    env: tuple[str, ...]
    protocol: str

    @classmethod
    def of(cls, loaded: LoadedAgent) -> ProcessSpec:
        return cls(loaded.command, tuple(loaded.args), loaded.cwd, tuple(loaded.env), loaded.protocol)

    @property
    def shown(self) -> str:
        return " ".join([self.command, *self.args])


def program_directory(cwd: str) -> Path:
    return Path(os.getcwd(), cwd) if cwd else Path(os.getcwd())


def resolved_command(command: str, cwd: str) -> str | None:
    """The program `command` names: a path (relative to `cwd`) when it has a slash, else a program on PATH."""
    if "/" in command:
        path = program_directory(cwd) / command
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(command)


def process_problems(
    runtime: str, *, entry: str = "", command: Any = "", args: Any = None, cwd: Any = "", env: Any = None,
    protocol: Any = "",
) -> dict[str, list[str]]:
    """What is wrong with an agent's process fields, keyed by field ({} for a process agent that can start)."""
    given = {"command": command, "args": args, "cwd": cwd, "env": env, "protocol": protocol}
    if runtime != Agent.Runtime.PROCESS:
        return {
            name: [f"must be empty for runtime {runtime!r}: only a process agent (runtime 'process') starts a program"]
            for name, value in given.items() if value
        }
    problems: dict[str, list[str]] = {}
    if entry:
        problems["entry"] = ["must be empty for runtime 'process': the agent is the program `command` starts"]
    if not isinstance(cwd, str):
        problems["cwd"] = ["must be a directory path, relative to where agenttest runs"]
    elif cwd and not program_directory(cwd).is_dir():
        problems["cwd"] = [f"{cwd!r} is not a directory (relative to {os.getcwd()})"]
    if not isinstance(command, str) or not command.strip():
        problems["command"] = ['must name the program to start, e.g. "node" or "./agent"']
    elif "\0" in command:
        problems["command"] = ["must not contain a NUL character"]
    elif "cwd" not in problems and resolved_command(command, cwd) is None:
        where = "an executable file relative to `cwd`" if "/" in command else "a program on PATH"
        problems["command"] = [f"{command!r} is not {where}"]
    if not isinstance(args, list) or not all(isinstance(arg, str) and "\0" not in arg for arg in args):
        problems["args"] = ['must be a list of strings, e.g. ["agent.js", "--quiet"]']
    if not isinstance(env, list) or not all(isinstance(name, str) for name in env):
        problems["env"] = ['must be a list of environment variable names, e.g. ["SHOP_REGION"]']
    else:
        bad = [name for name in env if not is_env_name(name)]
        reserved = sorted(RESERVED_ENV.intersection(env))
        if bad:
            problems["env"] = [f"{bad[0]!r} is not an environment variable name (letters, digits, _)"]
        elif reserved:
            problems["env"] = [f"{reserved[0]} is agenttest's to set for the program (its model gateway)"]
    if protocol not in PROTOCOLS:
        problems["protocol"] = [f"must be one of: {', '.join(PROTOCOLS)}"]
    return problems


# --- The seal ------------------------------------------------------------------------------------------------------

_sandbox_checked: dict[str, str] = {}
_sandbox_lock = threading.Lock()


def sandbox_prefix() -> list[str]:
    """The command that starts a program in a network namespace of its own, checked once per process (per unshare
    found); raises SandboxUnavailable saying why there is none."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SandboxUnavailable(
            "a process agent runs under test only sealed in a network namespace of its own, and this machine has "
            "no `unshare` on PATH (util-linux) to make one; it was not started"
        )
    # As root a network namespace needs nothing more; otherwise a user namespace lends the rights to make it.
    prefix = [unshare, "--net"] if os.geteuid() == 0 else [unshare, "--net", "--map-root-user"]
    with _sandbox_lock:
        problem = _sandbox_checked.get(unshare)
        if problem is None:
            with exempt():
                probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30, check=False)
            problem = "" if probe.returncode == 0 else (probe.stderr.strip() or f"exit code {probe.returncode}")
            _sandbox_checked[unshare] = problem
    if problem:
        raise SandboxUnavailable(
            f"a process agent runs under test only sealed in a network namespace of its own, and `{' '.join(prefix)}`"
            f" cannot make one here ({redact_text(problem)[:300]}); it was not started"
        )
    return prefix


# --- One turn --------------------------------------------------------------------------------------------------------


class Ended(Exception):
    """The exchange ended without a reply; the message says how."""


# How a turn is spoken to the started program, by protocol: (turn, spec, argv, env, gateway) → the turn's answer.
# `protocol: acp` adds its own (runtimes/acp.py); the start, the seal and the gateways around it are shared.
Exchange = Callable[[RuntimeTurn, "ProcessSpec", list[str], dict[str, str], ModelGateway], str]
EXCHANGES: dict[str, Exchange] = {}
# The modules of the protocols that register themselves, imported by the first turn that speaks one: the ACP library
# is about a CPU second of imports that no command needs but a case or a chat of an ACP agent.
_EXCHANGE_MODULES = {"acp": "agenthost.runtimes.acp"}


def exchange_for(protocol: str) -> Exchange:
    if protocol not in EXCHANGES and protocol in _EXCHANGE_MODULES:
        importlib.import_module(_EXCHANGE_MODULES[protocol])
    return EXCHANGES[protocol]


def program_environment(spec: ProcessSpec) -> dict[str, str]:
    return {name: os.environ[name] for name in (*BASE_ENV, *spec.env) if name in os.environ}


def said_places(spec: ProcessSpec, env: dict[str, str], **more: str) -> dict[str, str]:
    """What of a turn's program is volatile — its directory, its gateways' addresses, its key — and the names a
    normalised transcript shows for them (runtimes/protocol_transcript.py); `more` adds absolute path → name."""
    return {
        str(program_directory(spec.cwd)): "<program>",
        env.get("OPENAI_BASE_URL", ""): "<gateway>",
        env.get("AGENTTEST_MCP_URL", ""): "<mcp>",
        env.get("OPENAI_API_KEY", ""): "<key>",
        **{path: name for name, path in more.items()},
    }


def turn_deadline(turn: RuntimeTurn) -> float:
    """When (time.monotonic()) the program's turn must be over: the case's deadline under test, else before the
    turn's claim expires."""
    case_deadline = executor.case_deadline(turn.conversation_id)
    if case_deadline is not None:
        return case_deadline
    claim = turn.session.claim
    seconds = (
        (claim - timezone.now()).total_seconds() - CLAIM_MARGIN_SECONDS
        if claim is not None else float(settings.AGENTTEST_REQUEST_TIMEOUT)
    )
    return time.monotonic() + max(seconds, 1.0)


def stderr_tail(log: IO[bytes]) -> str:
    log.flush()
    log.seek(0, os.SEEK_END)
    size = log.tell()
    log.seek(max(size - STDERR_TAIL_CHARS * 4, 0))
    return redact_text(log.read().decode("utf-8", errors="replace")[-STDERR_TAIL_CHARS:].strip())


def program_failed(shown: str, ended: Ended, turn: RuntimeTurn, log: IO[bytes]) -> AgentCodeFailed:
    """The Error of a turn whose program ended it: what `shown` (the program, and its protocol when not jsonl) did,
    the turn, and the end of what it wrote to stderr."""
    tail = stderr_tail(log)
    return AgentCodeFailed(
        f"the agent's program ({shown}) {ended} at turn {turn.turn}"
        + (f"; the last it wrote to stderr: {tail}" if tail else ""),
        partial=turn.result,
    )


def start_program(argv: list[str], env: dict[str, str], spec: ProcessSpec, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """The program started in a process group of its own, its stdin and stdout piped, its stderr to `log`."""
    with exempt():
        # agenttest's own start of the program (the seal refuses the team's code a new process).
        return subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=program_directory(spec.cwd), env=env,
            start_new_session=True,
        )


def _feed(process: subprocess.Popen[bytes], line: bytes) -> None:
    # On a thread of its own: a program that never reads its stdin must not hold the turn past its deadline.
    stdin = process.stdin
    assert stdin is not None
    try:
        stdin.write(line)
        stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the program is gone or closed its stdin; reading its stdout tells how it ended


def _read_reply(
    process: subprocess.Popen[bytes], deadline: float, budget: str, turn: RuntimeTurn, gateway: ModelGateway
) -> dict[str, Any]:
    stdout = process.stdout
    assert stdout is not None
    descriptor = stdout.fileno()
    os.set_blocking(descriptor, False)
    # The program's own end, seen even while what it started still holds its stdout open.
    exited = os.pidfd_open(process.pid)
    with selectors.DefaultSelector() as selector:
        selector.register(descriptor, selectors.EVENT_READ)
        selector.register(exited, selectors.EVENT_READ)
        selector.register(gateway.wakeup, selectors.EVENT_READ)
        try:
            return _read_lines(process, selector, descriptor, exited, deadline, budget, turn, gateway)
        finally:
            os.close(exited)


def _read_lines(
    process: subprocess.Popen[bytes], selector: selectors.BaseSelector, descriptor: int, exited: int,
    deadline: float, budget: str, turn: RuntimeTurn, gateway: ModelGateway,
) -> dict[str, Any]:
    pending = bytearray()
    ended = False
    while True:
        while b"\n" in pending:
            raw, _, rest = bytes(pending).partition(b"\n")
            pending = bytearray(rest)
            if raw.strip():
                return _reply_of(raw)
        if len(pending) > MAX_LINE_BYTES:
            raise Ended(f"flooded its stdout: more than {MAX_LINE_BYTES} bytes without a line end")
        if ended:
            if pending.strip():
                return _reply_of(bytes(pending))
            try:
                code = process.wait(timeout=max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                raise Ended(f"closed its stdout without answering within {budget}, so it was stopped") from None
            raise Ended(f"{exit_said(code)} without answering")
        left = deadline - time.monotonic()
        ready = {key.fd for key, _ in selector.select(timeout=left)} if left > 0 else set()
        if not ready:
            raise Ended(f"did not answer within {budget}, so it was stopped")
        if gateway.wakeup in ready:
            # The program's model calls, answered on this thread: the turn's session is one thread's.
            gateway.serve(turn)
        if descriptor in ready:
            chunk = _read_some(descriptor)
            pending.extend(chunk)
            ended = not chunk
        if exited in ready and not ended:
            # Whatever it wrote before it ended is read to the last byte before its end is told.
            while chunk := _read_some(descriptor):
                pending.extend(chunk)
                if len(pending) > MAX_LINE_BYTES:
                    break
            ended = True


def _read_some(descriptor: int) -> bytes:
    try:
        return os.read(descriptor, 65536)
    except BlockingIOError:
        return b""


def let_finish(process: subprocess.Popen[bytes], deadline: float) -> None:
    """After its reply, the program's own end (its stdin is closed), so that what it did last is all told; a hang
    guard, then it is stopped like any other."""
    try:
        process.wait(timeout=max(min(EXIT_GRACE_SECONDS, deadline - time.monotonic()), 0))
    except subprocess.TimeoutExpired:
        pass


def exit_said(code: int) -> str:
    if code < 0:
        try:
            return f"was ended by {signal.Signals(-code).name}"
        except ValueError:
            return f"was ended by signal {-code}"
    return f"exited with code {code}"


def _reply_of(raw: bytes) -> dict[str, Any]:
    shown = redact_text(raw[:200].decode("utf-8", errors="replace"))
    try:
        reply = json.loads(raw)
    except ValueError as exc:
        raise Ended(f"wrote a line that is not JSON ({exc}): {shown!r}") from None
    if not isinstance(reply, dict):
        raise Ended(f"wrote {type(reply).__name__} JSON, not an object: {shown!r}")
    if "error" in reply:
        raise Ended(f"reported an error: {redact_text(str(reply['error']))[:500]}")
    if "output" not in reply and not isinstance(reply.get("reply"), str):
        raise Ended(f'wrote an object with neither "reply" (text) nor "output": {shown!r}')
    if "reply" in reply and not isinstance(reply["reply"], str):
        raise Ended(f'wrote a "reply" that is not text: {shown!r}')
    return reply


def _answer(reply: dict[str, Any]) -> str:
    if "output" in reply:
        # Structured output is the turn's answer, as its JSON (the reply's own text when it says the same value).
        text = reply.get("reply")
        if isinstance(text, str):
            try:
                if json.loads(text) == reply["output"]:
                    return text
            except ValueError:
                pass
        return json.dumps(reply["output"])
    answer: str = reply["reply"]
    return answer


def run_process_turn(turn: RuntimeTurn, spec: ProcessSpec) -> str:
    """The program started for `turn`, given its line, and its reply read back; the program and its process group
    are gone when this returns."""
    sealed = turn.session.case is not None
    prefix = sandbox_prefix() if sealed else []
    command = resolved_command(spec.command, spec.cwd)
    if command is None:
        raise AgentCodeFailed(f"the agent's program {spec.command!r} is not there to start (cwd {spec.cwd or '.'!r})",
                              partial=turn.result)
    tools = turn.loaded.tools(entry_agent_name=turn.loaded.name) if turn.loaded.functions else []
    # Imported by a turn that serves tools, not on start-up: the MCP server and uvicorn are most of a CPU second.
    from agenthost.runtimes.mcp_gateway import MCP_PATH, McpGateway

    with tempfile.TemporaryDirectory(prefix="agenttest-process-") as scratch:
        model_socket, mcp_socket = os.path.join(scratch, "model.sock"), os.path.join(scratch, "mcp.sock")
        gateway = ModelGateway(unix_path=model_socket if sealed else "")
        tool_gateway: McpGateway | None = None
        try:
            if tools:
                tool_gateway = McpGateway(tools, gateway, unix_path=mcp_socket if sealed else "")
            env = {**program_environment(spec), "OPENAI_API_KEY": gateway.key}
            if sealed:
                # Inside its namespace the program reaches the gateways only through the forwarders, on loopback.
                routes = [f"{GATEWAY_PORT}={model_socket}"] + ([f"{MCP_PORT}={mcp_socket}"] if tools else [])
                argv = [*prefix, sys.executable, "-I", FORWARDER, os.path.join(scratch, ATTEMPTS), *routes, "--",
                        command, *spec.args]
                env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{GATEWAY_PORT}/v1"
                if tools:
                    env["AGENTTEST_MCP_URL"] = f"http://127.0.0.1:{MCP_PORT}{MCP_PATH}"
            else:
                argv = [command, *spec.args]
                env["OPENAI_BASE_URL"] = gateway.base_url
                if tool_gateway is not None:
                    env["AGENTTEST_MCP_URL"] = tool_gateway.url
            if tools:
                # For a program whose MCP client takes only stdio servers: the command of a relay to the same gateway,
                # which it starts itself with this environment (the URL and the key).
                env["AGENTTEST_MCP_KEY"] = gateway.key
                env["AGENTTEST_MCP_COMMAND"] = json.dumps([sys.executable, "-I", MCP_STDIO_BRIDGE])
            return exchange_for(spec.protocol)(turn, spec, argv, env, gateway)
        finally:
            if tool_gateway is not None:
                tool_gateway.close()
            gateway.close()
            if sealed:
                _note_attempts(turn, spec, Path(scratch, ATTEMPTS))


def _note_attempts(turn: RuntimeTurn, spec: ProcessSpec, attempts: Path) -> None:
    """The program's own tries to reach the network (seen by the forwarder in its namespace): the case's breach,
    whatever the program made of the failure."""
    try:
        seen = [line for line in dict.fromkeys(attempts.read_text(encoding="utf-8").splitlines()) if line]
    except OSError:
        return
    if not seen:
        return
    more = f" (and {len(seen) - 1} more: {', '.join(seen[1:4])})" if len(seen) > 1 else ""
    turn.session.case.refuse(
        f"the agent's program ({spec.shown}) tried to reach the network itself at turn {turn.turn}: {seen[0]}{more}; "
        "under test a process agent reaches only agenttest's model gateway, so nothing was sent — a tool that calls "
        "out must be one agenttest serves it, to be mocked"
    )


def _exchange(
    turn: RuntimeTurn, spec: ProcessSpec, argv: list[str], env: dict[str, str], gateway: ModelGateway
) -> str:
    messages = turn.messages()
    line = json.dumps({
        "turn": turn.turn,
        "message": messages[-1].get("content", "") if messages else "",
        "messages": messages,
        "state": turn.session.state,
    }).encode() + b"\n"
    deadline = turn_deadline(turn)
    budget = f"the turn's {max(deadline - time.monotonic(), 0):.0f} s"
    with tempfile.TemporaryFile(prefix="agenttest-process-") as log:
        process = start_program(argv, env, spec, log)
        feeder = threading.Thread(target=_feed, args=(process, line), daemon=True, name="agenttest-process-stdin")
        feeder.start()
        try:
            reply = _read_reply(process, deadline, budget, turn, gateway)
            let_finish(process, deadline)
        except Ended as ended:
            raise program_failed(spec.shown, ended, turn, log) from None
        finally:
            # Whatever the program started and left running goes with it.
            kill_group(process)
            if process.stdout is not None:
                process.stdout.close()
            feeder.join(timeout=5)
    protocol_said(turn.conversation_id, normalised([{"turn": turn.turn, "reply": reply}], said_places(spec, env)))
    return redact_text(_answer(reply))


EXCHANGES["jsonl"] = _exchange


class ProcessRuntime(Runtime):
    name = "process"
    imports_entry = False

    def target(self, loaded: LoadedAgent) -> Any:
        return ProcessSpec.of(loaded)

    def prepare(self, loaded: LoadedAgent) -> None:
        # What run_process_turn and exchange_for import at a first turn: the protocol's library (ACP's is the
        # larger part) and, for an agent with functions, the MCP server of its tool gateway.
        if loaded.protocol in _EXCHANGE_MODULES:
            importlib.import_module(_EXCHANGE_MODULES[loaded.protocol])
        if loaded.functions:
            importlib.import_module("agenthost.runtimes.mcp_gateway")

    def run_turn(self, turn: RuntimeTurn, target: Any) -> str:
        return run_process_turn(turn, target)

    def invoke(self, turn: RuntimeTurn, target: Any, name: str, arguments: dict[str, Any]) -> FunctionResult:
        # The seam the program's tools will be served through (its MCP gateway): the function-executor factory.
        def stand_in(context: Any) -> FunctionResult:
            return FunctionResult(content=f"[{name} ran outside agenttest's seam]")

        return turn.call_tool(name=name, arguments=arguments, implementation=stand_in)


register_runtime(ProcessRuntime())
