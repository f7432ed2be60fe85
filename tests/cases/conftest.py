"""Agents, suites and case documents for the cases tests."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agenthost.models import Agent
from agenthost.testing.fixtures import ScriptedModel
from cases.models import Case, Suite
from cases.services import case_create
from tests.order_tools import ORDER_TOOLS

# The agents here run on the scripted model (each asks for the scripted_model fixture, which configures it), and a
# judged suite judges with it too.
JUDGE_MODEL = ScriptedModel.key

VALID_DOCUMENT: dict[str, Any] = {
    "name": "Refund for a late order",
    "description": "The customer asks for a refund; the agent looks the order up first.",
    "tags": ["refunds", "smoke"],
    "initial_state": {"customer": "Ada"},
    "history": [{"role": "assistant", "content": "Hello, how can I help?"}],
    "turns": [
        {
            "user_message": "Where is order 1042?",
            "assertions": [
                {"type": "toolCalled", "params": {"function": "track_order", "arguments": {"order_id": "1042"}}},
                {"type": "outputRegex", "params": {"pattern": r"shipped|on its way"}, "fatal": True},
            ],
        },
        {"user_message": "Can I get a refund?", "assertions": []},
    ],
    "assertions": [{"type": "stateEquals", "params": {"key": "refund_requested", "value": True}}],
    "mocks": [
        {
            "function_name": "track_order",
            "arguments": {"order_id": "1042"},
            "call_index": 0,
            "result": '{"status": "shipped"}',
            "stop": False,
            "state_writes": {"order_status": "shipped"},
        }
    ],
}


def make_document(**overrides: Any) -> dict[str, Any]:
    """A valid case document (deep-copied) with top-level fields replaced."""
    return {**copy.deepcopy(VALID_DOCUMENT), **overrides}


# What the "support" agent declares: the tests' own effect-free look-up, then functions with real outside effects.
SUPPORT_FUNCTIONS = (*ORDER_TOOLS, "util-email-handle_email_sender", "util-http-handle_http_request")


@pytest.fixture
def agent(db, scripted_model) -> Agent:
    return Agent.objects.create(
        name="support", instruction="Help with orders.", provider="scripted", model="scripted",
        functions=[{"name": name} for name in SUPPORT_FUNCTIONS],
    )


@pytest.fixture
def billing_agent(db, scripted_model) -> Agent:
    return Agent.objects.create(
        name="billing", instruction="Billing.", provider="scripted", model="scripted",
        functions=[{"name": "track_order"}],
    )


@pytest.fixture
def suite(agent) -> Suite:
    return Suite.objects.create(name="Support", agent=agent)


@pytest.fixture
def judged_suite(agent) -> Suite:
    return Suite.objects.create(name="Judged", agent=agent, judge_model=JUDGE_MODEL)


@pytest.fixture
def make_case(suite):
    def make(target: Suite | None = None, **overrides: Any) -> Case:
        return case_create(suite=target or suite, document=make_document(**overrides))

    return make


@pytest.fixture
def case_document():
    """make_document: call it with top-level overrides for a fresh valid document."""
    return make_document
