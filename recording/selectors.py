"""Reads for the conversation pages: which conversations a person may see, and the drafts made from one."""

from __future__ import annotations

import datetime
from typing import Any

from django.db.models import Q, QuerySet

from agenthost.seams import Agent, Conversation
from cases.models import Case, Suite


def conversation_list(
    *,
    user: Any,
    agent_id: int | None = None,
    tag: str = "",
    search: str = "",
    started_from: datetime.date | None = None,
    started_to: datetime.date | None = None,
    sealed: bool | None = False,
) -> QuerySet[Conversation]:
    """Conversations `user` may see — staff all, others their own — newest first. `started_to` is inclusive;
    `search` matches the title or any message's text. Sealed (test) conversations are left out unless `sealed` is
    True (only them) or None (both)."""
    queryset = Conversation.objects.select_related("agent", "current_agent", "owner")
    if not user.is_staff:
        queryset = queryset.filter(owner=user)
    if sealed is not None:
        queryset = queryset.exclude(seal_hash="") if sealed else queryset.filter(seal_hash="")
    if agent_id:
        queryset = queryset.filter(agent_id=agent_id)
    if tag:
        # Tags are a JSON list; a quoted substring match works on SQLite and PostgreSQL alike.
        queryset = queryset.filter(tags__icontains=f'"{tag}"')
    if started_from:
        queryset = queryset.filter(created_at__date__gte=started_from)
    if started_to:
        queryset = queryset.filter(created_at__date__lte=started_to)
    if search:
        matching = Conversation.objects.filter(
            Q(title__icontains=search) | Q(messages__content__icontains=search)
        ).values("pk")
        queryset = queryset.filter(pk__in=matching)
    return queryset.order_by("-created_at", "-id")


def conversation_for_user(*, user: Any, conversation_id: int) -> Conversation | None:
    """The conversation, if `user` may see it."""
    return conversation_list(user=user, sealed=None).filter(pk=conversation_id).first()


def conversation_agents() -> QuerySet[Agent]:
    return Agent.objects.order_by("name")


def conversation_drafts(*, conversation: Conversation) -> QuerySet[Case]:
    """Cases recorded or extracted from the conversation, newest first."""
    return Case.objects.filter(source_conversation=conversation).select_related("suite").order_by("-created_at", "-id")


def suites_for_drafts() -> QuerySet[Suite]:
    return Suite.objects.select_related("agent").order_by("name")
