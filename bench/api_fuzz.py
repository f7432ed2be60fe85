"""API fuzz: every operation of the OpenAPI schema (/api/schema/), driven by schemathesis as a staff superuser.

    python bench/api_fuzz.py [--examples 20] [--seconds 150] [--floor 0] [--database-url postgres://…] [--seed N]

Each operation gets up to `--examples` positive cases (valid per the schema) and as many negative ones (invalid on
purpose), sent in-process through Django's test client with a DRF token. In half the cases the path ids, and in half
the positive ones the ids, names and models in the body, are swapped for real ones, so requests reach past the 404s
and the "no such model" errors: the objects the fuzz seeds (`fuzz_data_ensure`) — a router with two sub-agents whose
functions are declared inline, three conversations played with it, a suite of eight cases (mocks, a stateful table, a
blocked tool, several assertion types) and one finished run of it on `scripted:careful` with its results.
Operations that delete come last. Past `--seconds`, each operation still gets its `--floor` cases of each kind
and no more, and the report lists the operations cut short: how far the fuzz got depends on the machine's speed,
which operations it reached does not. The first case of each operation and kind takes the real ids (and, positive,
the real body values), so even a floor of one gets past the 404s.

A response fails when it is a 5xx, or a 400 that does not name its field: `{"errors": [{"field", "message"}]}` or
DRF's `{"<field>": [...]}` must name a parameter or body field of the request, a key it sent, or the body as a whole
("document", "non_field_errors"); a `{"detail": ...}` concerns no field.
Runs are queued on an embedded broker in a temporary file that nothing consumes; the models are two of the host's own
scripted kind, `scripted:careful` and `scripted:hasty` (free, answering every request by `scripted_answer`, in-process:
no plugin, no network); any connection beyond the loopback address is refused and reported. tests/test_api_fuzz.py runs
the same fuzz.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import socket
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as a script, Python puts bench/ first on the path; the project packages live one level up.
    sys.path.insert(0, str(ROOT))

from bench.harness_overhead import BenchError, scratch_database  # noqa: E402

SCHEMA_PATH = "/api/schema/?format=json"
FUZZ_USERNAME = "fuzz-admin"
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
# An error about the body as a whole (not a JSON object) names no field, and says so: "document" in the harness APIs'
# `errors`, DRF's "non_field_errors" in the host's.
WHOLE_BODY = frozenset({"document", "non_field_errors"})
_FIELD_ROOT = re.compile(r"[.\[]")


class FuzzError(Exception):
    """The fuzz could not run (no schema, a database it cannot create)."""


@dataclass
class Failure:
    kind: str  # "server error" or "unnamed validation error"
    operation: str
    request: str
    status: int
    response: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.operation} -> {self.status}\n  request: {self.request}\n  response: {self.response}"


@dataclass
class FuzzReport:
    """Counts per status and per operation ("POST /api/runs/"); `reached` counts answers other than 404, i.e.
    requests that found the object their path names."""

    operations: int = 0
    requests: int = 0
    seconds: float = 0.0
    # "GET /api/runs/ (positive)": what got fewer cases than asked because the time ran out.
    cut_short: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    per_operation: Counter[str] = field(default_factory=Counter)
    successes: Counter[str] = field(default_factory=Counter)
    reached: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    refused_connections: list[str] = field(default_factory=list)
    unsatisfiable: list[str] = field(default_factory=list)

    @property
    def timed_out(self) -> bool:
        return bool(self.cut_short)

    @property
    def server_errors(self) -> int:
        return sum(count for code, count in self.statuses.items() if code >= 500)


# --- Hermetic surroundings ----------------------------------------------------------------------------------------


def hermetic_settings(broker_dir: Path) -> dict[str, Any]:
    """Setting overrides that keep the fuzz off the network and off the real run queue."""
    return {
        # Runs are created Pending and queued in this file; nothing consumes them.
        "CELERY_BROKER_URL": f"sqla+sqlite:///{broker_dir / 'fuzz-broker.sqlite3'}",
        # Only the scripted models (scripted_models() makes them answer), whatever OPENAI_API_KEY or a providers
        # file says.
        "AGENTTEST_PROVIDERS": {SCRIPTED_PROVIDER: scripted_provider_config()},
        "AGENTTEST_HTTP_ALLOWED_HOSTS": [],
        "AGENTTEST_TWILIO_ACCOUNT_SID": "",
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
    }


@contextlib.contextmanager
def celery_broker(url: str) -> Iterator[None]:
    """Publish to `url` for the duration. The Celery app reads its broker once and keeps its connection pools;
    dropping them makes the next publish connect to the broker set now (what Celery itself does after a fork)."""
    from agenttest.celery import app

    previous = app.conf.broker_url
    app.conf.broker_url = url
    app._pool = None
    app.amqp._producer_pool = None
    try:
        yield
    finally:
        app.conf.broker_url = previous
        app._pool = None
        app.amqp._producer_pool = None


@contextlib.contextmanager
def loopback_only(refused: list[str]) -> Iterator[None]:
    """Refuse (and note in `refused`) every IP connection this process opens to anything but the loopback address."""
    original_connect, original_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            refused.append(f"{address[0]}:{address[1]}")
            raise ConnectionRefusedError(f"the API fuzz allows no network beyond 127.0.0.1 (tried {address[0]})")

    def connect(sock: socket.socket, address: Any) -> None:
        check(sock, address)
        return original_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        check(sock, address)
        return original_connect_ex(sock, address)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex = original_connect, original_connect_ex


# --- Data ---------------------------------------------------------------------------------------------------------

# The models: two of the host's own scripted kind, free, answering by `scripted_answer` (no network, no randomness).
SCRIPTED_PROVIDER = "scripted"
CAREFUL_MODEL = f"{SCRIPTED_PROVIDER}:careful"
HASTY_MODEL = f"{SCRIPTED_PROVIDER}:hasty"
MODEL_KEYS = (CAREFUL_MODEL, HASTY_MODEL)

# The seed: a parcel desk that routes to two sub-agents, whose functions are declared inline (a static `output`
# answers them outside a test run; a case's mocks answer them in one), so no plugin needs to register anything.
DESK = "parcel-desk"
TRACKER = "parcel-tracker"
RETURNS = "parcel-returns"
LOCATE = "locate_parcel"
BOOK_RETURN = "book_return"
EMAIL = "util-email-handle_email_sender"  # the host's built-in, with outside effects
FALLBACK = "util-routing-fallback_to_router"
ROUTE = "route_to_agent"
SEED_TAG = "fuzz-seed"
SEED_SUITE = "Parcel desk (API fuzz)"

_PARCEL_ID = {"type": "string", "description": "The parcel number, e.g. 1042."}
_FUNCTIONS = {
    LOCATE: {
        "name": LOCATE,
        "description": "Look a parcel up by its number: where it is and the customer's email.",
        "parameters": {"type": "object", "properties": {"parcel_id": _PARCEL_ID}, "required": ["parcel_id"]},
        "output": {"status": "in transit", "depot": "Leeds"},
    },
    BOOK_RETURN: {
        "name": BOOK_RETURN,
        "description": "Book the return of a delivered parcel and give its return label.",
        "parameters": {
            "type": "object",
            "properties": {"parcel_id": _PARCEL_ID, "reason": {"type": "string", "description": "Why it goes back."}},
            "required": ["parcel_id"],
        },
        "output": {"return_booked": True, "label": "RL-0001"},
    },
}
_SEED_AGENTS = (
    # Sub-agents before the router that names them.
    (TRACKER, "Tracks parcels: where a parcel is, for its number.", (_FUNCTIONS[LOCATE],), ()),
    (RETURNS, "Books returns of delivered parcels and emails the customer the label.",
     (_FUNCTIONS[LOCATE], _FUNCTIONS[BOOK_RETURN], {"name": EMAIL}), ()),
    (DESK, "Routes parcel questions to the right specialist.", (), (TRACKER, RETURNS)),
)
_SEED_CONVERSATIONS = (
    ("Where is parcel 1042?", ("Where is my parcel #1042?",)),
    ("Return parcel 1043", ("Please return parcel 1043, my email is ana@example.com", "Thank you, that is all.")),
    ("Small talk", ("Hello, what can you do?",)),
)


def scripted_provider_config() -> dict[str, Any]:
    """The `scripted` provider with the fuzz's two models, priced 0."""
    return {
        "kind": SCRIPTED_PROVIDER,
        "base_url": "",
        "api_key_env": "",
        "timeout": 60.0,
        "max_retries": 0,
        "models": [
            {"name": key.split(":", 1)[1], "input_price": 0.0, "output_price": 0.0, "label": f"Scripted, {key}"}
            for key in MODEL_KEYS
        ],
    }


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _tool_names(request: Any) -> list[str]:
    # Chat tools nest the name under "function"; Responses API tools carry it at the top.
    return [str((tool.get("function") or tool).get("name", "")) for tool in request.tools if isinstance(tool, dict)]


