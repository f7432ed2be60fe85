"""The order-support demo: its users, agents and sample conversations, as data plus the functions that create them.

`agenttest demo_setup` calls these; tests build the same agents through them. Everything here is idempotent:
what exists is left as it is, so an admin's edits to a demo agent survive a re-run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from agenttest.plugin import (
    Agent,
    Conversation,
    ConversationError,
    TurnResult,
    conversation_send,
    conversation_start,
)

DEMO_TAG = "demo"
DEMO_PROVIDER = "simulated"
DEMO_MODEL = "sim-careful"
ROUTER = "order-router"
LOOKUP = "order-lookup"
CANCELLATION = "order-cancellation"

# State the instructions render; a sub-agent knows who it serves and which order the conversation is about.
_CUSTOMER_CONTEXT = (
    "Customer: {{ customer_email|default:'unknown' }}\n"
    "Current order: {{ order_id|default:'none yet' }} (status: {{ order_status|default:'unknown' }})"
)


@dataclass(frozen=True)
class DemoAgent:
    name: str
    description: str
    instruction: str
    functions: tuple[str, ...] = ()
    sub_agents: tuple[str, ...] = ()


@dataclass(frozen=True)
class DemoConversation:
    title: str
    messages: tuple[str, ...]
    initial_state: dict[str, Any] = field(default_factory=dict)
    agent: str = ROUTER


# Sub-agents come before the router that names them.
DEMO_AGENTS: tuple[DemoAgent, ...] = (
    DemoAgent(
        name=LOOKUP,
        description="Looks up orders: status, items and the customer's email for an order number.",
        instruction=(
            "You answer questions about existing orders of an online shop. Look the order up with lookup_order "
            "before you say anything about it, and never change an order.\n" + _CUSTOMER_CONTEXT
        ),
        functions=("lookup_order",),
    ),
    DemoAgent(
        name=CANCELLATION,
        description="Cancels orders and sends confirmation emails to the customer.",
        instruction=(
            "You cancel orders of an online shop. Look the order up first; do not cancel one that is already "
            "delivered. After a cancellation, email the customer a confirmation.\n" + _CUSTOMER_CONTEXT
        ),
        functions=("lookup_order", "cancel_order", "util-email-handle_email_sender"),
    ),
    DemoAgent(
        name=ROUTER,
        description="Routes order-support requests to the right specialist.",
        instruction=(
            "You are the front desk of an online shop's order support. Hand each request to the sub-agent that "
            "handles it; do not answer order questions yourself.\n"
            "Customer: {{ customer_email|default:'unknown' }}"
        ),
        sub_agents=(LOOKUP, CANCELLATION),
    ),
)

DEMO_CONVERSATIONS: tuple[DemoConversation, ...] = (
    DemoConversation(title="Where is order 1042?", messages=("Where is my order #1042?",)),
    DemoConversation(
        title="Cancel order 1043",
        messages=("Please cancel order 1043, my email is ana@example.com",),
    ),
    DemoConversation(
        title="Cancel a delivered order",
        messages=("Can you cancel order 1047?",),
        initial_state={"customer_email": "bo@example.com"},
    ),
)


def _declared(name: str) -> dict[str, Any]:
    # A name alone: the loop offers the registered function's own description and JSON Schema.
    return {"name": name}


@transaction.atomic
def demo_agents_ensure() -> list[tuple[Agent, bool]]:
    """Create the demo agents that do not exist yet. Returns (agent, created) in DEMO_AGENTS order."""
    results = []
    for spec in DEMO_AGENTS:
        agent, created = Agent.objects.get_or_create(
            name=spec.name,
            defaults={
                "description": spec.description,
                "instruction": spec.instruction,
                "provider": DEMO_PROVIDER,
                "model": DEMO_MODEL,
                "temperature": 0.0,
                "functions": [_declared(name) for name in spec.functions],
            },
        )
        if created and spec.sub_agents:
            agent.sub_agents.set(Agent.objects.filter(name__in=spec.sub_agents))
        results.append((agent, created))
    return results


def demo_user_ensure(*, username: str, password: str, superuser: bool) -> tuple[AbstractBaseUser, bool]:
    """The user `username`, created with `password` if missing. An existing user is never changed."""
    user_model = get_user_model()
    existing = user_model.objects.filter(username=username).first()
    if existing is not None:
        return existing, False
    if superuser:
        user = user_model.objects.create_superuser(username=username, email=f"{username}@localhost", password=password)
        return user, True
    return user_model.objects.create_user(username=username, password=password), True


def demo_conversations_exist() -> bool:
    # Tags are a JSON list; a quoted substring match works on SQLite and PostgreSQL alike.
    return Conversation.objects.filter(tags__icontains=f'"{DEMO_TAG}"').exists()


@dataclass
class DemoConversationResult:
    conversation: Conversation
    turns: list[TurnResult]
    error: str = ""


def demo_conversations_create(*, owner: AbstractBaseUser) -> list[DemoConversationResult]:
    """Play the demo conversations on the demo agents' models, tagged "demo". Does nothing once any exist.

    A turn that fails is reported, not raised: the conversation keeps what happened up to the failure."""
    if demo_conversations_exist():
        return []
    results = []
    for spec in DEMO_CONVERSATIONS:
        conversation = conversation_start(
            agent=Agent.objects.get(name=spec.agent),
            tags=[DEMO_TAG],
            initial_state=dict(spec.initial_state),
            owner=owner,
            title=spec.title,
        )
        result = DemoConversationResult(conversation=conversation, turns=[])
        for text in spec.messages:
            try:
                result.turns.append(conversation_send(conversation=conversation, text=text))
            except ConversationError as exc:
                result.error = str(exc)
                break
        results.append(result)
    return results
