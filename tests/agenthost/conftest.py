"""Fixtures of the host's tests: a local server, the order tools their agents declare, and an order desk of three
agents (a router and its two sub-agents) on the scripted model."""

from __future__ import annotations

import json

import pytest

from agenthost.functions import FunctionContext, FunctionResult, register_function
from agenthost.models import Agent
from tests.agenthost.listeners import local_server

__all__ = ["local_server"]

# Registered as a plugin registers its tools, so the host's tests need no plugin loaded: a look-up free of outside
# effects and a cancellation with them. Both write the order and its status into the conversation's state.
LOOKUP_ORDER = "test-lookup_order"
CANCEL_ORDER = "test-cancel_order"
EMAIL = "util-email-handle_email_sender"
_ORDER_ID = {"type": "string", "description": "The order number, e.g. 1042."}
# An order's status follows its number, so a test picks the order it needs: 1041 and 1044 are shipped, 1042 is
# delivered, 1040 and 1043 are processing.
_STATUSES = ("processing", "shipped", "delivered", "processing", "shipped")


def order_status(order_id: str) -> str:
    return _STATUSES[int(order_id) % len(_STATUSES)]


@register_function(
    name=LOOKUP_ORDER,
    outside_effects=False,
    description="Look up an order by its number: its status.",
    parameters={"type": "object", "properties": {"order_id": _ORDER_ID}, "required": ["order_id"]},
)
def _lookup_order(context: FunctionContext, order_id: str) -> FunctionResult:
    status = order_status(order_id)
    return FunctionResult(content=json.dumps({"order_id": order_id, "status": status}),
                          state_writes={"order_id": order_id, "order_status": status})


@register_function(
    name=CANCEL_ORDER,
    outside_effects=True,
    description="Cancel an order that has not been delivered yet.",
    parameters={
        "type": "object",
        "properties": {"order_id": _ORDER_ID, "reason": {"type": "string", "description": "Why the customer cancels."}},
        "required": ["order_id"],
    },
)
def _cancel_order(context: FunctionContext, order_id: str, reason: str = "") -> FunctionResult:
    if order_status(order_id) == "delivered":
        return FunctionResult(
            content=json.dumps({"order_id": order_id, "cancelled": False, "error": "the order was already delivered"}),
            state_writes={"order_id": order_id, "order_status": "delivered"},
        )
    return FunctionResult(content=json.dumps({"order_id": order_id, "cancelled": True}),
                          state_writes={"order_id": order_id, "order_status": "cancelled"})


ROUTER, LOOKUP, CANCELLATION = "order-router", "order-lookup", "order-cancellation"
_CUSTOMER = "Customer: {{ customer_email|default:'unknown' }}"


@pytest.fixture
def order_agents(db, scripted_model) -> dict[str, Agent]:
    """The order desk by name: the router hands each request to the sub-agent that looks orders up or to the one that
    cancels them. All three run on the scripted model; a test plays what they answer."""
    agents = {
        LOOKUP: Agent.objects.create(
            name=LOOKUP, description="Looks up orders: status for an order number.",
            instruction=f"You answer questions about existing orders.\n{_CUSTOMER}",
            provider=scripted_model.provider_name, model=scripted_model.model, functions=[{"name": LOOKUP_ORDER}],
        ),
        CANCELLATION: Agent.objects.create(
            name=CANCELLATION, description="Cancels orders and sends confirmation emails to the customer.",
            instruction=f"You cancel orders and email the customer a confirmation.\n{_CUSTOMER}",
            provider=scripted_model.provider_name, model=scripted_model.model,
            functions=[{"name": LOOKUP_ORDER}, {"name": CANCEL_ORDER}, {"name": EMAIL}],
        ),
    }
    agents[ROUTER] = Agent.objects.create(
        name=ROUTER, description="Routes order-support requests to the right specialist.",
        instruction=f"Hand each request to the sub-agent that handles it.\n{_CUSTOMER}",
        provider=scripted_model.provider_name, model=scripted_model.model,
    )
    agents[ROUTER].sub_agents.set([agents[LOOKUP], agents[CANCELLATION]])
    return agents