def _route_candidates(request: Any) -> list[str]:
    for tool in request.tools:
        spec = tool.get("function") or tool if isinstance(tool, dict) else {}
        if spec.get("name") == ROUTE:
            agent_name = ((spec.get("parameters") or {}).get("properties") or {}).get("agent_name") or {}
            return [str(name) for name in agent_name.get("enum") or []]
    return []


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _segments(request: Any) -> str:
    """Case extraction's cut points: the whole conversation as one case."""
    messages = request.chat_messages()
    try:
        turns = [turn["turn"] for turn in json.loads(_text(messages[-1]))["turns"]]
    except (ValueError, KeyError, TypeError, IndexError):
        return "I could not read the conversation."
    first, last = (min(turns), max(turns)) if turns else (0, 0)
    return json.dumps({"segments": [{"name": "The customer's request", "firstTurn": first, "lastTurn": last}]})


def _agent_turn(request: Any) -> Any:
    """The parcel desk, by what the user's last message asks: the router hands a parcel question to the sub-agent
    whose name fits (again after a sub-agent hands it back); a sub-agent calls its functions in order, then says what
    they answered. The careful model looks a parcel up before booking its return and thanks the customer; the hasty
    one books straight away and answers tersely."""
    from agenthost.llm.scripted import Answer, Call

    messages = request.chat_messages()
    users = [index for index, message in enumerate(messages) if message.get("role") == "user"]
    if not users:
        return "How can I help with your parcel?"
    text = _text(messages[users[-1]])
    this_turn = messages[users[-1] + 1:]
    calls = [
        str((call.get("function") or {}).get("name", ""))
        for message in this_turn if message.get("role") == "assistant"
        for call in message.get("tool_calls") or [] if isinstance(call, dict)
    ]
    results = [_json_object(_text(message)) for message in this_turn if message.get("role") == "tool"]
    tools = _tool_names(request)
    careful = request.model != HASTY_MODEL.split(":", 1)[1]
    numbers = [found for index in reversed(users) for found in re.findall(r"\b\d{3,}\b", _text(messages[index]))]
    parcel = numbers[0] if numbers else ""
    email = next(iter(re.findall(r"[\w.+-]+@[\w-]+\.[\w.]+", text)), "")
    wants_return = "return" in text.lower()
    about_parcel = wants_return or bool(re.search(r"\b\d{3,}\b|parcel|where", text, re.IGNORECASE))

    if ROUTE in tools and about_parcel:
        routed_since_fallback = ROUTE in calls and (FALLBACK not in calls or calls[::-1].index(ROUTE)
                                                    < calls[::-1].index(FALLBACK))
        if not routed_since_fallback:
            wanted = "return" if wants_return else "track"
            choice = next((name for name in _route_candidates(request) if wanted in name), None)
            if choice is not None:
                return Answer(tool_calls=[Call(ROUTE, {"agent_name": choice, "reason": text[:80]})])

    plan: list[tuple[str, dict[str, Any]]] = []
    if wants_return and BOOK_RETURN not in tools:
        plan = [(FALLBACK, {"reason": "a return is not mine to book"})] if FALLBACK in tools else []
    elif wants_return and parcel:
        plan = [(LOCATE, {"parcel_id": parcel})] if careful and LOCATE in tools else []
        plan.append((BOOK_RETURN, {"parcel_id": parcel, "reason": "the customer asked"}))
        if email and EMAIL in tools:
            plan.append((EMAIL, {"to": email, "subject": f"Return of parcel {parcel}",
                                 "body": f"The return of parcel {parcel} is booked."}))
    elif parcel and about_parcel and LOCATE in tools:
        plan = [(LOCATE, {"parcel_id": parcel})]
    for name, arguments in plan:
        if name in tools and name not in calls:
            return Answer(tool_calls=[Call(name, arguments)])

    found = {key: value for result in results for key, value in result.items() if isinstance(value, str | bool)}
    if found.get("error"):
        reply = f"Sorry, I could not complete that: {found['error']}."
    elif BOOK_RETURN in calls:
        label = f", label {found['label']}" if found.get("label") else ""
        mailed = f"; the label is on its way to {email}" if EMAIL in calls and email else ""
        reply = f"The return of parcel {parcel} is booked{label}{mailed}."
    elif LOCATE in calls and found.get("status"):
        reply = f"Parcel {parcel} is {found['status']}."
    elif ROUTE in tools:
        reply = "I can track a parcel or book its return: tell me its number."
    else:
        reply = "Is there anything else I can do for you?"
    return f"{reply} Thank you for your patience." if careful else reply


