"""Suites, cases and runs for the runs tests, written with the ORM so they do not depend on the cases API.

The order desk's cases run on two models that behave differently on the same request: asked to cancel an order, the
careful one looks it up first and the hasty one cancels straight away — so `toolCalled lookup_order` passes on one
model and fails on the other. They are two models of the host's scripted provider, CAREFUL and HASTY, playing
`order_desk_answer`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.core.cache import cache

from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Answer, Call, Entry
from agenthost.models import Agent
from agenthost.testing.fixtures import ScriptedModel
from agenttest.celery import app
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Run

CANCEL_REQUEST = "Please cancel order 1043 because I changed my mind"
# The host's scripted models: `scripted_model` configures SCRIPTED (priced), `careful_and_hasty` the other two (free).
SCRIPTED = "scripted:scripted"
CAREFUL = "scripted:careful"
HASTY = "scripted:hasty"
# Declared in full, so the model is offered the same tools whether or not a plugin registers functions of these names;
# a case's mocks answer them.
ORDER_TOOLS = (
    {
        "name": "lookup_order",
        "description": "Look up an order by its number: status, items and the customer's email.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "The order number, e.g. 1042."}},
            "required": ["order_id"],
        },
    },
    {
        "name": "cancel_order",
        "description": "Cancel an order that has not been delivered yet.",
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "description": "The order number."},
                "reason": {"type": "string", "description": "Why the customer cancels."},
            },
            "required": ["order_id"],
        },
    },
)
ORDER_MOCKS = (
    {"function_name": "lookup_order", "result": '{"order_id": "1043", "status": "processing"}'},
    {"function_name": "cancel_order", "result": '{"order_id": "1043", "cancelled": true}'},
)


@pytest.fixture(autouse=True)
def _fresh_throttle_history(db) -> Iterator[None]:
    # Throttle counts live in the cache, keyed by user id, and ids repeat across tests.
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def careful_and_hasty(scripted_model, settings) -> ScriptedModel:
    """The scripted provider with CAREFUL and HASTY too, both free (no price, of a kind that declares
    itself free). They play one script, which tells them apart by request.model."""
    scripted = settings.AGENTTEST_PROVIDERS["scripted"]
    both = [
        {"name": name, "input_price": 0.0, "output_price": 0.0, "label": f"Scripted, {name}"}
        for name in ("careful", "hasty")
    ]
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS, "scripted": {**scripted, "models": [*scripted["models"], *both]},
    }
    return scripted_model


def order_desk_answer(request: ModelRequest) -> Entry:
    """The order desk, asked about the order its user's last message names: CAREFUL looks it up before
    cancelling it, any other model cancels it straight away; then each says it is done."""
    messages = request.chat_messages()
    last_user = max(index for index, message in enumerate(messages) if message.get("role") == "user")
    order = re.findall(r"\d+", str(messages[last_user].get("content")))[0]
    called = {
        call["function"]["name"]
        for message in messages[last_user + 1 :] if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
    }
    for name in ("lookup_order", "cancel_order") if request.model == "careful" else ("cancel_order",):
        if name not in called:
            return Answer(tool_calls=[Call(name, {"order_id": order})])
    return f"Order {order} is cancelled."


@pytest.fixture
def order_desk(careful_and_hasty) -> ScriptedModel:
    """CAREFUL and HASTY answering as the order desk (order_desk_answer)."""
    careful_and_hasty.respond_with(order_desk_answer)
    return careful_and_hasty


@pytest.fixture
def order_agent(db) -> Agent:
    return Agent.objects.create(
        name="order-desk", description="Looks up and cancels orders.",
        instruction="You help customers with their orders.", provider="scripted", model="careful",
        functions=copy.deepcopy(list(ORDER_TOOLS)),
    )


@pytest.fixture
def make_suite(order_agent: Agent) -> Callable[..., Suite]:
    def make(name: str = "orders", **fields: Any) -> Suite:
        fields.setdefault("agent", order_agent)
        fields.setdefault("case_timeout_seconds", 30)
        return Suite.objects.create(name=name, **fields)

    return make


def _assertion(case: Case, position: int, spec: dict[str, Any], turn: Turn | None = None) -> Assertion:
    return Assertion.objects.create(
        case=case, turn=turn, position=position, type=spec["type"], params=spec.get("params", {}),
        fatal=spec.get("fatal", False),
    )


@pytest.fixture
def make_case() -> Callable[..., Case]:
    def make(
        suite: Suite, name: str, *, turns: tuple[str, ...] = (CANCEL_REQUEST,), mocks: tuple[dict, ...] = ORDER_MOCKS,
        assertions: tuple[dict, ...] = (), enabled: bool = True, tags: tuple[str, ...] = (), priority: int = 0,
    ) -> Case:
        case = Case.objects.create(suite=suite, name=name, enabled=enabled, tags=list(tags), priority=priority)
        for position, text in enumerate(turns):
            Turn.objects.create(case=case, position=position, user_message=text)
        for position, mock in enumerate(mocks):
            Mock.objects.create(case=case, position=position, **mock)
        for position, spec in enumerate(assertions):
            _assertion(case, position, spec)
        return case

    return make


@pytest.fixture
def order_suite(make_suite, make_case) -> Suite:
    """Two enabled cases: one that both models pass, one that only the careful model passes."""
    suite = make_suite()
    make_case(
        suite, "cancels the order",
        assertions=({"type": "toolCalled", "params": {"function": "cancel_order", "arguments": {"order_id": "1043"}}},),
    )
    make_case(
        suite, "looks the order up first", assertions=({"type": "toolCalled", "params": {"function": "lookup_order"}},)
    )
    return suite


@pytest.fixture
def make_run() -> Callable[..., Run]:
    """A run row with results, as a finished (or running) run leaves them; nothing is executed."""

    def make(suite: Suite, *, status: str = Run.Status.PASSED, models: tuple[str, ...] = (),
             results: tuple[tuple[str, str], ...] = (), **fields: Any) -> Run:
        # Unless named, the run's models are those its results are on (CAREFUL for a run without results).
        models = models or tuple(dict.fromkeys(model for model, _ in results)) or (CAREFUL,)
        cases = list(suite.cases.order_by("pk"))
        run = Run.objects.create(
            suite=suite, model_keys=list(models), status=status, case_ids=[case.pk for case in cases],
            total=len(cases) * len(models), **fields,
        )
        counters = {"passed": 0, "failed": 0, "error": 0, "cancelled": 0}
        for position, (model, result_status) in enumerate(results):
            # Case-major, as a run executes; results past the suite's cases stand for since-deleted cases.
            index = position // len(models)
            case = cases[index] if index < len(cases) else None
            CaseResult.objects.create(
                run=run, case=case, case_name=case.name if case else f"case {position}", model=model,
                position=position, status=result_status, duration_ms=100.0 * (position + 1),
                model_latency_ms=10.0 * (position + 1), input_tokens=10, output_tokens=5, cost=Decimal("0.001"),
                transcript=[{"role": "user", "content": "hello"}],
            )
            counters[result_status] += 1
        Run.objects.filter(pk=run.pk).update(
            passed=counters["passed"], failed=counters["failed"], errored=counters["error"],
            cancelled=counters["cancelled"],
        )
        run.refresh_from_db()
        return run

    return make


@pytest.fixture
def run_queue(settings, tmp_path) -> Iterator[None]:
    """A run queue that answers, executing each queued run at once in this process (Celery's eager mode), so a
    test sees what the worker would do without a worker process."""
    settings.CELERY_BROKER_URL = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = eager


@pytest.fixture
def dead_run_queue(settings) -> None:
    """A broker nobody listens on."""
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
