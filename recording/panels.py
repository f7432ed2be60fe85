"""The recording app's panel on the host's conversation page: "Make test cases from this conversation" — Record as
draft and Extract cases, and the drafts already made from it. For staff only, as recording is."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from agenthost.seams import Conversation, configured_models
from recording.selectors import conversation_drafts, suites_for_drafts
from recording.services import RecordingError, draft_suite_choice, extraction_model_default

MAKE_CASES_PANEL = "recording/_make_cases.html"
MAKE_CASES_STYLESHEET = "recording/recording.css"
# After the panels that say what the conversation is (a test conversation's result, an imported one's source).
MAKE_CASES_ORDER = 100


def make_cases_panel_context(request: HttpRequest, conversation: Conversation) -> dict[str, Any] | None:
    if not request.user.is_staff:
        return None
    try:
        automatic = draft_suite_choice(conversation=conversation).label
    except RecordingError:
        automatic = ""
    # A refused form comes back with what it sent still chosen.
    return {
        "drafts": conversation_drafts(conversation=conversation),
        "suites": suites_for_drafts(),
        "automatic_suite": automatic,
        "chosen_suite": request.POST.get("suite", ""),
        "models": configured_models(),
        "chosen_model": request.POST.get("extraction_model", extraction_model_default()),
    }
