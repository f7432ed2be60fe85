"""The team's code away from the process that asked for it (issue 33 item 6, decision 0033).

Importing a team's module runs its code, and so does a turn of its agent: an entry may exit (`sys.exit()` at
import), abort (`os:abort` as the entry), hang, or leave threads behind. None of that may cost a web server's
worker, so the web process hands such work to a child process — a Django process on the same settings, database and
import path, forked by the web process's child server (runtimes/fork_server.py, decision 0048) — and waits for it
with a deadline:

- `turn`: one chat turn of a runtime agent, on the turn claim the parent took (the parent writes the failure when
  the child dies, and gives the claim back);
- `inspect`: an entry's kind checked (imported, never called) and its tools read, for the save of an agent.

The child reads its input from and writes its answer to a directory of the piece of work, and leaves with
`os._exit`, so a thread of the team's cannot keep it alive; whatever else it started (its process group) is killed
when it is done. Each piece of work gets a process of its own: one that hangs holds nothing another needs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from agenthost.held import run_send
from agenthost.llm.base import Usage
from agenthost.models import Agent, Conversation, Message
from agenthost.redaction import redact_text
from agenthost.runtimes.acp_names import client_declarations
from agenthost.runtimes.base import (
    AgentCodeFailed,
    deps_format_problems,
    deps_inspected_here,
    entry_inspected_here,
    get_runtime,
    runtime_names,
)
from agenthost.runtimes.entry import entry_format_problem, team_code_kept_out, team_code_refusal
from agenthost.runtimes.fork_server import ServerFailed, ServerPool
from agenthost.session import ConversationSession, claim_expiry
from agenthost.turns import (
    ConcurrentTurn,
    ConversationError,
    ConversationGone,
    ConversationSealed,
    InvalidInput,
    ModelCallFailed,
    StepLimitExceeded,
    ToolCallRecord,
    TurnClaimLost,
    TurnResult,
)

COMMAND = "agent_child"
TURN, INSPECT, SERVE = "turn", "inspect", "serve"
# The parent's import path, which the child appends to its own (after the installed packages, as load_entry does):
# what the parent could import, the child imports.
PATH_VARIABLE = "AGENTTEST_CHILD_PATH"
INPUT, ANSWER, LOG, ENVIRONMENT = "in.json", "answer.json", "log", "environment.json"
# Between a turn's deadline and the expiry of its claim: time for the parent to write the failure and give the claim
# back before another send could take the conversation over.
CLAIM_MARGIN_SECONDS = 3.0
# What of the child's own output (the team's prints, a traceback, the C runtime's abort message) a failure quotes.
LOG_TAIL_CHARS = 600


class ChildFailed(Exception):
    """The child gave no answer: it ended without one (`how` says with what) or ran past its deadline."""

    def __init__(self, how: str, log_tail: str) -> None:
        super().__init__(how)
        self.how = how
        self.log_tail = log_tail


def _framework_modules(payload: dict[str, Any]) -> list[str]:
    runtime = payload.get("runtime", "")
    return list(get_runtime(runtime).framework_modules) if runtime in runtime_names() else []


# One per process, started on first need (runtimes/fork_server.py): `python -m agenttest agent_child serve`.
_servers = ServerPool([sys.executable, "-m", "agenttest", COMMAND, SERVE])


def child_run(mode: str, payload: dict[str, Any], *, deadline: float) -> dict[str, Any]:
    """Run `mode` on `payload` in a child process and return its answer; raises ChildFailed when the child exits,
    is killed or is still running `deadline` seconds after it was asked for (then it and its process group are
    killed)."""
    with tempfile.TemporaryDirectory(prefix="agenttest-child-") as directory:
        folder = Path(directory)
        (folder / INPUT).write_text(json.dumps(payload), encoding="utf-8")
        (folder / LOG).touch(mode=0o600)
        env = {**os.environ, PATH_VARIABLE: json.dumps([path for path in sys.path if path]), "PYTHONUNBUFFERED": "1"}
        # The environment of the moment, for the child (its values may be secrets: the directory is the parent's own).
        (folder / ENVIRONMENT).write_text(json.dumps(env), encoding="utf-8")
        request = {
            "mode": mode, "directory": directory, "log": str(folder / LOG), "environment": str(folder / ENVIRONMENT),
            "modules": _framework_modules(payload),
        }
        try:
            code = _servers.run(request, env=env, cwd=os.getcwd(), deadline=deadline)
        except ServerFailed as exc:
            raise ChildFailed(_how(exc.code, deadline), exc.log_tail[-LOG_TAIL_CHARS:]) from None
        answer = folder / ANSWER
        if code == 0 and answer.exists():
            result: dict[str, Any] = json.loads(answer.read_text(encoding="utf-8"))
            return result
        tail = (folder / LOG).read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:].strip()
        raise ChildFailed(_how(code, deadline), tail)


def child_work(request: dict[str, Any]) -> None:
    """In the child: the piece of work `request` names, its answer written to its directory."""
    directory = request["directory"]
    payload = child_input(directory)
    try:
        answer = turn_here(payload) if request["mode"] == TURN else inspect_here(payload)
    except (SystemExit, KeyboardInterrupt) as exc:
        # The team's code ended the process from inside (sys.exit() at import, in a tool): an answer all the same.
        answer = ended_here(payload, exc)
    child_answer(directory, answer)


def _how(code: int | None, deadline: float) -> str:
    if code is None:
        return f"did not finish within its deadline ({deadline:.0f} s), so its process was stopped"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"ended the process running it ({name})"
    return f"ended the process running it (exit code {code})"


def child_answer(directory: str, answer: dict[str, Any]) -> None:
    """Written by the child: the answer, whole or not at all (renamed into place)."""
    folder = Path(directory)
    partial = folder / f"{ANSWER}.part"
    partial.write_text(json.dumps(answer, default=str), encoding="utf-8")
    partial.replace(folder / ANSWER)


def child_input(directory: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(directory) / INPUT).read_text(encoding="utf-8"))
    return data


def extend_import_path() -> None:
    for path in json.loads(os.environ.get(PATH_VARIABLE) or "[]"):
        if path not in sys.path:
            sys.path.append(path)


# --- A chat turn -------------------------------------------------------------------------------------------------

_ERRORS: dict[str, type[ConversationError]] = {
    kind.__name__: kind
    for kind in (
        StepLimitExceeded, ModelCallFailed, InvalidInput, ConversationGone, ConcurrentTurn, TurnClaimLost,
        ConversationSealed,
    )
}


def turn_result_from(data: dict[str, Any]) -> TurnResult:
    usage = {key: value for key, value in data.get("usage", {}).items() if key != "total_tokens"}
    return TurnResult(**{
        **data,
        "tool_calls": [ToolCallRecord(**call) for call in data.get("tool_calls", [])],
        "usage": Usage(**usage),
    })


def error_as_data(exc: ConversationError) -> dict[str, Any]:
    return {
        "kind": type(exc).__name__,
        "code": exc.code,
        "detail": str(exc),
        "partial": exc.partial.as_dict() if exc.partial is not None else None,
    }


def error_from(data: dict[str, Any], fallback: TurnResult) -> ConversationError:
    kinds = {**_ERRORS, AgentCodeFailed.__name__: AgentCodeFailed}
    partial = turn_result_from(data["partial"]) if data.get("partial") else fallback
    kind = kinds.get(data.get("kind", ""))
    if kind is None:
        plain = ConversationError(data.get("detail", ""), partial=partial)
        plain.code = data.get("code") or ConversationError.code
        return plain
    error: ConversationError = BaseException.__new__(kind)
    ConversationError.__init__(error, data.get("detail", ""), partial=partial)
    if isinstance(error, ModelCallFailed):
        error.provider_code = ""
    return error


def turn_deadline(claim: datetime) -> float:
    """Seconds the child may take: until its claim expires, less the parent's margin."""
    return (claim - timezone.now()).total_seconds() - CLAIM_MARGIN_SECONDS


