"""Fixtures of the demo's own tests, loaded only with the demo plugin on (AGENTTEST_DEMO=1): the demo agents, and
`talk`, which plays a conversation through the conversation service as a user would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agenthost.models import Agent, Conversation
from agenthost.services import conversation_send, conversation_start
from agenttest_demo.agents import demo_agents_ensure


@pytest.fixture
def demo_agents(db) -> dict[str, Agent]:
    """The order-support demo agents (router with two sub-agents, simulated:sim-careful), by name."""
    return {agent.name: agent for agent, _ in demo_agents_ensure()}


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
