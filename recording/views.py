"""One conversation's page: its transcript with its tool calls and state timeline; the host's conversation list opens
it (registered through `agenthost.seams.conversation_page_register`). Staff also get "Record as draft" and "Extract
cases", which lead to the drafts they create in the admin."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from rest_framework.throttling import ScopedRateThrottle

from agenthost.seams import (
    TRANSCRIPT_START,
    Conversation,
    configured_models,
    conversation_chat_url,
    conversation_list_url,
    conversation_state,
    transcript_load,
)
from cases.models import Suite
from common.forms import unknown_fields_message, unknown_form_fields
from recording.api import THROTTLE_SCOPE, suite_from_ref
from recording.panels import conversation_panels
from recording.selectors import conversation_drafts, conversation_for_user, suites_for_drafts
from recording.services import (
    Drafts,
    ExtractionModelUnavailable,
    RecordingError,
    draft_suite_choice,
    extraction_create,
    extraction_model_default,
    recording_create,
)


def _visible(request: HttpRequest, conversation_id: int) -> Conversation:
    conversation = conversation_for_user(user=request.user, conversation_id=conversation_id)
    if conversation is None:
        raise Http404(f"Conversation {conversation_id} does not exist or is not yours to see.")
    return conversation


def _page(request: HttpRequest, conversation: Conversation, *, error: str = "", status: int = 200) -> HttpResponse:
    transcript = transcript_load(conversation=conversation)
    labels = {None: "initial", TRANSCRIPT_START: "start-up"}
    context: dict[str, Any] = {
        "conversation": conversation,
        "transcript": transcript,
        "timeline": [
            {"row": row, "where": labels.get(row.turn, f"turn {row.turn}"), "turn": row.turn}
            for row in transcript.timeline
        ],
        "state": conversation_state(conversation=conversation),
        "error": error,
        "conversations_url": conversation_list_url(),
        "chat_url": conversation_chat_url(conversation_id=conversation.pk),
        # Where an imported conversation came from, span by span, is for staff: a member sees the transcript only.
        "show_spans": request.user.is_staff and conversation.source == Conversation.Source.TRACE,
    }
    # The traces app's source and bind panel on an imported conversation, for instance (recording/panels.py).
    context["panels"] = conversation_panels(request=request, conversation=conversation)
    if request.user.is_staff:
        try:
            automatic = draft_suite_choice(conversation=conversation).label
        except RecordingError:
            automatic = ""
        context.update(
            drafts=conversation_drafts(conversation=conversation),
            suites=suites_for_drafts(),
            automatic_suite=automatic,
            chosen_suite=request.POST.get("suite", ""),
            models=configured_models(),
            chosen_model=request.POST.get("extraction_model", extraction_model_default()),
        )
    return render(request, "recording/conversation_detail.html", context, status=status)


@require_GET
@login_required
def conversation_page(request: HttpRequest, conversation_id: int) -> HttpResponse:
    return _page(request, _visible(request, conversation_id))


def _staff_conversation(request: HttpRequest, conversation_id: int) -> Conversation:
    if not request.user.is_staff:
        raise PermissionDenied("Only staff users may record conversations or extract cases.")
    return _visible(request, conversation_id)


class _Throttled:
    throttle_scope = THROTTLE_SCOPE


def _throttled(request: HttpRequest, conversation: Conversation) -> HttpResponse | None:
    """The buttons share the API's "recording" budget, per user: the page is no way around it."""
    throttle = ScopedRateThrottle()
    # DRF's throttle reads only the user and the client's address, which Django's request carries too.
    if throttle.allow_request(request, _Throttled):  # type: ignore[arg-type]
        return None
    wait = throttle.wait()
    retry = f" Try again in {int(wait) + 1} seconds." if wait else ""
    return _page(request, conversation, error=f"Too many recordings and extractions for now.{retry}", status=429)


# What the page's one form sends to both buttons: Record as draft ignores the extraction model.
_MAKE_CASES_FIELDS = ("suite", "extraction_model")


def _unknown_fields(request: HttpRequest, conversation: Conversation) -> HttpResponse | None:
    """A 400 naming any other field, before anything is created (or counted against the throttle): a client that
    sends one expects it to mean something, and the API refuses it too."""
    unknown = unknown_form_fields(request.POST, _MAKE_CASES_FIELDS)
    if not unknown:
        return None
    error = f"{unknown_fields_message(unknown, _MAKE_CASES_FIELDS)} Nothing was created."
    return _page(request, conversation, error=error, status=400)


def _chosen_suite(request: HttpRequest) -> Suite | None:
    return suite_from_ref(request.POST.get("suite", ""))


def _to_drafts(request: HttpRequest, drafts: Drafts, verb: str) -> HttpResponse:
    count = len(drafts.cases)
    created = " (a new suite)" if drafts.suite_created else ""
    messages.success(
        request,
        f"{verb} {count} disabled draft{'s' if count != 1 else ''} in suite {drafts.suite.name!r}{created}. "
        "Review each one, then enable it to make it part of runs.",
    )
    for warning in drafts.warnings:
        messages.warning(request, f"Note: {warning}.")
    if count == 1:
        return redirect(reverse("admin:cases_case_change", args=[drafts.cases[0].pk]))
    ids = ",".join(str(case.pk) for case in drafts.cases)
    return redirect(f"{reverse('admin:cases_case_changelist')}?id__in={ids}")


@require_POST
@login_required
def conversation_record(request: HttpRequest, conversation_id: int) -> HttpResponse:
    conversation = _staff_conversation(request, conversation_id)
    if (refused := _unknown_fields(request, conversation)) is not None:
        return refused
    if (refused := _throttled(request, conversation)) is not None:
        return refused
    try:
        drafts = recording_create(conversation=conversation, suite=_chosen_suite(request))
    except RecordingError as exc:
        return _page(request, conversation, error=str(exc), status=400)
    return _to_drafts(request, drafts, "Recorded")


@require_POST
@login_required
def conversation_extract(request: HttpRequest, conversation_id: int) -> HttpResponse:
    conversation = _staff_conversation(request, conversation_id)
    if (refused := _unknown_fields(request, conversation)) is not None:
        return refused
    if (refused := _throttled(request, conversation)) is not None:
        return refused
    try:
        drafts = extraction_create(
            conversation=conversation,
            suite=_chosen_suite(request),
            model_key=request.POST.get("extraction_model", ""),
        )
    except RecordingError as exc:
        status = 502 if isinstance(exc, ExtractionModelUnavailable) else 400
        return _page(request, conversation, error=str(exc), status=status)
    return _to_drafts(request, drafts, "Extracted")
