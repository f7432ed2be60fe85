"""Reads for the make-cases panel: the drafts made from a conversation, and the suites a draft may go to."""

from __future__ import annotations

from django.db.models import QuerySet

from agenthost.seams import Conversation
from cases.models import Case, Suite


def conversation_drafts(*, conversation: Conversation) -> QuerySet[Case]:
    """Cases recorded or extracted from the conversation, newest first."""
    return Case.objects.filter(source_conversation=conversation).select_related("suite").order_by("-created_at", "-id")


def suites_for_drafts() -> QuerySet[Suite]:
    return Suite.objects.select_related("agent").order_by("name")