def send_in_child(session: ConversationSession, agent: Agent, text: str) -> TurnResult:
    """One turn of runtime agent `agent` in a child process, on the claim `session` holds (the parent's side of
    conversation_send). The child writes the turn and gives the claim back; when it dies or overruns, the turn is
    written here as far as the conversation can tell (the user's message) and fails naming the entry."""
    conversation = session.conversation
    turn = conversation.turn_count
    fallback = TurnResult(conversation_id=conversation.pk, turn=turn, agent_chain=[agent.name])
    payload = {
        "conversation_id": conversation.pk, "claim": session.claim.isoformat() if session.claim else "",
        "text": text, "entry": agent.entry or agent.command, "runtime": agent.runtime,
    }
    try:
        answer = child_run(TURN, payload, deadline=turn_deadline(session.claim or claim_expiry()))
    except ChildFailed as exc:
        _write_failed_turn(session, agent, text, turn)
        what = f"{exc.how} at turn {turn}"
        raise AgentCodeFailed(_failure(agent.entry or agent.command, agent.runtime, what, exc.log_tail),
                              partial=fallback) from None
    if "error" in answer:
        raise error_from(answer["error"], fallback)
    return turn_result_from(answer["result"])


def _failure(entry: str, runtime: str, what: str, log_tail: str) -> str:
    message = f"the agent's code ({entry}, runtime {runtime}) {what}"
    if log_tail:
        message = f"{message}; the last it wrote: {redact_text(log_tail)}"
    return message