def scripted_answer(request: Any) -> Any:
    """Every request the fuzz's scripted models get: a judge's verdict, a simulated user's move, case extraction's
    cut points (each by the answer's schema), or an agent's turn (`_agent_turn`)."""
    schema = (request.response_schema or {}).get("name")
    if schema == "judge_verdict":
        reply = _text(request.chat_messages()[-1]).rsplit("Reply:", 1)[-1]
        score = 4 if re.search(r"\d", reply) else 2
        return json.dumps({"score": score, "reason": "names the parcel" if score > 2 else "names no parcel"})
    if schema == "goal_verdict":
        return json.dumps({"reached": True, "reason": "the assistant did what was asked"})
    if schema == "simulated_user_move":
        return json.dumps({"status": "done", "message": "Thank you!", "reason": "the assistant answered"})
    if schema == "segments":
        return _segments(request)
    try:
        return _agent_turn(request)
    except Exception:  # a request the rules did not foresee (the fuzz sends anything): a plain answer
        return "Noted."


@contextlib.contextmanager
def scripted_models() -> Iterator[None]:
    """The fuzz's scripted models answer by `scripted_answer` for the duration, in every thread of this process."""
    from agenthost.llm.scripted import ScriptedProvider

    ScriptedProvider.install(SCRIPTED_PROVIDER, scripted_answer)
    try:
        yield
    finally:
        ScriptedProvider.reset(SCRIPTED_PROVIDER)


def _mock(function: str, result: Any, **extra: Any) -> dict[str, Any]:
    return {
        "function_name": function, "result": result if isinstance(result, str) else json.dumps(result),
        "arguments": extra.pop("arguments", None), "call_index": extra.pop("call_index", None),
        "stop": extra.pop("stop", False), "state_writes": extra.pop("state_writes", {}), **extra,
    }


def _check(kind: str, fatal: bool = False, **params: Any) -> dict[str, Any]:
    return {"type": kind, "params": params, "fatal": fatal}


