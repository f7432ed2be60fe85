"""The `process` runtime, `protocol: acp` (issue 39): agenttest is the ACP client of the team's program. The example
agent (examples/acp-agent/agent.py, the `agent-client-protocol` library's agent side) runs a turn on the scripted
model; its file write and terminal command go through the seam — mocked, blocked (no side effect) or run in chat in
the conversation's own directory; a program that crashes, writes what is not JSON-RPC or ignores session/cancel
costs its case an Error naming it, and leaves nothing running."""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message
from agenthost.runtimes.acp import conversation_directory
from agenthost.seams import get_model
from agenthost.services import conversation_send, conversation_start
from tests.order_tools import TRACK_ORDER
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, TurnPlan, execute_case, suite_plan
from tests.runtimes.programs import PIDS, pid_file, still_running

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "acp-agent" / "agent.py"
NOTE = "Order 1042: shipped, arrives Friday."
# What the scripted model has the agent do: look the order up (MCP), write the note (fs), check it (terminal).
TOOL_CALLS = Answer(tool_calls=[
    Call(TRACK_ORDER, {"order_id": "1042"}),
    Call("write_file", {"path": "note-1042.txt", "content": NOTE}),
    Call("run_command", {"command": "cat", "args": ["note-1042.txt"]}),
])
DONE = "The shipping note for order 1042 is written."
ASKED = "Write the shipping note for order 1042."

# Each leaves its pid and its own child's (a sleeping grandchild) in PIDS, answers initialize and session/new by hand
# (plain JSON-RPC lines), then misbehaves at session/prompt.
MISBEHAVING_PREFIX = """
import json
import os
import subprocess
import sys
import time

grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10_000)"])
with open(os.environ["PIDS"], "w") as pids:
    pids.write(f"{os.getpid()} {grandchild.pid}")


def answer(request, result):
    print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}), flush=True)


answer(json.loads(sys.stdin.readline()), {"protocolVersion": 1, "agentCapabilities": {}})
answer(json.loads(sys.stdin.readline()), {"sessionId": "s1"})
prompt = json.loads(sys.stdin.readline())
"""
MISBEHAVIOURS = {
    "crash": ('sys.stderr.write("KeyError: the repository is gone\\n"); sys.exit(3)',
              ["exited with code 3 without answering at turn 0",
               "the last it wrote to stderr: KeyError: the repository is gone"]),
    "invalid JSON-RPC": ('print("Sure! Working on it.", flush=True); time.sleep(10_000)',
                         ["wrote a line that is not JSON-RPC (not JSON", "'Sure! Working on it.'"]),
    "not a JSON-RPC message": ('print(\'{"text": "hi"}\', flush=True); time.sleep(10_000)',
                               ["wrote a line that is not a JSON-RPC 2.0 message"]),
    "stdout flood": ('sys.stdout.write("x" * 3_000_000); sys.stdout.flush(); time.sleep(10_000)',
                     ["flooded its stdout: more than 1048576 bytes without a line end"]),
    "prompt error": ('print(json.dumps({"jsonrpc": "2.0", "id": prompt["id"], "error": {"code": -32603, '
                     '"message": "no model key"}}), flush=True); time.sleep(10_000)',
                     ["answered session/prompt with an error", "no model key"]),
}
# Waits for session/cancel, then ignores it or ends its prompt as cancelled.
AT_THE_DEADLINE = {
    "ignores session/cancel": ("sys.stdin.readline()\ntime.sleep(10_000)\n",
                               "ignored session/cancel (its prompt had not ended 1 s after it), so it was killed"),
    "honours session/cancel": ('sys.stdin.readline()\nanswer(prompt, {"stopReason": "cancelled"})\n'
                               "time.sleep(10_000)\n",
                               "it was sent session/cancel and ended its prompt (cancelled)"),
}