def _write_failed_turn(session: ConversationSession, agent: Agent, text: str, turn: int) -> None:
    """After the child died: the user's message and the turn count, as an in-process turn that failed writes them,
    unless the child wrote its turn before it died; and the claim given back."""
    pk = session.conversation.pk
    claim = session.claim
    if claim is not None:
        # The child may have renewed the claim; until its renewal expires nobody else can hold it, so a claim at or
        # past ours is the child's, and ours again now that it is gone.
        Conversation.objects.filter(pk=pk, turn_claimed_until__gte=claim).update(turn_claimed_until=claim)
    stored = Conversation.objects.filter(pk=pk).values_list("message_count", flat=True).first()
    if stored != session.first_seq:
        return
    session.add_message(turn=turn, role=Message.Role.USER, content=redact_text(text), agent_id=agent.pk)
    session.set_fields(turn_count=turn + 1)
    session.flush(release=True)


def turn_here(payload: dict[str, Any]) -> dict[str, Any]:
    """The child's side of send_in_child: the turn, on the parent's claim, written as conversation_send writes it."""
    conversation = Conversation.objects.select_related("agent").get(pk=payload["conversation_id"])
    claim = datetime.fromisoformat(payload["claim"]) if payload.get("claim") else None
    session = ConversationSession(conversation, claim=claim)
    try:
        result = run_send(session, payload["text"], flush=True)
    except ConversationError as exc:
        return {"error": error_as_data(exc)}
    return {"result": result.as_dict()}