def _parcel(parcel_id: str, status: str, email: str = "") -> dict[str, Any]:
    return {"parcel_id": parcel_id, "status": status, "customer_email": email or f"customer{parcel_id}@example.com"}


def _return(parcel_id: str) -> dict[str, Any]:
    return {"parcel_id": parcel_id, "return_booked": True, "label": f"RL-{parcel_id}"}


SEED_CASES: list[dict[str, Any]] = [
    {
        "name": "A parcel is tracked",
        "description": "The desk hands a where-is-it question to the tracker, which looks the parcel up.",
        "tags": ["track"],
        "turns": [{
            "user_message": "Where is my parcel #1042?",
            "assertions": [
                _check("toolCalled", function=LOCATE, arguments={"parcel_id": "1042"}),
                _check("outputContains", text="1042"),
                _check("outputRegex", pattern=r"\b(in transit|delivered)\b"),
                _check("routedToAgent", agent=TRACKER),
            ],
        }],
        "assertions": [_check("stateEquals", key="parcel_status", value="in transit"),
                       _check("toolNotCalled", function=BOOK_RETURN)],
        "mocks": [_mock(LOCATE, _parcel("1042", "in transit"), state_writes={"parcel_status": "in transit"})],
    },
    {
        "name": "A return is booked and confirmed by email",
        "description": "Look the parcel up, book its return, then email the customer the label.",
        "tags": ["return"],
        "turns": [{
            "user_message": "Please return parcel 1043, my email is ana@example.com",
            "assertions": [
                _check("toolCalled", function=LOCATE, arguments={"parcel_id": "1043"}),
                _check("toolCalled", function=BOOK_RETURN, arguments={"parcel_id": "1043"}),
                _check("toolCalled", function=EMAIL, arguments={"to": "ana@example.com"}),
                _check("agentChain", agents=[DESK, RETURNS], mode="ordered"),
            ],
        }],
        "assertions": [_check("stateEquals", key="return_status", value="booked")],
        "mocks": [
            _mock(LOCATE, _parcel("1043", "delivered", "ana@example.com")),
            _mock(BOOK_RETURN, _return("1043"), state_writes={"return_status": "booked"}),
            _mock(EMAIL, {"sent": True, "to": ["ana@example.com"]}),
        ],
    },
    {
        "name": "An unmocked email is blocked, never sent",
        "description": "A missing mock, on purpose: the email tool has none, so the harness blocks it and the case "
                       "fails with the call named.",
        "tags": ["blocked"],
        "turns": [{"user_message": "Please return parcel 1044, my email is kim@example.com",
                   "assertions": [_check("toolCalled", function=BOOK_RETURN)]}],
        "mocks": [_mock(LOCATE, _parcel("1044", "delivered", "kim@example.com")), _mock(BOOK_RETURN, _return("1044"))],
    },
    {
        "name": "Two turns: where it is, then return it",
        "description": "A follow-up that refers back to the parcel of the first turn, which the tracker hands back "
                       "to the desk for the returns agent.",
        "tags": ["return", "multi-turn"],
        "turns": [
            {"user_message": "Where is parcel 1041?",
             "assertions": [_check("toolCalled", fatal=True, function=LOCATE, arguments={"parcel_id": "1041"})]},
            {"user_message": "Please return it",
             "assertions": [_check("toolCalled", function=BOOK_RETURN, arguments={"parcel_id": "1041"}),
                            _check("outputNotContains", text="could not")]},
        ],
        "assertions": [_check("stateEquals", key="return_status", value="booked"), _check("noBlockedTools")],
        "mocks": [
            _mock(LOCATE, _parcel("1041", "delivered")),
            _mock(BOOK_RETURN, _return("1041"), state_writes={"return_status": "booked"}),
        ],
    },
    {
        "name": "Booking a return updates the parcel table",
        "description": "Stateful mocks: look-up and return booking read and update a table of parcels; the table the "
                       "case leaves is checked.",
        "tags": ["return", "stateful"],
        "tables": {"parcels": [
            {"parcel_id": "1048", "status": "delivered", "customer_email": "lee@example.com"},
            {"parcel_id": "1049", "status": "in transit", "customer_email": "lee@example.com"},
        ]},
        "turns": [{"user_message": "Please return parcel 1048, my email is lee@example.com",
                   "assertions": [_check("toolCalled", function=BOOK_RETURN, arguments={"parcel_id": "1048"})]}],
        "assertions": [_check("tableEquals", table="parcels", key="parcel_id",
                              rows=[{"parcel_id": "1048", "status": "return booked"},
                                    {"parcel_id": "1049", "status": "in transit"}])],
        "mocks": [
            _mock(LOCATE, "", table={"name": "parcels", "key": {"parcel_id": "$args.parcel_id"}}),
            _mock(BOOK_RETURN, "", table={
                "name": "parcels", "key": {"parcel_id": "$args.parcel_id"},
                "when": {"status": ["delivered"]}, "update": {"status": "return booked"},
            }),
            _mock(EMAIL, {"sent": True, "to": ["lee@example.com"]}),
        ],
    },
    {
        "name": "The reply is helpful (judge)",
        "description": "The suite's judge model scores the reply against a criterion.",
        "tags": ["judge"],
        "turns": [{"user_message": "Where is my parcel #1045?",
                   "assertions": [_check("llmJudge", criterion="Says where the parcel is.", min_score=4)]}],
        "mocks": [_mock(LOCATE, _parcel("1045", "in transit"))],
    },
    {
        "name": "Routing: a return goes to parcel-returns",
        "type": "routing",
        "turns": [{"user_message": "I want to return parcel 1046",
                   "assertions": [_check("routedToAgent", agent=RETURNS)]}],
        "mocks": [_mock(LOCATE, _parcel("1046", "delivered")), _mock(BOOK_RETURN, _return("1046"))],
    },
    {
        "name": "Routing: small talk stays with the desk",
        "type": "routing",
        "turns": [{"user_message": "Hello, what can you do?",
                   "assertions": [_check("agentChain", agents=[DESK], mode="exact")]}],
    },
]


