"""The runs app's panel on the conversation page (the recording app's): a conversation a case ran in says which
result it is the test conversation of, and links to it — the way back from the result page's "Conversation #N"."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import reverse

from agenthost.seams import Conversation
from runs.models import CaseResult

RESULT_PANEL = "runs/_conversation_result.html"


def result_panel_context(request: HttpRequest, conversation: Conversation) -> dict[str, Any] | None:
    result = CaseResult.objects.filter(conversation=conversation).select_related("run__suite").first()
    if result is None:
        return None
    return {
        "result": result,
        "url": reverse("runs:result", kwargs={"run_id": result.run_id, "result_id": result.pk}),
        "run_url": reverse("runs:detail", kwargs={"run_id": result.run_id}),
    }
