from __future__ import annotations

import datetime
from typing import Any

from django.db.models import Q, QuerySet

from agenthost.models import Agent, Conversation, Message, StateChange


def agent_list() -> QuerySet[Agent]:
    return Agent.objects.prefetch_related("sub_agents")


def conversation_list(
    *,
    user: Any,
    agent_id: int | None = None,
    tag: str = "",
    search: str = "",
    started_from: datetime.date | None = None,
    started_to: datetime.date | None = None,
    sealed: bool | None = None,
) -> QuerySet[Conversation]:
    """Conversations a user may see — staff all, others their own — newest first. `sealed` True/False keeps only
    sealed or only unsealed ones; None keeps both. `started_to` is inclusive; `search` matches the title or any
    message's text."""
    qs = Conversation.objects.select_related("agent", "current_agent", "owner")
    if not user.is_staff:
        qs = qs.filter(owner=user)
    if sealed is not None:
        qs = qs.exclude(seal_hash="") if sealed else qs.filter(seal_hash="")
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    if tag:
        # JSON containment is not on SQLite; a quoted substring match on the stored list works on both.
        qs = qs.filter(tags__icontains=f'"{tag}"')
    if started_from:
        qs = qs.filter(created_at__date__gte=started_from)
    if started_to:
        qs = qs.filter(created_at__date__lte=started_to)
    if search:
        qs = qs.filter(Q(title__icontains=search) | Q(messages__content__icontains=search)).distinct()
    return qs


def conversation_messages(*, conversation: Conversation) -> QuerySet[Message]:
    return conversation.messages.select_related("agent").order_by("seq")


def conversation_for_user(*, user: Any, conversation_id: int) -> Conversation | None:
    """The conversation, if `user` may see it: a test conversation (sealed) too."""
    return conversation_list(user=user, sealed=None).filter(pk=conversation_id).first()


def conversation_state(*, conversation: Conversation, at_seq: int | None = None) -> dict[str, Any]:
    """The state as it stood right after message `at_seq` (None: now). Initial state has no message."""
    changes = StateChange.objects.filter(conversation=conversation).order_by("id")
    if at_seq is not None:
        changes = changes.filter(Q(message__isnull=True) | Q(message__seq__lte=at_seq))
    state: dict[str, Any] = {}
    for key, value in changes.values_list("key", "value"):
        state[key] = value
    return state


def conversation_state_timeline(*, conversation: Conversation) -> list[dict[str, Any]]:
    return [
        {"key": key, "value": value, "message_seq": seq, "turn": turn}
        for key, value, seq, turn in StateChange.objects.filter(conversation=conversation)
        .order_by("id")
        .values_list("key", "value", "message__seq", "message__turn")
    ]


SEALED_FILTER_CHOICES = {"0": False, "1": True, "all": None}


def sealed_filter(raw: str | None) -> bool | None:
    """The `sealed` list filter: absent or "0" hides sealed conversations, "1" shows only them, "all" both.
    Raises ValueError for anything else, so the caller can name the parameter."""
    if raw is None or raw == "":
        return False
    if raw not in SEALED_FILTER_CHOICES:
        raise ValueError(f"must be one of {', '.join(SEALED_FILTER_CHOICES)}")
    return SEALED_FILTER_CHOICES[raw]
