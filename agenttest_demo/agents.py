"""The order-support demo: its users, its agents (from their files, agenttest_demo/project/agents/) and its sample
conversations, with the functions that create them.

`agenttest demo_setup` calls these; tests build the same agents through them. Everything here is idempotent:
what exists is left as it is, so an admin's edits to a demo agent survive a re-run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser

from agenttest.plugin import (
    Agent,
    Conversation,
    ConversationError,
    TurnResult,
    conversation_send,
    conversation_start,
)
from agenttest_demo.project import demo_agents_read, demo_project_ensure, harness_installed

DEMO_TAG = "demo"
# The agent the sample conversations talk to; the agents themselves are files (agenttest_demo/project/agents/).
ROUTER = "order-router"


@dataclass(frozen=True)
class DemoConversation:
    title: str
    messages: tuple[str, ...]
    initial_state: dict[str, Any] = field(default_factory=dict)
    agent: str = ROUTER


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


def demo_agents_ensure() -> list[tuple[Agent, bool]]:
    """Create the demo agents that do not exist yet from their files (agenttest_demo/project/agents/), applied as
    `agenttest apply` applies them; an agent that exists is left as it is. Returns (agent, created) in the order of
    the files."""
    if not harness_installed():
        return demo_agents_read()
    items = [item for item in demo_project_ensure(suites=()) if item.kind == "agent"]
    agents = {agent.name: agent for agent in Agent.objects.filter(name__in=[item.name for item in items])}
    return [(agents[item.name], item.created) for item in items]


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