def seed_agents_ensure() -> None:
    """The parcel desk and its two sub-agents, on CAREFUL_MODEL, unless they exist."""
    from agenthost.models import Agent
    from agenthost.services import agent_create

    provider, model = CAREFUL_MODEL.split(":", 1)
    for name, description, functions, sub_agents in _SEED_AGENTS:
        if not Agent.objects.filter(name=name).exists():
            agent_create(
                name=name, description=description, provider=provider, model=model, temperature=0.0,
                instruction=f"You are {name} of a parcel service. {description}\nCustomer: "
                            "{{ customer_email|default:'unknown' }}",
                functions=[dict(function) for function in functions], sub_agents=list(sub_agents),
            )


def seed_conversations_ensure(*, owner: Any) -> None:
    """The seed's conversations with the parcel desk, played through the conversation service, unless they exist."""
    from agenthost.models import Agent, Conversation
    from agenthost.services import conversation_send, conversation_start

    if Conversation.objects.filter(tags__icontains=f'"{SEED_TAG}"').exists():
        return
    for title, texts in _SEED_CONVERSATIONS:
        conversation = conversation_start(agent=Agent.objects.get(name=DESK), tags=[SEED_TAG], owner=owner,
                                          title=title)
        for text in texts:
            conversation_send(conversation=conversation, text=text)


def seed_suite_ensure() -> Any:
    """The seed's suite and its cases, created through the suite and case services, unless it exists."""
    from django.db import transaction

    from cases.models import Suite
    from cases.services import case_create, suite_create

    existing = Suite.objects.filter(name=SEED_SUITE).first()
    if existing is not None:
        return existing
    with transaction.atomic():
        suite = suite_create(data={
            "name": SEED_SUITE,
            "description": "Tracking, returns, a blocked tool, a stateful table, routing and a judged reply.",
            "agent": DESK,
            "judge_model": CAREFUL_MODEL,
            "case_timeout_seconds": 60,
        })
        for document in SEED_CASES:
            case_create(suite=suite, document={**document, "enabled": True})
    return suite


def fuzz_data_ensure() -> Any:
    """The staff superuser the fuzz acts as and its seed: the parcel desk (a router) and its two sub-agents, three
    conversations with it, a suite of eight cases, and one finished run of the suite on CAREFUL_MODEL with its
    results. Plays the conversations and runs the suite for real, in-process, on the scripted models: call it inside
    `scripted_models()`, on a database that lets the run's case thread see this thread's writes (committed, not inside
    a test transaction)."""
    from django.contrib.auth import get_user_model

    from runs.models import Run
    from runs.services import run_create, run_execute

    user_model = get_user_model()
    user = user_model.objects.filter(username=FUZZ_USERNAME).first() or user_model.objects.create_superuser(
        FUZZ_USERNAME, f"{FUZZ_USERNAME}@example.com", "fuzz-password-123"
    )
    seed_agents_ensure()
    seed_conversations_ensure(owner=user)
    suite = seed_suite_ensure()
    if not Run.objects.filter(suite=suite, status__in=[Run.Status.PASSED, Run.Status.FAILED]).exists():
        run = run_create(suite=suite, model_keys=[CAREFUL_MODEL], triggered_by=user)
        run_execute(run_id=run.pk)
    return user


POOL = 50  # the most recent objects of a kind that real ids are picked from


def _pick(values: list[Any], draw: Callable[[Any], Any]) -> Any:
    """One of `values`, or None when there are none. Always one draw, however many there are: the database changes
    as the fuzz goes, and Hypothesis requires the same draws to lead to the same number of draws."""
    from hypothesis import strategies as st

    index = draw(st.integers(0, POOL - 1))
    return values[index % len(values)] if values else None


def _real_path_parameters(names: set[str], draw: Callable[[Any], Any]) -> dict[str, int]:
    """Ids of objects that exist now (the fuzz creates and deletes them as it goes) for the path's parameters."""
    from agenthost.models import Agent, Conversation
    from cases.models import Case, Suite
    from runs.models import CaseResult, Run

    if "result_id" in names:
        pair = _pick(list(CaseResult.objects.order_by("-pk").values_list("run_id", "pk")[:POOL]), draw)
        return dict(zip(("run_id", "result_id"), pair, strict=True)) if pair else {}
    models = {"agent_id": Agent, "case_id": Case, "conversation_id": Conversation, "run_id": Run, "suite_id": Suite}
    chosen = {}
    for name in sorted(names & models.keys()):
        object_id = _pick(list(models[name].objects.order_by("-pk").values_list("pk", flat=True)[:POOL]), draw)
        if object_id is not None:
            chosen[name] = object_id
    return chosen


