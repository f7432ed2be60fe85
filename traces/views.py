"""Staff pages for imported traces: the conversations the stored spans make, each imported one linked to its page and
each one agenttest could not import named with the reason; a conversation is bound to an agent chosen here (a trace
whose agent agenttest does not know), or bound again from its conversation page."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agenthost.seams import Agent, Conversation
from common.forms import unknown_fields_message, unknown_form_fields
from traces.conversations import (
    ConversationImportError,
    trace_conversation_bind,
    trace_conversation_unimported_reason,
    trace_conversation_unplaced,
)
from traces.selectors import trace_conversation_count, trace_conversation_list

CONVERSATIONS_PER_PAGE = 25
_BIND_FIELDS = ("conversation", "agent")


# How a conversation was bound, as a sentence ends: "bound to agent shop by …".
_BOUND_BY = {"agent name": "the agent its trace names", "service name": "its service's name", "chosen": "staff choice"}
_STAFF_ONLY = "Only staff users may see imported traces or bind them to agents."


def _staff(request: HttpRequest) -> HttpResponse | None:
    """The app's own page for a member (Django's bare 403 page otherwise); None for staff."""
    if request.user.is_staff:
        return None
    return render(request, "traces/forbidden.html", {"reason": _STAFF_ONLY}, status=403)


def _list(request: HttpRequest, *, error: str = "", status: int = 200) -> HttpResponse:
    page = Paginator(range(trace_conversation_count()), CONVERSATIONS_PER_PAGE).get_page(request.GET.get("page"))
    listed = trace_conversation_list(limit=CONVERSATIONS_PER_PAGE, offset=(page.number - 1) * CONVERSATIONS_PER_PAGE)
    # One key may be two services' conversations (each its own, docs/decisions/0034-production-traces.md).
    imported: dict[str, list[Conversation]] = {}
    for conversation in Conversation.objects.filter(
        source=Conversation.Source.TRACE, trace_key__in=[item.key for item in listed]
    ).select_related("agent").order_by("trace_service", "pk"):
        conversation.bound_by_text = _BOUND_BY.get(conversation.bound_by, conversation.bound_by)
        imported.setdefault(conversation.trace_key, []).append(conversation)
    rows = [
        {
            "item": item,
            "conversations": imported.get(item.key, []),
            "reason": "" if item.key in imported else trace_conversation_unimported_reason(key=item.key),
            # Spans of another service under a key one service's conversation took: shown, not dropped silently.
            "unplaced": trace_conversation_unplaced(
                key=item.key, services=item.services,
                placed={conversation.trace_service for conversation in imported[item.key]},
            ) if item.key in imported else [],
        }
        for item in listed
    ]
    context = {
        "rows": rows,
        "page": page,
        "agents": Agent.objects.order_by("name"),
        "error": error,
        "chosen": request.POST.get("conversation", ""),
    }
    return render(request, "traces/conversations.html", context, status=status)


@require_GET
@login_required
def trace_conversations(request: HttpRequest) -> HttpResponse:
    return _staff(request) or _list(request)


@require_POST
@login_required
def trace_conversation_bind_view(request: HttpRequest) -> HttpResponse:
    forbidden = _staff(request)
    if forbidden is not None:
        return forbidden
    unknown = unknown_form_fields(request.POST, _BIND_FIELDS)
    if unknown:
        return _list(request, error=f"{unknown_fields_message(unknown, _BIND_FIELDS)} Nothing was bound.", status=400)
    try:
        conversation = trace_conversation_bind(
            key=request.POST.get("conversation", ""), agent=request.POST.get("agent", "")
        )
    except ConversationImportError as exc:
        return _list(request, error=f"{exc.field}: {exc}. Nothing was bound.", status=400)
    messages.success(
        request, f"Conversation #{conversation.pk} is bound to agent {conversation.agent.name}; record it as a draft."
    )
    return redirect(reverse("recording:conversation", kwargs={"conversation_id": conversation.pk}))
