"""Server-rendered pages. The chat page is a shell: chat.js drives it through the REST API with the session, and
draws the conversation from the server's own fragment of it (the host's transcript partials, as every page does).
The conversation page shows one conversation whole, with the panels other apps register (`browser`)."""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from agenthost.browser import (
    conversation_chat_url,
    conversation_list_url,
    conversation_page_url,
    conversation_page_url_pattern,
    conversation_panels,
)
from agenthost.models import Conversation
from agenthost.selectors import agent_list, conversation_for_user, conversation_list, conversation_state, sealed_filter
from agenthost.transcripts import START, transcript_load
from common.inputs import parse_id, text_is_storable

CONVERSATIONS_PER_PAGE = 25


@login_required
def index(request: HttpRequest) -> HttpResponse:
    return redirect("agents:chat")


@login_required
def chat(request: HttpRequest) -> HttpResponse:
    conversation = None
    error = ""
    wanted = request.GET.get("conversation", "").strip()
    if wanted:
        conversation_id = parse_id(wanted)
        if conversation_id is not None:
            conversation = conversation_list(user=request.user).filter(pk=conversation_id).first()
        if conversation is None:
            error = f"Conversation {wanted} does not exist or is not yours to see. Start a new one below."
    agents = list(agent_list())
    # Preselect the conversation's agent, else an entry agent that routes (it is where users start), else the first.
    selected = conversation.agent_id if conversation else next(
        (agent.pk for agent in agents if agent.sub_agents.all()), agents[0].pk if agents else None
    )
    context = {
        "agents": agents,
        "conversation": conversation,
        "error": error,
        "selected_agent_id": selected,
        "conversation_page_pattern": conversation_page_url_pattern(),
        "transcript_pattern": reverse("agents:chat-transcript", args=[0]).replace("/0/", "/{id}/"),
    }
    return render(request, "agenthost/chat.html", context, status=404 if error else 200)


@require_GET
@login_required
def chat_transcript(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """The conversation's turns as the chat shows them: items of its transcript list, drawn by the host's partials."""
    conversation = conversation_list(user=request.user).filter(pk=conversation_id).first()
    if conversation is None:
        raise Http404(f"Conversation {conversation_id} does not exist or is not yours to see.")
    context = {"transcript": transcript_load(conversation=conversation), "captions": "chat", "user_label": "You"}
    return render(request, "agenthost/transcript/_turns.html", context)


def _date(value: str) -> datetime.date | None:
    try:
        return datetime.date.fromisoformat(value) if value else None
    except ValueError:
        return None


@require_GET
@login_required
def conversations(request: HttpRequest) -> HttpResponse:
    """The one conversation browser. A filter that cannot be read is ignored and named on the page, so the list
    still answers; rows open the page an installed app registered for a conversation (`browser`), else the chat."""
    params = request.GET
    filters = {"agent": params.get("agent", "")} | {
        name: params.get(name, "").strip() for name in ("tag", "search", "from", "to", "sealed")
    }
    try:
        sealed = sealed_filter(filters["sealed"])
        sealed_error = ""
    except ValueError as exc:
        sealed, sealed_error = False, f"The test conversations filter (sealed) {exc}; it was ignored."
        filters["sealed"] = ""
    queryset = conversation_list(
        user=request.user,
        agent_id=parse_id(filters["agent"]),
        tag=filters["tag"],
        search=filters["search"],
        started_from=_date(filters["from"]),
        started_to=_date(filters["to"]),
        sealed=sealed,
    )
    if not (text_is_storable(filters["tag"]) and text_is_storable(filters["search"])):
        # No stored text holds NUL, and PostgreSQL refuses a query that does.
        queryset = queryset.none()
    page = Paginator(queryset, CONVERSATIONS_PER_PAGE).get_page(params.get("page"))
    query = params.copy()
    query.pop("page", None)
    context = {
        "page": page,
        "rows": [
            (conversation, conversation_page_url(conversation_id=conversation.pk)) for conversation in page.object_list
        ],
        "agents": agent_list().values_list("pk", "name"),
        "filters": filters,
        "bad_dates": [name for name in ("from", "to") if filters[name] and _date(filters[name]) is None],
        "sealed_error": sealed_error,
        "query": query.urlencode(),
    }
    return render(request, "agenthost/conversations.html", context)


@require_GET
@login_required
def conversation_page(request: HttpRequest, conversation_id: int) -> HttpResponse:
    conversation = conversation_for_user(user=request.user, conversation_id=conversation_id)
    if conversation is None:
        raise Http404(f"Conversation {conversation_id} does not exist or is not yours to see.")
    return conversation_page_render(request=request, conversation=conversation)


def conversation_page_render(
    *, request: HttpRequest, conversation: Conversation, error: str = "", status: int = 200
) -> HttpResponse:
    """The conversation's page; `error` is said above its panels (a panel's form that was refused: the page again,
    with what it sent still chosen, and `status`)."""
    transcript = transcript_load(conversation=conversation)
    labels = {None: "initial", START: "start-up"}
    panels = conversation_panels(request=request, conversation=conversation)
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
        "panels": panels,
        "stylesheets": list(dict.fromkeys(shown["stylesheet"] for shown in panels if shown["stylesheet"])),
    }
    return render(request, "agenthost/conversation.html", context, status=status)
