"""A team's repository on disk, importable the way an agent's entry point is (from the current directory)."""

from __future__ import annotations

import os
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.testing.openai_stub import OpenAIStub
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult
from runs.services import run_create, run_execute

# The team's plain-Python agent, as a team writes it against the openai SDK: its own instruction, tool schemas and
# loop. `send_email` has an effect outside the program (it writes a marker file); `find_order` only reads.
SHOP_BOT = '''
import json
import os
from pathlib import Path

INSTRUCTION = "You are the shop's assistant. Look orders up before answering."
MARKERS = Path(os.environ.get("SHOP_MARKERS", "markers"))

TOOLS = [
    {"type": "function", "function": {
        "name": "find_order", "description": "Find an order by its number.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {
        "name": "send_email", "description": "Email the customer.",
        "parameters": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                       "required": ["to", "body"]}}},
]


def find_order(order_id):
    return {"order_id": order_id, "status": "shipped"}


def send_email(to, body):
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"email-{len(list(MARKERS.iterdir()))}").write_text(f"{to}: {body}")
    return "sent"


FUNCTIONS = {"find_order": find_order, "send_email": send_email}


def respond(messages, client, tools):
    conversation = [{"role": "system", "content": INSTRUCTION}, *messages]
    for _ in range(5):
        completion = client.chat.completions.create(
            model="gpt-4o-mini", messages=conversation, tools=TOOLS, temperature=0.2
        )
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        conversation.append({
            "role": "assistant", "content": message.content,
            "tool_calls": [call.model_dump() for call in message.tool_calls],
        })
        for call in message.tool_calls:
            result = tools.call(FUNCTIONS[call.function.name], call.function.arguments, call_id=call.id)
            conversation.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return "I could not finish."
'''


@pytest.fixture
def team_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Writes the team's package (a fresh module name per test: an entry point is imported once per process) into a
    directory that becomes the current directory, and returns a writer: source → the package name."""
    monkeypatch.chdir(tmp_path)
    markers = tmp_path / "markers"
    monkeypatch.setenv("SHOP_MARKERS", str(markers))
    names: list[str] = []

    def write(source: str = SHOP_BOT) -> str:
        package = f"shop_{uuid.uuid4().hex[:8]}"
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "bot.py").write_text(textwrap.dedent(source))
        names.append(package)
        return package

    yield write
    for package in names:
        for name in [name for name in sys.modules if name == package or name.startswith(f"{package}.")]:
            del sys.modules[name]
    if str(tmp_path) in sys.path and os.getcwd() != str(tmp_path):
        sys.path.remove(str(tmp_path))


def markers(root: Path) -> list[Path]:
    folder = root / "markers"
    return sorted(folder.iterdir()) if folder.exists() else []


@pytest.fixture
def openai_stub() -> Iterator[OpenAIStub]:
    # A runtime sends the request the team's code built, as it built it: the Agents SDK writes `content: null` beside
    # tool calls, which OpenAI takes and llama.cpp refuses — the framework's choice, the same when it runs alone. So
    # these tests talk to a stub as lenient as OpenAI; the native loop's requests are held to the strict one elsewhere.
    with OpenAIStub(strict_content=False) as stub:
        yield stub


STUB_MODEL = "stub:gpt-4o-mini"


def stub_provider(base_url: str, timeout: float = 10.0) -> dict:
    """The local stub as a configured openai provider named `stub`, serving gpt-4o-mini."""
    return {
        "kind": "openai", "base_url": base_url, "api_key_env": "", "timeout": timeout, "max_retries": 0,
        "models": [{"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.6, "label": ""}],
    }


def find_order_answer(body: dict) -> Answer | str:
    """The model of every runtime's shop: look the order up, then answer with what the tool said."""
    if body["messages"][-1]["role"] == "tool":
        return f"Your order: {body['messages'][-1]['content']}"
    return Answer(tool_calls=[Call("find_order", {"order_id": "1042"})])


@pytest.fixture
def stub(openai_stub, settings) -> OpenAIStub:
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": stub_provider(openai_stub.base_url)}
    openai_stub.respond_with(find_order_answer)
    return openai_stub


def suite_finding_order(agent: Agent, *, timeout: int = 20, expects_text: bool = True) -> Suite:
    """A suite of one case: "Where is order 1042?", find_order mocked "in transit", and asserted called."""
    suite = Suite.objects.create(name="shop", agent=agent, case_timeout_seconds=timeout)
    case = Case.objects.create(suite=suite, name="finds the order")
    Turn.objects.create(case=case, position=0, user_message="Where is order 1042?")
    Mock.objects.create(case=case, position=0, function_name="find_order", result='{"status": "in transit"}')
    Assertion.objects.create(case=case, position=0, type="toolCalled", params={"function": "find_order"})
    if expects_text:
        Assertion.objects.create(case=case, position=1, type="outputContains", params={"text": "in transit"})
    return suite


def execute_suite(suite: Suite, mode: str = "live") -> CaseResult:
    """Runs the suite's one case on the stub in `mode`, in this process, and gives its result."""
    run = run_execute(run_id=run_create(suite=suite, model_keys=[STUB_MODEL], mode=mode).pk)
    return CaseResult.objects.get(run=run)


class Listener:
    """A local HTTP listener standing in for the outside world a team's tool reaches (a bank, a CRM): each POST it
    receives is one side effect that happened for real."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        received: list[tuple[str, str]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 — http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                received.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    """The listener, its address in SHOP_LISTENER for the team's code."""
    started = Listener()
    monkeypatch.setenv("SHOP_LISTENER", started.url)
    yield started
    started.close()
