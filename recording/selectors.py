"""Reads for the conversation page: whether a person may see a conversation, and the drafts made from one."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from agenthost.seams import Conversation, conversation_list
from cases.models import Case, Suite


def conversation_for_user(*, user: Any, conversation_id: int) -> Conversation | None:
    """The conversation, if `user` may see it."""
    return conversation_list(user=user, sealed=None).filter(pk=conversation_id).first()


def conversation_drafts(*, conversation: Conversation) -> QuerySet[Case]:
    """Cases recorded or extracted from the conversation, newest first."""
    return Case.objects.filter(source_conversation=conversation).select_related("suite").order_by("-created_at", "-id")


def suites_for_drafts() -> QuerySet[Suite]:
    return Suite.objects.select_related("agent").order_by("name")
