"""Server-rendered pages. The chat page is a shell: chat.js drives it through the REST API with the session."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from agenthost.selectors import agent_list, conversation_list, sealed_filter
from agenttest.inputs import parse_id, text_is_storable

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
    context = {"agents": agents, "conversation": conversation, "error": error, "selected_agent_id": selected}
    return render(request, "agents/chat.html", context, status=404 if error else 200)


@login_required
def conversations(request: HttpRequest) -> HttpResponse:
    agent_id = request.GET.get("agent", "")
    tag = request.GET.get("tag", "").strip()
    search = request.GET.get("search", "").strip()
    sealed_raw = request.GET.get("sealed", "").strip()
    try:
        sealed = sealed_filter(sealed_raw)
        error = ""
    except ValueError as exc:
        sealed, error = False, f"The sealed filter {exc}."
    queryset = conversation_list(
        user=request.user, agent_id=parse_id(agent_id), tag=tag, search=search, sealed=sealed
    ).select_related("current_agent")
    if not (text_is_storable(tag) and text_is_storable(search)):
        # No stored text holds NUL, and PostgreSQL refuses a query that does.
        queryset = queryset.none()
    page = Paginator(queryset, CONVERSATIONS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "page": page,
        "agents": agent_list(),
        "filters": {"agent": agent_id, "tag": tag, "search": search, "sealed": sealed_raw},
        "query": query.urlencode(),
        "error": error,
    }
    return render(request, "agents/conversations.html", context, status=400 if error else 200)
