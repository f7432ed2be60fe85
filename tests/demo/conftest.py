"""Fixtures of the demo's own tests, loaded only with the demo plugin on (AGENTTEST_DEMO=1): the demo agents by name.
`talk` is every test's (tests/conftest.py)."""

from __future__ import annotations

import pytest

from agenthost.models import Agent
from agenttest_demo.agents import demo_agents_ensure


@pytest.fixture
def demo_agents(db) -> dict[str, Agent]:
    """The order-support demo agents (router with two sub-agents, simulated:sim-careful), by name."""
    return {agent.name: agent for agent, _ in demo_agents_ensure()}


