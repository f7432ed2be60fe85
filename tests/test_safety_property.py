"""The one promise, attacked with generated input: whatever an agent declares, whatever a suite allows or blocks and
whatever names the model under test produces, no side-effecting function runs during a test.

Each example builds an agent, a suite (written straight to the database, so a setting the save-time checks would
refuse still reaches the runner) and a case, then executes a real run. The model is the scripted provider; every
side effect is counted where it would land: email files in a directory, HTTP and Twilio requests at a local
listener, and every stored tool result of a side-effecting function.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost.builtins.control import CONTROL_FLOW_FUNCTIONS
from agenthost.functions import registered_functions
from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.engine.mocking import CANARY_FUNCTION
from runs.models import CaseResult
from runs.services import run_create, run_execute
from tests.properties import SUPPRESSED_WITH_FIXTURES

pytestmark = pytest.mark.slow

SIDE_EFFECTING = sorted(name for name, fn in registered_functions().items() if not fn.effect_free)
EFFECT_FREE = sorted(name for name, fn in registered_functions().items() if fn.effect_free)
# Letters a model (or an injected prompt) can swap for look-alikes: Cyrillic а, е, о, р and a zero-width space.
LOOK_ALIKES = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "p": "\u0440", "_": "_\u200b"}


class _Listener:
    """A local HTTP server that stands in for every outside service and counts what reached it."""

    def __init__(self) -> None:
        self.received: list[str] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                listener.received.append(f"{self.command} {self.path}")
                body = b'{"sid": "SM1", "status": "queued"}'
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def outside_world(settings, tmp_path) -> Iterator[tuple[_Listener, Path]]:
    """Every side-effecting built-in configured to really work, pointed at places this test can count."""
    listener = _Listener()
    mail_dir = tmp_path / "mail"
    mail_dir.mkdir()
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(mail_dir)
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{listener.port}"]
    settings.AGENTTEST_TWILIO_ACCOUNT_SID = "AC123"
    settings.AGENTTEST_TWILIO_AUTH_TOKEN = "twilio-token"
    settings.AGENTTEST_TWILIO_FROM = "+14155550100"
    settings.AGENTTEST_TWILIO_API_BASE = f"http://127.0.0.1:{listener.port}"
    settings.AGENTTEST_SQL_DATABASE = "default"
    yield listener, mail_dir
    listener.close()


def _arguments(name: str, port: int) -> dict[str, Any]:
    """Arguments that would make the real function succeed, so only the harness stands between the call and the
    outside world."""
    base = name.strip().casefold()
    if "email" in base:
        return {"to": "victim@example.com", "subject": "hi", "body": "sent by a test"}
    if "http" in base:
        return {"method": "POST", "url": f"http://127.0.0.1:{port}/hook", "body": "x"}
    if "sql" in base:
        return {"sql": "SELECT 1"}
    if "text_message" in base:
        return {"to": "+14155550111", "body": "sent by a test"}
    if "phone_call" in base:
        return {"to": "+14155550111", "twiml": "<Response><Say>hi</Say></Response>"}
    if "cancel_order" in base or "lookup_order" in base:
        return {"order_id": "1043"}
    return {}


def _variants(name: str) -> st.SearchStrategy[str]:
    """The name as the model might mangle it: case, surrounding whitespace, a look-alike letter."""
    look_alike = next((name.replace(c, r, 1) for c, r in LOOK_ALIKES.items() if c in name), name + "\u200b")
    return st.sampled_from([name, name.upper(), name.title(), f" {name}", f"{name} ", f"{name}\n", look_alike])


all_names = SIDE_EFFECTING + EFFECT_FREE
model_names = st.one_of(
    st.sampled_from(all_names),
    st.sampled_from(SIDE_EFFECTING).flatmap(_variants),
    st.just(CANARY_FUNCTION),
    st.sampled_from(["send_email", "util-email", "util-", "util-*", "*", "shell", "exec"]),
)
scenarios = st.fixed_dictionaries(
    {
        "declared": st.lists(st.sampled_from([*all_names, CANARY_FUNCTION]), unique=True, max_size=6),
        "static": st.booleans(),
        "extra_allowed": st.lists(st.one_of(st.sampled_from(all_names), model_names), unique=True, max_size=5),
        "force_blocked": st.lists(st.one_of(st.sampled_from(all_names), model_names), unique=True, max_size=3),
        "mocked": st.lists(st.sampled_from(all_names), unique=True, max_size=3),
        "calls": st.lists(st.lists(model_names, min_size=1, max_size=4), min_size=1, max_size=3),
    }
)

_counter = itertools.count()


def _build(scenario: dict[str, Any]) -> tuple[Suite, Case]:
    n = next(_counter)
    functions: list[dict[str, Any]] = [{"name": name} for name in scenario["declared"]]
    if scenario["static"]:
        # A declaration with a static output for a side-effecting name: the registered function still wins at
        # resolution, so the harness must not treat it as effect-free.
        functions.append({"name": SIDE_EFFECTING[n % len(SIDE_EFFECTING)], "output": "static"})
    agent = Agent.objects.create(
        name=f"prop-agent-{n}", instruction="Help.", provider="scripted", model="scripted", functions=functions
    )
    suite = Suite.objects.create(
        name=f"prop-suite-{n}",
        agent=agent,
        extra_allowed_functions=scenario["extra_allowed"],
        force_blocked_functions=scenario["force_blocked"],
        case_timeout_seconds=30,
    )
    case = Case.objects.create(suite=suite, name="case")
    for position, _calls in enumerate(scenario["calls"]):
        Turn.objects.create(case=case, position=position, user_message=f"turn {position}")
    for position, name in enumerate(scenario["mocked"]):
        Mock.objects.create(case=case, position=position, function_name=name, result='{"mocked": true}')
    Assertion.objects.create(case=case, type="noBlockedTools", params={})
    return suite, case


def _side_effecting_results() -> list[tuple[str, str]]:
    """Stored tool results of side-effecting functions that were answered by their real implementation."""
    rows = Message.objects.filter(role=Message.Role.TOOL_RESULT, function_name__in=SIDE_EFFECTING)
    not_run = ("mocked", "blocked", "unavailable", "skipped", "invalid")
    return [(m.function_name, m.outcome) for m in rows if m.outcome not in not_run]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=SUPPRESSED_WITH_FIXTURES,
)
@given(scenario=scenarios)
def test_it_never_executes_a_side_effecting_function_in_a_run(
    transactional_db, scripted_model, outside_world, scenario
):
    listener, mail_dir = outside_world
    suite, _case = _build(scenario)
    turns = iter(scenario["calls"])

    def respond(request: ModelRequest) -> Any:
        # A fresh user message gets the scenario's tool calls for that turn; anything after a tool result ends it.
        if request.messages[-1]["role"] == "user":
            names = next(turns, [])
            return Answer(tool_calls=[Call(name, _arguments(name, listener.port)) for name in names])
        return "done"

    scripted_model.respond_with(respond)
    run = run_create(suite=suite, model_keys=[scripted_model.key])
    run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert run.is_finished, (run.status, run.reason)
    assert CaseResult.objects.filter(run=run).count() == 1
    assert listener.received == [], f"requests reached the outside world: {listener.received}"
    assert list(mail_dir.iterdir()) == [], "an email was written"
    assert _side_effecting_results() == []
    # Every call the model made is accounted for in the result, none silently answered.
    result = CaseResult.objects.get(run=run)
    observed = [call["outcome"] for call in result.tool_calls]
    assert all(outcome in ("mocked", "blocked", "allowed", "unavailable") for outcome in observed), observed
    # The harness's canary answers only the harness: the model calling it gets no token.
    canary = [call for call in result.tool_calls if call["name"] == CANARY_FUNCTION]
    assert all(call["outcome"] in ("blocked", "unavailable") for call in canary), canary
    assert not Message.objects.filter(function_name=CANARY_FUNCTION, outcome="mocked").exists()


def test_it_counts_effects_at_the_listeners_outside_a_test(transactional_db, scripted_model, outside_world):
    """The counting above can see an effect: outside a test the same calls really reach the listener and the mail
    directory (so a zero in the property test is not a blind spot)."""
    from agenthost.services import conversation_send, conversation_start

    listener, mail_dir = outside_world
    agent = Agent.objects.create(
        name="really-sends",
        instruction="Help.",
        provider="scripted",
        model="scripted",
        functions=[{"name": "util-email-handle_email_sender"}, {"name": "util-http-handle_http_request"}],
    )
    scripted_model.play(
        Answer(
            tool_calls=[
                Call("util-email-handle_email_sender", _arguments("email", listener.port)),
                Call("util-http-handle_http_request", _arguments("http", listener.port)),
            ]
        ),
        "done",
    )
    conversation = conversation_start(agent=agent)
    conversation_send(conversation=conversation, text="go")
    assert listener.received == ["POST /hook"]
    assert len(list(mail_dir.iterdir())) == 1
    assert sorted(_side_effecting_results()) == [
        ("util-email-handle_email_sender", "executed"),
        ("util-http-handle_http_request", "executed"),
    ]
    assert set(CONTROL_FLOW_FUNCTIONS) <= set(EFFECT_FREE)
