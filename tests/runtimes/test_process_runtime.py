"""The `process` runtime, `protocol: jsonl` (issue 39): the team's agent is a program, started per turn and spoken to
over its stdio — one JSON line in, one JSON line back. Its fields are checked where an agent is saved; a program that
crashes, hangs, floods stdout or writes what is not a reply costs its case an Error naming it; nothing it started is
left running; under test it runs in a network namespace of its own, and never unsealed."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from agenthost.models import Agent
from agenthost.seams import get_model
from agenthost.services import conversation_send, conversation_start
from cases.files import agent_file, files_apply
from tests.runtimes.harness import AssertionPlan, CasePlan, TurnPlan, execute_case, suite_plan
from tests.runtimes.programs import PIDS, pid_file, still_running

pytestmark = pytest.mark.django_db(transaction=True)

# A jsonl agent as a team writes it in any language (here Python, run by the test's interpreter): reads a turn per
# line, answers a line. It says what it was given, so a test sees the protocol's fields and its environment.
ECHO = """
import json
import os
import sys

for line in sys.stdin:
    turn = json.loads(line)
    users = [m["content"] for m in turn["messages"] if m["role"] == "user"]
    seen = {"region": os.environ.get("SHOP_REGION"), "secret": os.environ.get("SHOP_SECRET")}
    reply = f"turn {turn['turn']}: you said {turn['message']!r} after {len(users) - 1} earlier message(s); {seen}"
    if turn["message"].startswith("structured"):
        print(json.dumps({"reply": "ignored", "output": {"order": "1042", "status": "shipped"}}), flush=True)
    else:
        print(json.dumps({"reply": reply}), flush=True)
"""
# Each leaves its pid and its own child's (a sleeping grandchild) in PIDS before it misbehaves.
MISBEHAVING_PREFIX = """
import os
import subprocess
import sys
import time

grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10_000)"])
with open(os.environ["PIDS"], "w") as pids:
    pids.write(f"{os.getpid()} {grandchild.pid}")
sys.stdin.readline()
"""
MISBEHAVIOURS = {
    "crash": ('sys.stderr.write("KeyError: the shop database is gone\\n"); sys.exit(3)',
              ["exited with code 3 without answering at turn 0",
               "the last it wrote to stderr: KeyError: the shop database is gone"]),
    "invalid JSON": ('print("Sure! Here is your order.", flush=True); time.sleep(10_000)',
                     ["wrote a line that is not JSON", "'Sure! Here is your order.'"]),
    "not a reply": ('print(\'{"text": "hi"}\', flush=True); time.sleep(10_000)',
                    ['wrote an object with neither "reply" (text) nor "output"']),
    "stdout flood": ('sys.stdout.write("x" * 3_000_000); sys.stdout.flush(); time.sleep(10_000)',
                     ["flooded its stdout: more than 1048576 bytes without a line end"]),
    "reported error": ('print(\'{"error": "no model key"}\', flush=True); time.sleep(10_000)',
                       ["reported an error: no model key"]),
}
# Sleeps instead of answering: the case's timeout ends it.
HANGS = MISBEHAVING_PREFIX + "time.sleep(10_000)\n"
# Calls the outside world itself (a tool implemented in the program), then answers what happened.
CALLS_OUT = """
import json
import os
import sys
import urllib.request

for line in sys.stdin:
    try:
        urllib.request.urlopen(urllib.request.Request(os.environ["SHOP_LISTENER"] + "/refund", data=b"42"), timeout=5)
        said = "refunded"
    except OSError as exc:
        said = f"could not refund: {exc}"
    print(json.dumps({"reply": said}), flush=True)