def _real_body_values(draw: Callable[[Any], Any]) -> dict[str, Callable[[Any], Any]]:
    """Body keys whose generated value almost never names a real object or model or passes a rule that needs one,
    with a realistic replacement (of the generated value's type where the API accepts either an id or a name)."""
    from hypothesis import strategies as st

    from agenthost.models import Agent, Conversation
    from cases.models import Suite

    def agent_name() -> str | None:
        return _pick(list(Agent.objects.order_by("pk").values_list("name", flat=True)[:POOL]), draw)

    def suite(generated: Any) -> Any:
        row = _pick(list(Suite.objects.order_by("-pk").values_list("pk", "name")[:POOL]), draw)
        by_name = draw(st.booleans())
        if row is None:
            return generated
        if isinstance(generated, str):
            return row[1] if by_name else str(row[0])
        return row[0]

    return {
        "suite": suite,
        "conversation": lambda generated: _pick(
            list(Conversation.objects.order_by("-pk").values_list("pk", flat=True)[:POOL]), draw
        ),
        "agent": lambda generated: agent_name(),
        "sub_agents": lambda generated: [agent_name()],
        "provider": lambda generated: SCRIPTED_PROVIDER,
        "model": lambda generated: draw(st.sampled_from([key.split(":", 1)[1] for key in MODEL_KEYS])),
        "models": lambda generated: [draw(st.sampled_from(MODEL_KEYS))],
        "extraction_model": lambda generated: CAREFUL_MODEL,
        "case_filter": lambda generated: "",
        "mode": lambda generated: "live",
        "trials": lambda generated: draw(st.integers(1, 3)),
    }


# --- Requests -----------------------------------------------------------------------------------------------------


class TestClientApp:
    """A WSGI application that serves each request through Django's test client: the fuzz's thread, connection and
    transaction, and a view's exception comes back as a 500 whose body is the traceback."""

    def __init__(self) -> None:
        from django.test import Client

        self.client = Client()
        self.last_request: Any = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        self.last_request = None
        try:
            response = self.client.request(**environ)
        except Exception:
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [traceback.format_exc().encode()]
        self.last_request = response.wsgi_request
        headers = [(name, value) for name, value in response.items()]
        start_response(f"{response.status_code} {response.reason_phrase}", headers)
        return [response.content]

    def received_keys(self) -> frozenset[str]:
        """The query and form keys of the last request as the server parsed them: a form encodes a nested value
        under keys such as `turns[0][user_message]`, and an error names the key it received."""
        request = self.last_request
        if request is None:
            return frozenset()
        try:
            return frozenset(request.GET) | frozenset(request.POST)
        except Exception:
            # A body the server never read may be one it cannot parse (too many fields); it named none of it.
            return frozenset(request.GET)


def _request_text(case: Any) -> str:
    from schemathesis.core import NotSet

    parts = [f"{case.method} {case.formatted_path}"]
    if case.query:
        parts.append(f"query={json.dumps(case.query, default=str)}")
    if not isinstance(case.body, NotSet):
        parts.append(f"{case.media_type} body={json.dumps(case.body, default=repr)[:2000]}")
    return " ".join(parts)


def _keys(value: Any) -> frozenset[str]:
    """Every object key in a JSON value, at any depth: an error may name a nested key the request sent."""
    if isinstance(value, dict):
        return frozenset(str(key) for key in value).union(*(_keys(item) for item in value.values()))
    if isinstance(value, list):
        return frozenset().union(*(_keys(item) for item in value))
    return frozenset()


def _fields(schema: dict[str, Any], path: str, method: str) -> frozenset[str]:
    """The names a validation error of this operation may give: its parameters and its body's properties."""
    spec = schema["paths"][path][method.lower()]
    names = {parameter["name"] for parameter in spec.get("parameters", [])}
    for content in spec.get("requestBody", {}).get("content", {}).values():
        body = content.get("schema", {})
        if "$ref" in body:
            body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
        names.update(body.get("properties", {}))
    return frozenset(names)


def names_a_field(name: Any, *, fields: frozenset[str], sent: frozenset[str]) -> bool:
    """Whether an error's field is a parameter or body property of the operation (or a path into one), a key the
    request sent at any depth (an unknown key is named as the field at fault), or the body as a whole."""
    if not isinstance(name, str):
        return False
    if name in sent or name in WHOLE_BODY or _FIELD_ROOT.split(name, 1)[0] in fields:
        return True
    return any(name.startswith((f"{key}.", f"{key}[")) for key in sent)


