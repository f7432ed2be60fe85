"""Conversations to record, made the way real ones are: through the conversation service, on scripted models (the
order agents on agent_model, the desk on scripted_model, which also plays the extraction model), with the tests' own
order tools (tests/order_tools.py) answering for real."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import cache

from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Answer, Call, Entry, ScriptedProvider
from agenthost.models import Agent, Conversation
from agenthost.testing.fixtures import ScriptedModel, scripted_provider_config
from cases.models import Suite
from tests.order_tools import ORDER_TOOLS

EMAIL = "util-email-handle_email_sender"
WHERE_IS_1042 = "Where is my order #1042?"
ITEMS_OF_1042 = "What items are in order 1042?"
CANCEL_1043 = "Please cancel order 1043 because I changed my mind, my email is ana@example.com"
CANCEL_1047 = "Can you cancel order 1047?"
THREE_TOPICS = (WHERE_IS_1042, ITEMS_OF_1042, CANCEL_1043, CANCEL_1047)
SEEDED_STATE = {"customer_email": "bo@example.com"}

# What the order agents' model does with each message: its calls, then (after their results) its reply, as a careful
# agent would. Order 1042 is delivered, 1043 processing and 1047 delivered (tests/order_tools.py).
ORDER_ANSWERS: dict[str, tuple[list[Call], str]] = {
    WHERE_IS_1042: ([Call("track_order", {"order_id": "1042"})], "Order 1042 is delivered."),
    ITEMS_OF_1042: ([Call("track_order", {"order_id": "1042"})], "Order 1042 holds item-42."),
    CANCEL_1043: (
        [
            Call("track_order", {"order_id": "1043"}),
            Call("void_order", {"order_id": "1043", "reason": "I changed my mind"}),
            Call(EMAIL, {"to": "ana@example.com", "subject": "Order 1043 is now cancelled",
                         "body": "Hello,\n\nOrder 1043 is now cancelled.\n\nKind regards,\nCustomer support"}),
        ],
        "Order 1043 is now cancelled. I sent a confirmation email to ana@example.com.",
    ),
    CANCEL_1047: ([Call("track_order", {"order_id": "1047"})], "I checked: order 1047 is already delivered."),
}


def answer_by_user_message(answers: dict[str, tuple[list[Call], str]]) -> Callable[[ModelRequest], Entry]:
    """A scripted model that answers each user message with its tool calls, then (after the results) its text — so
    the recording and every replay, in whatever order a run takes the cases, get the same answers."""

    def respond(request: ModelRequest) -> Entry:
        user_message = [message for message in request.messages if message["role"] == "user"][-1]["content"]
        calls, text = answers[user_message]
        return text if request.messages[-1]["role"] == "tool" else Answer(tool_calls=calls)

    return respond


# WHERE_IS_1042 asked of the router (order_agents): its model hands the turn to the lookup agent, whose model looks the
# order up and answers.
ROUTED_1042: tuple[Entry, ...] = (
    Answer(tool_calls=[Call("route_to_agent", {"agent_name": "order-lookup"})]),
    Answer(tool_calls=[Call("track_order", {"order_id": "1042"})]),
    "Order 1042 is delivered.",
)


@pytest.fixture(autouse=True)
def _fresh_throttle_history(db) -> Iterator[None]:
    # Throttle counts live in the cache, keyed by user id, and ids repeat across tests.
    cache.clear()
    yield
    cache.clear()


class AgentModel(ScriptedModel):
    """The scripted model the order agents run on: a provider of its own, so what they were asked stays apart from
    what the extraction model (scripted_model, the same kind) was asked."""

    provider_name = "agents"
    key = f"{provider_name}:{ScriptedModel.model}"


@pytest.fixture
def agent_model(settings: Any) -> Iterator[AgentModel]:
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS, AgentModel.provider_name: scripted_provider_config(),
    }
    ScriptedProvider.reset(AgentModel.provider_name)
    yield AgentModel()
    ScriptedProvider.release_hangs()
    ScriptedProvider.reset(AgentModel.provider_name)


@pytest.fixture
def order_agents(db, agent_model) -> dict[str, Agent]:
    """Order support on agent_model, by name: a router with two sub-agents, one that looks orders up and one that
    cancels them and confirms by email."""
    on_the_model = {"provider": agent_model.provider_name, "model": agent_model.model}
    lookup = Agent.objects.create(
        name="order-lookup", description="Looks up orders.", instruction="Look orders up.",
        functions=[{"name": "track_order"}], **on_the_model,
    )
    cancellation = Agent.objects.create(
        name="order-cancellation", description="Cancels orders and confirms by email.", instruction="Cancel orders.",
        functions=[{"name": name} for name in (*ORDER_TOOLS, EMAIL)], **on_the_model,
    )
    router = Agent.objects.create(name="order-router", instruction="Route.", **on_the_model)
    router.sub_agents.set([lookup, cancellation])
    return {agent.name: agent for agent in (router, lookup, cancellation)}


@pytest.fixture
def three_topics(order_agents, agent_model, talk) -> Conversation:
    """Four turns with the cancellation agent, three user goals: the status of order 1042 (turns 0–1), cancelling
    1043 (turn 2: lookup, cancel, confirmation email), cancelling the delivered 1047 (turn 3). Its model keeps
    answering so, for a replay."""
    agent_model.respond_with(answer_by_user_message(ORDER_ANSWERS))
    return talk(order_agents["order-cancellation"], *THREE_TOPICS, initial_state=dict(SEEDED_STATE))


@pytest.fixture
def scripted_desk(db, scripted_model) -> Agent:
    """An agent on the scripted model: the two order tools, a static one, one that has no implementation, and a
    start-up rule-free setup (tests add rules themselves)."""
    return Agent.objects.create(
        name="desk",
        instruction="Help.",
        provider="scripted",
        model="scripted",
        functions=[
            *({"name": name} for name in ORDER_TOOLS),
            {"name": "store_hours", "description": "Opening hours.", "output": {"open": "9-17"}},
            {"name": "ghost_tool", "description": "Declared, never implemented."},
            {"name": "human_intervention_needed"},
        ],
    )


@pytest.fixture
def desk_suite(scripted_desk) -> Suite:
    return Suite.objects.create(name="Desk", agent=scripted_desk, case_timeout_seconds=30)


def segments_answer(*segments: tuple[str, int, int]) -> str:
    """An extraction model's answer with these (name, firstTurn, lastTurn) segments."""
    return json.dumps(
        {"segments": [{"name": name, "firstTurn": first, "lastTurn": last} for name, first, last in segments]}
    )
