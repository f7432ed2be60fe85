"""Conversations to record, made the way real ones are: through the conversation service, on the simulated demo models
or on the scripted model."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import cache

from agenthost.models import Agent, Conversation
from agenthost.services import conversation_send, conversation_start
from cases.models import Suite

CAREFUL = "simulated:sim-careful"
WHERE_IS_1042 = "Where is my order #1042?"
ITEMS_OF_1042 = "What items are in order 1042?"
CANCEL_1043 = "Please cancel order 1043 because I changed my mind, my email is ana@example.com"
CANCEL_1047 = "Can you cancel order 1047?"
THREE_TOPICS = (WHERE_IS_1042, ITEMS_OF_1042, CANCEL_1043, CANCEL_1047)
SEEDED_STATE = {"customer_email": "bo@example.com"}


@pytest.fixture(autouse=True)
def _fresh_throttle_history(db) -> Iterator[None]:
    # Throttle counts live in the cache, keyed by user id, and ids repeat across tests.
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def talk() -> Callable[..., Conversation]:
    """talk(agent, *user_messages, initial_state=..., history=..., owner=..., title=...) → the conversation."""

    def talk(agent: Agent, *messages: str, **start: Any) -> Conversation:
        conversation = conversation_start(agent=agent, **start)
        for text in messages:
            conversation_send(conversation=conversation, text=text)
        conversation.refresh_from_db()
        return conversation

    return talk


@pytest.fixture
def three_topics(demo_agents, talk) -> Conversation:
    """Four turns with the cancellation agent on sim-careful, three user goals: the status of order 1042 (turns 0–1),
    cancelling 1043 (turn 2: lookup, cancel, confirmation email), cancelling the delivered 1047 (turn 3)."""
    return talk(demo_agents["order-cancellation"], *THREE_TOPICS, initial_state=dict(SEEDED_STATE))


@pytest.fixture
def scripted_desk(db, scripted_model) -> Agent:
    """An agent on the scripted model: two real demo tools, a static one, one that has no implementation, and a
    start-up rule-free setup (tests add rules themselves)."""
    return Agent.objects.create(
        name="desk",
        instruction="Help.",
        provider="scripted",
        model="scripted",
        functions=[
            {"name": "lookup_order"},
            {"name": "cancel_order"},
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