def unnamed_validation_problems(body: Any, *, fields: frozenset[str], sent: frozenset[str]) -> list[str]:
    """What in a 400 body names no field; empty when every error names one, or is a `detail` about no field."""
    if not isinstance(body, dict) or not body:
        return [f"not a JSON object naming fields: {str(body)[:200]!r}"]
    if "errors" in body:
        errors = body["errors"] if isinstance(body["errors"], list) else [body["errors"]]
        return [
            f"error {error!r} names no field of the request"
            for error in errors
            if not (isinstance(error, dict) and names_a_field(error.get("field"), fields=fields, sent=sent))
        ]
    if "detail" in body:
        return []
    return [f"key {key!r} is no field of the request" for key in body if not names_a_field(key, fields=fields,
                                                                                            sent=sent)]


# --- The fuzz -----------------------------------------------------------------------------------------------------


def load_schema(token: str) -> tuple[Any, dict[str, Any]]:
    """The schemathesis schema and the raw OpenAPI document, as /api/schema/ serves them to a signed-in user."""
    import schemathesis
    from django.test import Client

    response = Client().get(SCHEMA_PATH, headers={"Authorization": f"Token {token}"})
    if response.status_code != 200:
        raise FuzzError(f"GET {SCHEMA_PATH} answered {response.status_code}: {response.content[:500]!r}")
    # Two copies: schemathesis may rewrite the document it loads, and the raw one is read for field names.
    raw = json.loads(response.content)
    return schemathesis.openapi.from_dict(json.loads(response.content), config=schemathesis.Config()), raw


def _operations(schema: Any) -> list[Any]:
    operations = [result.ok() for result in schema.get_all_operations()]
    # What deletes goes last, so every other operation still finds the seeded objects.
    return sorted(operations, key=lambda op: op.method.upper() == "DELETE" or op.path.endswith("/delete/"))


class _OutOfTime(Exception):
    pass


class _Fuzzer:
    def __init__(self, *, token: str, raw_schema: dict[str, Any], examples: int, deadline: float, floor: int,
                 seed: int | None) -> None:
        self.headers = {"Authorization": f"Token {token}"}
        self.raw_schema = raw_schema
        self.examples = examples
        self.deadline = deadline
        self.floor = floor
        self.seed = seed
        self.app = TestClientApp()
        self.report = FuzzReport()

    def operation(self, operation: Any, mode: Any) -> None:
        """Up to `examples` cases of `operation` in generation `mode`; past the deadline, no more than `floor`."""
        from hypothesis import HealthCheck, Phase, given
        from hypothesis import seed as hypothesis_seed
        from hypothesis import settings as hypothesis_settings
        from hypothesis import strategies as st
        from hypothesis.errors import Unsatisfiable

        sent = 0

        @hypothesis_settings(
            max_examples=self.examples, deadline=None, database=None, phases=[Phase.generate],
            suppress_health_check=list(HealthCheck), print_blob=False,
        )
        @given(case=operation.as_strategy(generation_mode=mode), data=st.data())
        def exercise(case: Any, data: Any) -> None:
            nonlocal sent
            if sent >= self.floor and time.monotonic() > self.deadline:
                raise _OutOfTime
            self.send(self.realistic(case, data, positive=mode.name == "POSITIVE", first=sent == 0), operation)
            sent += 1

        if self.seed is not None:
            exercise = hypothesis_seed(self.seed)(exercise)
        try:
            exercise()
        except _OutOfTime:
            self.report.cut_short.append(f"{operation.method.upper()} {operation.path} ({mode.value})")
        except Unsatisfiable:
            # Schemathesis found no case of this kind it could generate; the report lists the operation.
            self.report.unsatisfiable.append(f"{operation.method.upper()} {operation.path} ({mode.value})")

    def realistic(self, case: Any, data: Any, *, positive: bool, first: bool) -> Any:
        from hypothesis import strategies as st

        path_names = set(case.path_parameters or {})
        if path_names and (first or data.draw(st.booleans(), label="real path ids")):
            case.path_parameters.update(_real_path_parameters(path_names, data.draw))
        if positive and isinstance(case.body, dict) and (first or data.draw(st.booleans(), label="real body values")):
            for key, replace in _real_body_values(data.draw).items():
                if key in case.body:
                    case.body[key] = replace(case.body[key])
        return case

    def send(self, case: Any, operation: Any) -> None:
        from django.core.cache import cache

        label = f"{operation.method.upper()} {operation.path}"
        # Throttle history lives in the cache: a fuzz triggers runs far faster than a person would.
        cache.clear()
        response = case.call(app=self.app, headers=self.headers)
        report = self.report
        report.requests += 1
        report.statuses[response.status_code] += 1
        report.per_operation[label] += 1
        if response.status_code < 300:
            report.successes[label] += 1
        if response.status_code != 404:
            report.reached[label] += 1
        text = response.content.decode(errors="replace")
        if response.status_code >= 500:
            report.failures.append(
                Failure("server error", label, _request_text(case), response.status_code, text[:4000])
            )
        elif response.status_code == 400:
            try:
                body = json.loads(text)
            except ValueError:
                body = text
            sent = frozenset(case.query or {}) | _keys(case.body) | self.app.received_keys()
            fields = _fields(self.raw_schema, operation.path, operation.method)
            if problems := unnamed_validation_problems(body, fields=fields, sent=sent):
                report.failures.append(Failure(
                    "unnamed validation error", label, _request_text(case), 400,
                    f"{text[:2000]} ({'; '.join(problems)})",
                ))