# Asks permission for a tool call and reads notes.txt of its session's directory (plain JSON-RPC lines), then says
# what it was answered.
ASKS_AND_READS = """
import json
import sys


def read():
    return json.loads(sys.stdin.readline())


def send(message):
    print(json.dumps({"jsonrpc": "2.0", **message}), flush=True)


initialize = read()
send({"id": initialize["id"], "result": {"protocolVersion": 1, "agentCapabilities": {}}})
new = read()
send({"id": new["id"], "result": {"sessionId": "s1"}})
prompt = read()
send({"id": 100, "method": "session/request_permission", "params": {"sessionId": "s1", "toolCall": {
    "toolCallId": "call_1", "title": "Delete build/"}, "options": [
    {"optionId": "no", "name": "Reject", "kind": "reject_once"},
    {"optionId": "yes", "name": "Allow", "kind": "allow_once"}]}})
chosen = read()["result"]["outcome"]["optionId"]
send({"id": 101, "method": "fs/read_text_file", "params": {
    "sessionId": "s1", "path": new["params"]["cwd"] + "/notes.txt"}})
notes = read()["result"]["content"]
send({"method": "session/update", "params": {"sessionId": "s1", "update": {
    "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"{chosen} | {notes}"}}}})
send({"id": prompt["id"], "result": {"stopReason": "end_turn"}})
sys.stdin.read()
"""


@pytest.fixture(autouse=True)
def var_dir(settings, tmp_path):
    """A var directory of the test's own: conversation ids start again with each test database."""
    settings.VAR_DIR = tmp_path / "var"
    return settings.VAR_DIR


def _agent(program: Path, *, env: list[str] | None = None, functions: list | None = None) -> Agent:
    return Agent.objects.create(
        name="notes", runtime="process", command=sys.executable, args=[program.name], cwd=str(program.parent),
        env=env or [], protocol="acp", provider="scripted", model="scripted", functions=functions or [],
    )


def _example(tmp_path: Path) -> Agent:
    shutil.copy(EXAMPLE, tmp_path / "agent.py")
    return _agent(tmp_path / "agent.py", functions=[{"name": TRACK_ORDER}])


def _plan(agent: Agent, mocks: list[MockSpec], assertions: list[AssertionPlan]) -> CasePlan:
    return CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan(ASKED)], assertions=assertions, mocks=mocks,
    )




def test_it_runs_an_acp_turn_with_the_file_write_and_the_command_mocked(scripted_model, tmp_path):
    scripted_model.play(TOOL_CALLS, DONE)
    plan = _plan(_example(tmp_path), mocks=[
        MockSpec(TRACK_ORDER, '{"order_id": "1042", "status": "shipped"}'),
        MockSpec("fs_write_text_file", "written"),
        MockSpec("terminal_create", NOTE),
    ], assertions=[AssertionPlan("outputContains", {"text": "note for order 1042 is written"}),
                   AssertionPlan("toolCalled", {"function": "fs_write_text_file"})])

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite_plan(timeout=60.0))

    assert outcome.status == "passed", (outcome.reason, outcome.assertions)
    calls = [(call["name"], call["outcome"]) for call in outcome.tool_calls]
    assert calls[:3] == [(TRACK_ORDER, "mocked"), ("fs_write_text_file", "mocked"), ("terminal_create", "mocked")]
    # The agent's own account of its calls (session/update), with their last status, is the turn's transcript.
    reported = Message.objects.filter(conversation_id=outcome.conversation_id, role=Message.Role.TOOL_RESULT,
                                      outcome="reported")
    assert sorted(reported.values_list("function_name", "content")) == [
        ("acp_edit", "completed"), ("acp_execute", "completed"), ("acp_fetch", "completed"),
    ]
    # The mocked terminal's output reached the model as the command's.
    assert scripted_model.requests[1].messages[-1]["content"] == f"exit code 0: {NOTE}"
    assert not conversation_directory(outcome.conversation_id).exists()


def test_it_blocks_an_unmocked_file_write_with_no_side_effect(scripted_model, tmp_path):
    scripted_model.play(TOOL_CALLS, DONE)
    plan = _plan(_example(tmp_path), mocks=[MockSpec(TRACK_ORDER, '{"order_id": "1042", "status": "shipped"}')],
                 assertions=[AssertionPlan("outputContains", {"text": "written"})])

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite_plan(timeout=60.0))

    assert outcome.status == "failed", outcome.reason
    assert "fs_write_text_file" in outcome.reason
    assert [(call["name"], call["outcome"]) for call in outcome.tool_calls][:2] == [
        (TRACK_ORDER, "mocked"), ("fs_write_text_file", "blocked"),
    ]
    assert not (conversation_directory(outcome.conversation_id) / "note-1042.txt").exists()
    # The turn ended at the block: the command was never asked for, the model never asked again.
    assert "terminal_create" not in [call["name"] for call in outcome.tool_calls]
    assert len(scripted_model.requests) == 1