"""


def _program(tmp_path: Path, source: str, name: str = "agent.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def _agent(program: Path, *, env: list[str] | None = None) -> Agent:
    return Agent.objects.create(
        name="shop", runtime="process", command=sys.executable, args=[program.name], cwd=str(program.parent),
        env=env or [], protocol="jsonl", provider="scripted", model="scripted",
    )


# What a case whose program never answers asserts: it is the Error that is looked at.
ANSWERS_ABOUT_THE_ORDER = (AssertionPlan("outputContains", {"text": "order"}),)


def _plan(agent: Agent, *turns: str, assertions=ANSWERS_ABOUT_THE_ORDER) -> CasePlan:
    return CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan(text) for text in turns], assertions=list(assertions), mocks=[],
    )


def _payload(**overrides):
    # Any configured model will do (the scripted_model fixture configures it): the agent never answers.
    return {"name": "shop", "provider": "scripted", "model": "scripted", **overrides}


def test_it_creates_a_process_agent_through_the_api(admin_client_api, scripted_model, tmp_path):
    response = admin_client_api.post("/api/agents/", _payload(
        runtime="process", command=sys.executable, args=["agent.py"], cwd=str(tmp_path), env=["SHOP_REGION"],
        protocol="jsonl",
    ), format="json")

    assert response.status_code == 201, response.data
    shown = {field: response.data[field] for field in ("runtime", "command", "args", "cwd", "env", "protocol")}
    assert shown == {"runtime": "process", "command": sys.executable, "args": ["agent.py"], "cwd": str(tmp_path),
                     "env": ["SHOP_REGION"], "protocol": "jsonl"}


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"protocol": "jsonl"}, "command", "must name the program to start"),
        ({"command": "no-such-agent-program", "protocol": "jsonl"}, "command",
         "'no-such-agent-program' is not a program on PATH"),
        ({"command": "./agent.js", "protocol": "jsonl"}, "command",
         "'./agent.js' is not an executable file relative to `cwd`"),
        ({"command": "python3", "args": "agent.py", "protocol": "jsonl"}, "args", "must be a list of strings"),
        ({"command": "python3", "env": ["SHOP-REGION"], "protocol": "jsonl"}, "env",
         "'SHOP-REGION' is not an environment variable name"),
        ({"command": "python3", "env": ["OPENAI_API_KEY"], "protocol": "jsonl"}, "env",
         "OPENAI_API_KEY is agenttest's to set"),
        ({"command": "python3", "cwd": "no/such/dir", "protocol": "jsonl"}, "cwd", "'no/such/dir' is not a directory"),
        ({"command": "python3"}, "protocol", "must be one of: jsonl"),
        ({"command": "python3", "protocol": "grpc"}, "protocol", "must be one of: jsonl, acp"),
        ({"command": "python3", "protocol": "jsonl", "entry": "shop.bot:respond"}, "entry", "must be empty"),
    ],
)
def test_it_names_the_field_of_each_process_error(admin_client_api, scripted_model, overrides, field, fragment):
    response = admin_client_api.post("/api/agents/", _payload(runtime="process", **overrides), format="json")

    assert response.status_code == 400
    assert fragment in " ".join(str(message) for message in response.data[field]), response.data
    assert not Agent.objects.filter(name="shop").exists()


def test_it_refuses_a_program_for_an_agent_that_is_not_a_process(admin_client_api, scripted_model):
    response = admin_client_api.post(
        "/api/agents/", _payload(instruction="Help.", command="python3", args=["agent.py"]), format="json"
    )

    assert response.status_code == 400
    assert "only a process agent" in str(response.data["command"]), response.data
    assert "only a process agent" in str(response.data["args"]), response.data


def test_it_applies_and_exports_an_agent_file_of_a_process_agent(scripted_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _program(tmp_path, ECHO)
    (tmp_path / "files" / "agents").mkdir(parents=True)
    document = {
        "name": "shop", "runtime": "process", "command": "python3", "args": ["agent.py"], "env": ["SHOP_REGION"],
        "protocol": "jsonl", "model": "scripted:scripted",
    }
    (tmp_path / "files" / "agents" / "shop.yaml").write_text(yaml.safe_dump(document))

    files_apply(directory=tmp_path / "files")

    agent = Agent.objects.get(name="shop")
    assert (agent.runtime, agent.command, agent.args, agent.protocol) == ("process", "python3", ["agent.py"], "jsonl")
    assert agent_file(agent, "") == document


def test_it_answers_each_turn_of_a_case_with_the_programs_reply(scripted_model, tmp_path, monkeypatch):
    monkeypatch.setenv("SHOP_REGION", "eu")
    monkeypatch.setenv("SHOP_SECRET", "never-passed")
    agent = _agent(_program(tmp_path, ECHO), env=["SHOP_REGION"])
    plan = _plan(
        agent, "Where is order 1042?", "And 1043?",
        # The second turn's line carries the first; only the variables the agent file names reach the program.
        assertions=[AssertionPlan("outputContains", {
            "text": "turn 1: you said 'And 1043?' after 1 earlier message(s); {'region': 'eu', 'secret': None}"
        })],
    )

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite_plan(timeout=20.0))

    assert outcome.status == "passed", (outcome.reason, outcome.assertions)


def test_it_answers_a_chat_turn_with_the_programs_reply_and_structured_output(scripted_model, tmp_path, monkeypatch):
    monkeypatch.setenv("SHOP_REGION", "eu")
    monkeypatch.setenv("SHOP_SECRET", "never-passed")
    conversation = conversation_start(agent=_agent(_program(tmp_path, ECHO), env=["SHOP_REGION"]))

    first = conversation_send(conversation=conversation, text="Where is order 1042?")
    second = conversation_send(conversation=conversation, text="structured, please")

    assert first.output == (
        "turn 0: you said 'Where is order 1042?' after 0 earlier message(s); {'region': 'eu', 'secret': None}"
    )
    assert json.loads(second.output) == {"order": "1042", "status": "shipped"}


@pytest.mark.parametrize("misbehaviour", sorted(MISBEHAVIOURS))
def test_it_ends_the_case_with_an_error_naming_what_the_program_did(
    misbehaviour, scripted_model, tmp_path, monkeypatch
):
    pids = pid_file(tmp_path, monkeypatch)
    action, fragments = MISBEHAVIOURS[misbehaviour]
    agent = _agent(_program(tmp_path, MISBEHAVING_PREFIX + action + "\n"), env=[PIDS])

    outcome = execute_case(
        plan=_plan(agent, "Where is order 1042?"), model=get_model(scripted_model.key), suite=suite_plan(timeout=20.0)
    )

    assert outcome.status == "error", outcome.reason
    for fragment in fragments:
        assert fragment in outcome.reason
    assert f"the agent's program ({sys.executable} agent.py)" in outcome.reason
    # Neither the program nor what it started is left running.
    assert not still_running(pids)


def test_it_stops_a_program_that_hangs_at_the_case_timeout_and_leaves_nothing_running(
    scripted_model, tmp_path, monkeypatch
):
    pids = pid_file(tmp_path, monkeypatch)
    agent = _agent(_program(tmp_path, HANGS), env=[PIDS])

    outcome = execute_case(
        plan=_plan(agent, "Where is order 1042?"), model=get_model(scripted_model.key), suite=suite_plan(timeout=2)
    )

    assert outcome.status == "error", outcome.reason
    assert "timed out after 2 s" in outcome.reason or "did not answer within" in outcome.reason, outcome.reason
    assert not still_running(pids)


def test_it_runs_the_program_under_test_where_it_reaches_nothing(scripted_model, tmp_path, listener):
    agent = _agent(_program(tmp_path, CALLS_OUT), env=["SHOP_LISTENER"])

    outcome = execute_case(
        plan=_plan(agent, "Refund order 1042.", assertions=[AssertionPlan("outputContains", {"text": "refunded"})]),
        model=get_model(scripted_model.key), suite=suite_plan(timeout=20.0),
    )

    assert listener.received == []
    assert outcome.status == "error", outcome.reason
    port = listener.url.rsplit(":", 1)[1]
    assert f"the agent's program ({sys.executable} agent.py) tried to reach the network itself at turn 0: " \
        f"tcp 127.0.0.1:{port}" in outcome.reason, outcome.reason


@pytest.mark.parametrize("address", ["192.0.2.10", "[2001:db8::10]"])
def test_it_names_an_attempt_to_reach_an_address_beyond_the_machine(scripted_model, tmp_path, monkeypatch, address):
    # An address of a documentation range: nothing would answer it outside either; inside, nothing is sent at all.
    monkeypatch.setenv("SHOP_LISTENER", f"http://{address}:8443")
    agent = _agent(_program(tmp_path, CALLS_OUT), env=["SHOP_LISTENER"])

    outcome = execute_case(
        plan=_plan(agent, "Refund order 1042.", assertions=[AssertionPlan("outputContains", {"text": "refunded"})]),
        model=get_model(scripted_model.key), suite=suite_plan(timeout=20.0),
    )

    assert outcome.status == "error", outcome.reason
    assert f"tried to reach the network itself at turn 0: tcp {address}:8443" in outcome.reason, outcome.reason


def test_it_names_the_smallest_datagram_sent_anywhere_over_either_ip_version(scripted_model, tmp_path):
    # One byte each, to a name server of each documentation range: what a DNS lookup's first packet would be, cut short.
    program = _program(tmp_path, """
        import json
        import socket
        import sys

        for line in sys.stdin:
            for family, address in ((socket.AF_INET, "192.0.2.53"), (socket.AF_INET6, "2001:db8::53")):
                with socket.socket(family, socket.SOCK_DGRAM) as datagrams:
                    datagrams.sendto(b"?", (address, 53))
            print(json.dumps({"reply": "asked"}), flush=True)
    """)

    outcome = execute_case(
        plan=_plan(_agent(program), "Where is order 1042?"), model=get_model(scripted_model.key),
        suite=suite_plan(timeout=20.0),
    )

    assert outcome.status == "error", outcome.reason
    assert "tried to reach the network itself at turn 0: udp 192.0.2.53:53" in outcome.reason, outcome.reason
    assert "udp [2001:db8::53]:53" in outcome.reason, outcome.reason


def test_it_refuses_to_run_the_program_unsealed_where_no_sandbox_is_available(
    scripted_model, tmp_path, monkeypatch
):
    marker = tmp_path / "started"
    program = _program(tmp_path, f"open({str(marker)!r}, 'w').close()\nprint('{{\"reply\": \"ran\"}}')\n")
    agent = _agent(program)
    # A machine without util-linux's unshare: nothing to seal the program in.
    monkeypatch.setenv("PATH", str(tmp_path))

    outcome = execute_case(
        plan=_plan(agent, "Where is order 1042?"), model=get_model(scripted_model.key), suite=suite_plan(timeout=20.0)
    )

    assert outcome.status == "error", outcome.reason
    assert "runs under test only sealed in a network namespace of its own" in outcome.reason
    assert "no `unshare` on PATH" in outcome.reason
    assert not marker.exists()