def _has_inputs(operation: Any) -> bool:
    """Whether anything about a request to `operation` can be invalid (a GET without parameters has nothing). Headers
    and cookies are only the security schemes', and the fuzz always sends its token."""
    return any(part.items for part in (operation.path_parameters, operation.query, operation.body))


def fuzz_api(*, user: Any, examples: int, seconds: float, floor: int = 0, seed: int | None = None) -> FuzzReport:
    """Send up to `examples` positive and `examples` negative cases to every operation, as `user`, for at most
    `seconds`; past them, each operation still gets `floor` cases of each kind (at most `examples`), and the report
    lists the operations cut short."""
    from rest_framework.authtoken.models import Token
    from schemathesis import GenerationMode

    token, _ = Token.objects.get_or_create(user=user)
    schema, raw = load_schema(token.key)
    started = time.monotonic()
    fuzzer = _Fuzzer(token=token.key, raw_schema=raw, examples=examples, deadline=started + seconds,
                     floor=min(floor, examples), seed=seed)
    operations = _operations(schema)
    fuzzer.report.operations = len(operations)
    for operation in operations:
        fuzzer.operation(operation, GenerationMode.POSITIVE)
        if _has_inputs(operation):
            fuzzer.operation(operation, GenerationMode.NEGATIVE)
    fuzzer.report.seconds = time.monotonic() - started
    return fuzzer.report


def format_report(report: FuzzReport, *, database: str = "") -> str:
    lines = []
    if database:
        lines.append(f"{'database':<28}{database}")
    lines += [
        f"{'operations':<28}{report.operations}",
        f"{'requests':<28}{report.requests}",
        f"{'5xx':<28}{report.server_errors}",
        f"{'unnamed validation errors':<28}{sum(f.kind == 'unnamed validation error' for f in report.failures)}",
        f"{'seconds':<28}{report.seconds:.1f}",
        f"{'timed out':<28}{'yes' if report.timed_out else 'no'}",
        f"{'cut short':<28}{', '.join(report.cut_short) or '-'}",
        f"{'refused connections':<28}{len(report.refused_connections)}",
        f"{'without cases':<28}{', '.join(report.unsatisfiable) or '-'}",
        "statuses",
        *(f"  {code:<26}{count}" for code, count in sorted(report.statuses.items())),
        "requests per operation (of which 2xx)",
        *(
            f"  {label:<54}{count:>5} ({report.successes[label]})"
            for label, count in sorted(report.per_operation.items())
        ),
    ]
    for failure in report.failures:
        lines.append(str(failure))
    return "\n".join(lines)


# --- Command ------------------------------------------------------------------------------------------------------


def setup_django(database_url: str, var_dir: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "agenttest.settings"
    os.environ["AGENTTEST_DEBUG"] = "1"
    # The fuzz seeds its own objects on the host's scripted models: no plugin, the demo's included.
    os.environ["AGENTTEST_DEMO"] = "0"
    os.environ["DATABASE_URL"] = database_url
    os.environ["AGENTTEST_VAR_DIR"] = var_dir
    for name in ("AGENTTEST_PROVIDERS_FILE", "AGENTTEST_HARNESS_APPS", "AGENTTEST_BROKER_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    # The test environment: locmem email, and "testserver" among the allowed hosts.
    setup_test_environment()
    for name, value in hermetic_settings(Path(var_dir)).items():
        setattr(settings, name, value)
    from agenthost.llm.registry import clear_cache

    clear_cache()
    # A 4xx is logged as a warning per request; the report counts them instead.
    logging.getLogger("django.request").setLevel(logging.CRITICAL)
    call_command("migrate", verbosity=0, interactive=False)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Fuzz the REST API from its OpenAPI schema with schemathesis.")
    parser.add_argument("--examples", type=_positive, default=20,
                        help="positive and as many negative cases per operation (default 20)")
    parser.add_argument("--seconds", type=float, default=150.0, help="stop sending after this long (default 150)")
    parser.add_argument("--database-url", default="", help="a PostgreSQL URL; a scratch database is created on it "
                                                           "and dropped (default: a temporary SQLite file)")
    parser.add_argument("--floor", type=int, default=0,
                        help="cases of each kind every operation gets even past --seconds (default 0)")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis seed, to repeat a fuzz exactly")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    try:
        with scratch_database(options.database_url, purpose="fuzz") as (database_url, var_dir, database):
            setup_django(database_url, var_dir)
            from django.conf import settings

            refused: list[str] = []
            with loopback_only(refused), celery_broker(settings.CELERY_BROKER_URL), scripted_models():
                user = fuzz_data_ensure()
                report = fuzz_api(user=user, examples=options.examples, seconds=options.seconds,
                                    floor=options.floor, seed=options.seed)
            report.refused_connections = refused
            print(format_report(report, database=database), flush=True)
    except (FuzzError, BenchError) as exc:
        print(f"fuzz failed: {exc}", file=sys.stderr)
        return 1
    return 1 if report.failures or report.refused_connections else 0


if __name__ == "__main__":
    sys.exit(main())