def test_it_writes_the_file_and_runs_the_command_in_the_conversations_directory_in_chat(scripted_model, tmp_path):
    scripted_model.play(TOOL_CALLS, DONE)
    conversation = conversation_start(agent=_example(tmp_path))

    result = conversation_send(conversation=conversation, text=ASKED)

    assert result.output == DONE
    assert (conversation_directory(conversation.pk) / "note-1042.txt").read_text() == NOTE
    # The command ran there, on the written file; the real lookup answered over MCP.
    tool_results = [m["content"] for m in scripted_model.requests[1].messages if m["role"] == "tool"]
    assert tool_results[1:] == ["wrote note-1042.txt", f"exit code 0: {NOTE}"]
    assert '"order_id": "1042"' in tool_results[0]


def test_it_answers_a_permission_and_a_file_read_from_the_cases_mocks(scripted_model, tmp_path):
    (tmp_path / "agent.py").write_text(textwrap.dedent(ASKS_AND_READS))
    plan = _plan(_agent(tmp_path / "agent.py"), mocks=[
        MockSpec("session_request_permission", "no"), MockSpec("fs_read_text_file", "ship on Friday"),
    ], assertions=[AssertionPlan("outputContains", {"text": "no | ship on Friday"})])

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite_plan(timeout=60.0))

    assert outcome.status == "passed", (outcome.reason, outcome.assertions)
    assert [(call["name"], call["outcome"]) for call in outcome.tool_calls] == [
        ("session_request_permission", "mocked"), ("fs_read_text_file", "mocked"),
    ]


def test_it_grants_a_permission_once_and_reads_the_conversations_directory_in_chat(scripted_model, tmp_path):
    (tmp_path / "agent.py").write_text(textwrap.dedent(ASKS_AND_READS))
    conversation = conversation_start(agent=_agent(tmp_path / "agent.py"))
    conversation_directory(conversation.pk).mkdir(parents=True)
    (conversation_directory(conversation.pk) / "notes.txt").write_text("ship on Monday")

    result = conversation_send(conversation=conversation, text="Clean the build.")

    assert result.output == "yes | ship on Monday"


@pytest.mark.parametrize("misbehaviour", sorted(MISBEHAVIOURS))
def test_it_ends_the_case_with_an_error_naming_what_the_acp_program_did(
    misbehaviour, scripted_model, tmp_path, monkeypatch
):
    pids = pid_file(tmp_path, monkeypatch)
    action, fragments = MISBEHAVIOURS[misbehaviour]
    (tmp_path / "agent.py").write_text(textwrap.dedent(MISBEHAVING_PREFIX) + action + "\n")
    plan = _plan(_agent(tmp_path / "agent.py", env=[PIDS]), mocks=[],
                 assertions=[AssertionPlan("outputContains", {"text": "note"})])

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite_plan(timeout=60.0))

    assert outcome.status == "error", outcome.reason
    assert f"the agent's program ({sys.executable} agent.py, ACP)" in outcome.reason
    for fragment in fragments:
        assert fragment in outcome.reason, outcome.reason
    assert not still_running(pids)


@pytest.mark.parametrize("behaviour", sorted(AT_THE_DEADLINE))
def test_it_sends_session_cancel_at_the_case_deadline_and_says_how_the_program_took_it(
    behaviour, scripted_model, tmp_path, monkeypatch
):
    pids = pid_file(tmp_path, monkeypatch)
    action, said = AT_THE_DEADLINE[behaviour]
    (tmp_path / "agent.py").write_text(textwrap.dedent(MISBEHAVING_PREFIX) + action)
    plan = _plan(_agent(tmp_path / "agent.py", env=[PIDS]), mocks=[],
                 assertions=[AssertionPlan("outputContains", {"text": "note"})])

    # 4 s: the program must have answered initialize and session/new before the deadline, which a slow machine's
    # interpreter start did not within 1 s (CI: "did not answer initialize within the turn's 1 s").
    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite_plan(timeout=4))

    assert outcome.status == "error", outcome.reason
    # (What is left of the case's seconds when the turn starts is the turn's budget, as said.)
    assert re.fullmatch(rf"the case timed out after 4 s; the agent's program did not answer within the turn's \d s"
                        rf"(;| and) {re.escape(said)}", outcome.reason), outcome.reason
    assert not still_running(pids)


