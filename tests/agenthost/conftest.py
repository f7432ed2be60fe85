"""Fixtures of the host's tests: a local server, and an order desk of three agents (a router and its two sub-agents)
on the scripted model, declaring the tests' order tools (tests/order_tools.py)."""

from __future__ import annotations

import pytest

from agenthost.models import Agent
from tests.agenthost.listeners import local_server
from tests.order_tools import TRACK_ORDER, VOID_ORDER

__all__ = ["local_server"]

EMAIL = "util-email-handle_email_sender"
ROUTER, LOOKUP, CANCELLATION = "order-router", "order-lookup", "order-cancellation"
_CUSTOMER = "Customer: {{ customer_email|default:'unknown' }}"


@pytest.fixture
def order_agents(db, scripted_model) -> dict[str, Agent]:
    """The order desk by name: the router hands each request to the sub-agent that looks orders up or to the one that
    cancels them. All three run on the scripted model; a test plays what they answer."""
    agents = {
        LOOKUP: Agent.objects.create(
            name=LOOKUP, description="Looks up orders: status, items and the customer's email for an order number.",
            instruction=f"You answer questions about existing orders.\n{_CUSTOMER}",
            provider=scripted_model.provider_name, model=scripted_model.model, functions=[{"name": TRACK_ORDER}],
        ),
        CANCELLATION: Agent.objects.create(
            name=CANCELLATION, description="Cancels orders and sends confirmation emails to the customer.",
            instruction=f"You cancel orders and email the customer a confirmation.\n{_CUSTOMER}",
            provider=scripted_model.provider_name, model=scripted_model.model,
            functions=[{"name": TRACK_ORDER}, {"name": VOID_ORDER}, {"name": EMAIL}],
        ),
    }
    agents[ROUTER] = Agent.objects.create(
        name=ROUTER, description="Routes order-support requests to the right specialist.",
        instruction=f"Hand each request to the sub-agent that handles it.\n{_CUSTOMER}",
        provider=scripted_model.provider_name, model=scripted_model.model,
    )
    agents[ROUTER].sub_agents.set([agents[LOOKUP], agents[CANCELLATION]])
    return agents