def ended_here(payload: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """What the child answers when the team's code ended it from inside (`sys.exit()`, an interrupt)."""
    what = f"ended the process running it ({type(exc).__name__}{exc.args!r})"
    if payload.get("entry"):
        detail = _failure(payload["entry"], payload.get("runtime", ""), what, "")
    else:
        detail = f"the agent's code {what}"
    return {"error": {"kind": AgentCodeFailed.__name__, "code": AgentCodeFailed.code, "detail": detail,
                      "partial": None}}


# --- An entry's kind, checked at save; its tools -------------------------------------------------------------------

# (runtime, entry) → the tools its code offers, as a child read them: once per process, as an entry is imported once.
_tools: dict[tuple[str, str], list[dict[str, Any]]] = {}
_tools_lock = threading.Lock()

def entry_check_deadline() -> float:
    return float(settings.AGENTTEST_ENTRY_CHECK_TIMEOUT)


def entry_problems(runtime: str, entry: Any) -> dict[str, list[str]]:
    """What is wrong with an agent's runtime and entry, keyed by field. The entry is imported and checked in a child
    process (inspect_in_child): importing the team's module runs its code."""
    if runtime == Agent.Runtime.NATIVE:
        if entry:
            return {"entry": ["must be empty for the native runtime (agenttest's own loop runs the agent)"]}
        return {}
    if runtime not in runtime_names():
        return {"runtime": [f"must be one of: {', '.join(runtime_names())}; {runtime!r} is not available here"]}
    if not get_runtime(runtime).imports_entry:
        # The agent is a program its own fields name (runtimes/process.py), never imported.
        return {}
    if not entry:
        return {"entry": [f"runtime {runtime!r} needs the team's code to run: an entry point like "
                          '"shop.bot:respond"']}
    if problem := entry_format_problem(entry):
        return {"entry": [problem]}
    if team_code_refusal():
        return {}
    problem = inspect_in_child(runtime, entry)
    return {"entry": [problem]} if problem else {}


def inspect_in_child(runtime: str, entry: str, *, tools: bool = False) -> str:
    """What makes `entry` unusable by `runtime` ("" when nothing): imported and checked in a child process, never
    called, within AGENTTEST_ENTRY_CHECK_TIMEOUT. With `tools`, the tools it offers are read too (which calls an
    agent factory) and kept for entry_tools."""
    payload = {"runtime": runtime, "entry": entry, "tools": tools}
    try:
        answer = child_run(INSPECT, payload, deadline=entry_check_deadline())
    except ChildFailed as exc:
        tail = f"; the last it wrote: {redact_text(exc.log_tail)}" if exc.log_tail else ""
        return f"entry point {entry!r} could not be checked: importing and checking it {exc.how}{tail}"
    if "error" in answer:
        return f"entry point {entry!r} could not be checked: {answer['error']['detail']}"
    if tools:
        with _tools_lock:
            _tools[(runtime, entry)] = list(answer.get("tools", []))
    return str(answer.get("problem", ""))


def entry_tools(runtime: str, entry: str) -> list[dict[str, Any]]:
    """The tools the code at `entry` offers, as its runtime reads them (Runtime.tool_declarations), read in a child
    process once per process; none while the team's code is refused (a dry run) or when the entry is unusable."""
    if team_code_refusal():
        return []
    with _tools_lock:
        if (runtime, entry) in _tools:
            return _tools[(runtime, entry)]
    problem = inspect_in_child(runtime, entry, tools=True)
    with _tools_lock:
        return [] if problem else _tools.get((runtime, entry), [])


def deps_problems(runtime: str, deps: Any) -> dict[str, list[str]]:
    """What is wrong with an agent's deps factory, keyed by field: imported and checked in a child process, like the
    entry (importing the team's module runs its code), never called."""
    if problems := deps_format_problems(runtime, deps):
        return problems
    if not deps or team_code_refusal():
        return {}
    try:
        answer = child_run(INSPECT, {"deps": deps}, deadline=entry_check_deadline())
    except ChildFailed as exc:
        tail = f"; the last it wrote: {redact_text(exc.log_tail)}" if exc.log_tail else ""
        return {"deps": [f"deps factory {deps!r} could not be checked: importing it {exc.how}{tail}"]}
    if "error" in answer:
        return {"deps": [f"deps factory {deps!r} could not be checked: {answer['error']['detail']}"]}
    problem = str(answer.get("problem", ""))
    return {"deps": [problem]} if problem else {}


def inspect_here(payload: dict[str, Any]) -> dict[str, Any]:
    if "deps" in payload:
        return {"problem": deps_inspected_here(payload["deps"]), "tools": []}
    problem, tools = entry_inspected_here(payload["runtime"], payload["entry"], tools=bool(payload.get("tools")))
    return {"problem": problem, "tools": tools}


def runtime_tool_declarations(agent: Agent) -> list[dict[str, Any]]:
    """The tools of a non-native agent's code as agenttest declarations, each carrying its runtime and the effect the
    agent file declares for it, plus every name the file's `outside_effects` declares that the code did not show;
    [] for a native agent. When the entry point does not load, only the file's names (its own validation says why)."""
    if agent.runtime == Agent.Runtime.PROCESS and agent.protocol == "acp":
        # What an ACP agent asks of its client goes through the seam under these names (runtimes/acp.py).
        return client_declarations()
    if agent.runtime in ("", Agent.Runtime.NATIVE) or agent.runtime not in runtime_names() or not agent.entry:
        return []
    effects = {name: value for name, value in (agent.outside_effects or {}).items() if isinstance(name, str)}
    # In the web process read in a child (importing the team's module runs its code); none during a dry run.
    if team_code_kept_out():
        found = entry_tools(agent.runtime, agent.entry)
    else:
        found = entry_inspected_here(agent.runtime, agent.entry, tools=True)[1]
    declarations: dict[str, dict[str, Any]] = {}
    for declared in found:
        declarations.setdefault(declared["name"], {**declared, "runtime": agent.runtime})
    for name in effects:
        declarations.setdefault(name, {"name": name, "description": "", "parameters": {}, "runtime": agent.runtime})
    for declared in declarations.values():
        if isinstance(effects.get(declared["name"]), bool):
            declared["outside_effects"] = effects[declared["name"]]
    return list(declarations.values())
