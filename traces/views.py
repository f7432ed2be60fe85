"""Staff pages for imported traces: the conversations the stored spans make — when they arrived, their service, first
question, model, spans, binding and status, filtered by service, binding and status — each imported one linked to its
page and each one agenttest could not import named with the reason; a conversation is bound to an agent chosen here
(a trace whose agent agenttest does not know), or bound again from its conversation page."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.text import capfirst
from django.views.decorators.http import require_GET, require_POST

from agenthost.seams import Agent, conversation_list_url, conversation_page_url
from common.forms import unknown_fields_message, unknown_form_fields
from traces.conversations import ConversationImportError, trace_conversation_bind, trace_conversations_unimported
from traces.selectors import (
    BINDINGS,
    FIRST_QUESTION_CHARS,
    STATUSES,
    imported_conversations,
    trace_conversation_count,
    trace_conversation_list,
    trace_service_names,
)

CONVERSATIONS_PER_PAGE = 25
_BIND_FIELDS = ("conversation", "agent")


# How a conversation was bound, as a sentence ends: "bound to agent shop by …".
_BOUND_BY = {"agent name": "the agent its trace names", "service name": "its service's name", "chosen": "staff choice"}
_STAFF_ONLY = "Only staff users may see imported traces or bind them to agents."


def _staff(request: HttpRequest) -> HttpResponse | None:
    """The app's own page for a member (Django's bare 403 page otherwise); None for staff."""
    if request.user.is_staff:
        return None
    context = {"reason": _STAFF_ONLY, "conversations_url": conversation_list_url()}
    return render(request, "traces/forbidden.html", context, status=403)


def _filters(request: HttpRequest) -> tuple[dict[str, str], str]:
    """The page's filters from its query string, and what is wrong with them ("" when nothing)."""
    filters = {name: request.GET.get(name, "").strip() for name in ("service", "binding", "status")}
    if filters["binding"] not in ("", *BINDINGS):
        return filters, f"binding: must be one of {', '.join(BINDINGS)}, got {filters['binding'][:50]!r}"
    if filters["status"] not in ("", *STATUSES):
        return filters, f"status: must be one of {', '.join(STATUSES)}, got {filters['status'][:50]!r}"
    if len(filters["service"]) > 200:
        return filters, "service: at most 200 characters, as a service.name is stored"
    return filters, ""


def _list(request: HttpRequest, *, error: str = "", status: int = 200) -> HttpResponse:
    filters, wrong = _filters(request)
    if wrong:
        error, status, filters = f"{wrong}. Nothing was filtered.", 400, {}
    page = Paginator(range(trace_conversation_count(**filters)), CONVERSATIONS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    listed = trace_conversation_list(
        **filters, limit=CONVERSATIONS_PER_PAGE, offset=(page.number - 1) * CONVERSATIONS_PER_PAGE
    )
    # One key may be two services' conversations (each its own, docs/decisions/0034-production-traces.md).
    # Conversations annotated with `first_question` (imported_conversations) and given their binding's words here.
    imported: dict[str, list[Any]] = {}
    conversation: Any
    for conversation in imported_conversations(keys=[item.key for item in listed]):
        conversation.bound_by_text = _BOUND_BY.get(conversation.bound_by, conversation.bound_by)
        imported.setdefault(conversation.trace_key, []).append(conversation)
    # Spans of another service under a key one service's conversation took: shown, not dropped silently.
    reasons = trace_conversations_unimported(
        listed=listed,
        placed={key: {conversation.trace_service for conversation in items} for key, items in imported.items()},
    )
    rows = []
    for item in listed:
        conversations = imported.get(item.key, [])
        question = next((c.first_question for c in conversations if c.first_question), "")
        rows.append({
            "item": item,
            "conversations": conversations,
            "links": [(conversation, conversation_page_url(conversation_id=conversation.pk))
                      for conversation in conversations],
            "question": question,
            "question_cut": len(question) >= FIRST_QUESTION_CHARS,
            "status": "unimported" if not conversations else "incomplete" if item.history_cut else "imported",
            "reasons": reasons.get(item.key, []),
        })
    context = {
        "rows": rows,
        "page": page,
        "agents": Agent.objects.order_by("name"),
        "error": error,
        "chosen": request.POST.get("conversation", ""),
        "filters": filters,
        "filtered": any(filters.values()),
        # As the filter partial takes its choices: (value, text).
        "services": [(service, service) for service in trace_service_names()],
        "bindings": [(binding, capfirst(binding)) for binding in BINDINGS],
        "statuses": list(STATUSES.items()),
        # The page's query string without its page number, for the pager's links to keep the filters.
        "query": urlencode({name: value for name, value in filters.items() if value}),
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
    return redirect(conversation_page_url(conversation_id=conversation.pk))