def test_it_stops_a_program_that_never_answers_initialize_at_the_case_deadline(scripted_model, tmp_path, monkeypatch):
    pids = pid_file(tmp_path, monkeypatch)
    (tmp_path / "agent.py").write_text(
        "import os, sys, time\nopen(os.environ['PIDS'], 'w').write(str(os.getpid()))\nsys.stdin.readline()\n"
        "time.sleep(10_000)\n"
    )
    plan = _plan(_agent(tmp_path / "agent.py", env=[PIDS]), mocks=[],
                 assertions=[AssertionPlan("outputContains", {"text": "note"})])

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite_plan(timeout=1))

    assert re.fullmatch(r"the case timed out after 1 s; the agent's program did not answer initialize within the "
                        r"turn's \d s, so it was killed", outcome.reason), outcome.reason
    assert not still_running(pids)


def _snapshot(outcome) -> dict:
    return next(item for item in outcome.assertions if item["type"] == "snapshotMatches")


def test_it_compares_what_the_acp_program_said_with_its_snapshot_and_names_what_changed(scripted_model, tmp_path):
    agent = _example(tmp_path)
    mocks = [MockSpec(TRACK_ORDER, '{"order_id": "1042", "status": "shipped"}'),
             MockSpec("fs_write_text_file", "written"), MockSpec("terminal_create", NOTE)]

    def run(expected, **suite):
        scripted_model.play(TOOL_CALLS, DONE)
        plan = _plan(agent, mocks=mocks, assertions=[AssertionPlan("snapshotMatches", {"expected": expected})])
        return execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite_plan(timeout=60.0, **suite))

    first = run(None)

    assert first.status == "failed"
    assert "no snapshot to compare with yet (7 entries said)" in _snapshot(first)["message"]
    said = _snapshot(first)["actual"]
    # Normalised: ids numbered, the conversation's directory named, the streamed answer one entry.
    assert [entry["update"]["sessionUpdate"] for entry in said] == ["tool_call", "tool_call_update"] * 3 + [
        "agent_message_chunk"
    ]
    assert {entry["update"]["toolCallId"] for entry in said[:6]} == {"<toolCallId 1>", "<toolCallId 2>",
                                                                       "<toolCallId 3>"}
    assert said[-1]["update"]["content"] == {"type": "text", "text": DONE}
    assert str(tmp_path) not in str(said) and f"/{first.conversation_id}" not in str(said)

    again = run(said)

    assert again.status == "passed", again.assertions
    assert _snapshot(again)["actual"] == said

    (tmp_path / "agent.py").write_text((tmp_path / "agent.py").read_text().replace('"write_file": "edit"',
                                                                                  '"write_file": "other"'))
    changed = run(said)

    assert changed.status == "failed"
    message = _snapshot(changed)["message"]
    assert '-{"turn": 0, "update": {"kind": "edit"' in message and '+{"turn": 0, "update": {"kind": "other"' in message

    updated = run(said, update_snapshots=True)

    assert updated.status == "passed"
    assert _snapshot(updated)["message"] == "snapshot written: 7 entries (was 7 entries)"
    assert _snapshot(updated)["actual"][2]["update"]["kind"] == "other"


def test_it_serves_its_mcp_gateway_over_stdio_to_an_agent_that_takes_no_http_server(scripted_model, tmp_path):
    agent = _example(tmp_path)
    program = tmp_path / "agent.py"
    # An agent that says it takes no HTTP server, and this copy could not use one if it were offered.
    program.write_text(program.read_text().replace("TAKES_HTTP = True", "TAKES_HTTP = False").replace(
        'if getattr(self._server, "type", "") == "http":', "if False:"))
    scripted_model.play(TOOL_CALLS, DONE)
    plan = _plan(agent, mocks=[
        MockSpec(TRACK_ORDER, '{"order_id": "1042", "status": "shipped"}'),
        MockSpec("fs_write_text_file", "written"),
        MockSpec("terminal_create", NOTE),
    ], assertions=[AssertionPlan("toolCalled", {"function": TRACK_ORDER, "arguments": {"order_id": "1042"}})])

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite_plan(timeout=60.0))

    assert outcome.status == "passed", (outcome.reason, outcome.assertions)
    assert [(call["name"], call["outcome"]) for call in outcome.tool_calls][0] == (TRACK_ORDER, "mocked")
    # The tool reached the model from the stdio relay as it does over HTTP: the mock's answer, the same declaration.
    answered = [message["content"] for message in scripted_model.requests[1].messages if message["role"] == "tool"]
    assert answered[0] == '{"order_id": "1042", "status": "shipped"}'
    assert TRACK_ORDER in str(scripted_model.requests[0].tools)
