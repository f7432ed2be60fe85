"""What the recording app's panel on the host's conversation page sends (recording/panels.py): "Record as draft" and
"Extract cases", for staff, which lead to the drafts they create in the admin — or back to the page, saying why not."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from rest_framework.throttling import ScopedRateThrottle

from agenthost.seams import Conversation, conversation_for_user, conversation_page_render
from cases.models import Suite
from common.forms import unknown_fields_message, unknown_form_fields
from recording.api import THROTTLE_SCOPE, suite_from_ref
from recording.services import (
    Drafts,
    ExtractionModelUnavailable,
    RecordingError,
    extraction_create,
    recording_create,
)


def _visible(request: HttpRequest, conversation_id: int) -> Conversation:
    conversation = conversation_for_user(user=request.user, conversation_id=conversation_id)
    if conversation is None:
        raise Http404(f"Conversation {conversation_id} does not exist or is not yours to see.")
    return conversation


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
    return conversation_page_render(
        request=request, conversation=conversation, error=f"Too many recordings and extractions for now.{retry}",
        status=429,
    )


# What the page's one form sends to both buttons: Record as draft ignores the extraction model.
_MAKE_CASES_FIELDS = ("suite", "extraction_model")


def _unknown_fields(request: HttpRequest, conversation: Conversation) -> HttpResponse | None:
    """A 400 naming any other field, before anything is created (or counted against the throttle): a client that
    sends one expects it to mean something, and the API refuses it too."""
    unknown = unknown_form_fields(request.POST, _MAKE_CASES_FIELDS)
    if not unknown:
        return None
    error = f"{unknown_fields_message(unknown, _MAKE_CASES_FIELDS)} Nothing was created."
    return conversation_page_render(request=request, conversation=conversation, error=error, status=400)


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
        return conversation_page_render(request=request, conversation=conversation, error=str(exc), status=400)
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
        return conversation_page_render(request=request, conversation=conversation, error=str(exc), status=status)
    return _to_drafts(request, drafts, "Extracted")
