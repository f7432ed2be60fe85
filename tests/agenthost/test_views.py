"""The server-rendered pages: login, the chat shell, the conversation list and a conversation's page."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.staticfiles import finders

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start
from agenthost.views import CONVERSATIONS_PER_PAGE
from tests.agenthost.conftest import CANCELLATION, LOOKUP, ROUTER
from tests.order_tools import TRACK_ORDER, VOID_ORDER

pytestmark = pytest.mark.django_db

CANCEL_1043 = "Please cancel order 1043, my email is ana@example.com"


def _play_cancellation(scripted_model) -> None:
    """The order desk's side of CANCEL_1043: the router hands it over, the sub-agent cancels the order and says so."""
    scripted_model.play(
        Answer(tool_calls=[Call("route_to_agent", {"agent_name": CANCELLATION})]),
        Answer(tool_calls=[Call(VOID_ORDER, {"order_id": "1043"})]),
        "Order 1043 is now cancelled.",
    )


@pytest.mark.parametrize("url", ["/chat/", "/conversations/"])
def test_it_sends_anonymous_visitors_to_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={url}"


def test_it_opens_the_chat_from_the_root_url(client, member):
    client.force_login(member)
    assert client.get("/")["Location"] == "/chat/"


def test_it_logs_a_member_in_and_out(client, member):
    page = client.get("/accounts/login/?next=/chat/")
    assert page.status_code == 200 and b'name="password"' in page.content

    refused = client.post("/accounts/login/", {"username": "mia", "password": "wrong"})
    assert b"didn't match" in refused.content

    logged_in = client.post("/accounts/login/", {"username": "mia", "password": "mia-password-123", "next": "/chat/"})
    assert logged_in["Location"] == "/chat/"
    assert client.get("/chat/").status_code == 200

    client.post("/accounts/logout/")
    assert client.get("/chat/").status_code == 302


def test_it_renders_the_chat_for_a_member_with_every_agent(client, member, order_agents):
    client.force_login(member)
    response = client.get("/chat/")
    assert response.status_code == 200
    html = response.content.decode()
    for name in order_agents:
        assert f"{name} — scripted:scripted" in html
    assert 'data-csrf="' in html and 'data-conversation=""' in html
    assert 'src="/static/agenthost/chat.js"' in html and 'href="/static/css/app.css"' in html
    assert 'href="/runs/"' in html and 'href="/api/docs/"' in html
    assert 'href="/admin/"' not in html, "members get no admin link"
    assert re.search(r'<form method="post" action="/accounts/logout/"', html)
    # Everything the page loads comes from the app itself: no CDN.
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_it_shows_staff_the_admin_link(client, admin_user, order_agents):
    client.force_login(admin_user)
    assert 'href="/admin/"' in client.get("/chat/").content.decode()


def test_it_ships_the_chat_assets(client):
    assert finders.find("agenthost/chat.js") and finders.find("css/app.css")


def test_it_explains_an_empty_agent_list(client, member):
    client.force_login(member)
    assert b"There are no agents yet" in client.get("/chat/").content


def test_it_continues_an_own_conversation_but_not_someone_elses(client, member, outsider, order_agents):
    mine = conversation_start(agent=order_agents[LOOKUP], owner=member)
    theirs = conversation_start(agent=order_agents[LOOKUP], owner=outsider)
    client.force_login(member)

    response = client.get(f"/chat/?conversation={mine.pk}")
    assert response.status_code == 200
    assert f'data-conversation="{mine.pk}"' in response.content.decode()

    hidden = client.get(f"/chat/?conversation={theirs.pk}")
    assert hidden.status_code == 404
    html = hidden.content.decode()
    assert f"Conversation {theirs.pk} does not exist or is not yours" in html
    assert 'data-conversation=""' in html
    assert client.get("/chat/?conversation=abc").status_code == 404


def test_it_draws_the_chats_conversation_on_the_server_with_the_hosts_partials(
    client, member, outsider, order_agents, scripted_model
):
    _play_cancellation(scripted_model)
    mine = conversation_start(agent=order_agents[ROUTER], owner=member)
    conversation_send(conversation=mine, text=CANCEL_1043)
    theirs = conversation_start(agent=order_agents[ROUTER], owner=outsider)
    client.force_login(member)

    chat = client.get(f"/chat/?conversation={mine.pk}").content.decode()
    assert 'data-transcript="/chat/conversations/{id}/transcript/"' in chat
    html = client.get(f"/chat/conversations/{mine.pk}/transcript/").content.decode()
    assert re.search(r'<li class="turn" id="turn-0" data-turn="0">\s*<div class="msg msg-user">\s*'
                     r'<div class="msg-who">You\s*</div>\s*<div class="msg-text">Please cancel order 1043', html)
    assert re.search(r'<details class="tool-call[^"]*">\s*<summary class="tool-head">\s*'
                     rf'<span class="tool-name">{VOID_ORDER}</span>.*?by order-cancellation</span>', html, re.S)
    assert "Order 1043 is now cancelled" in html
    assert re.search(r'Agents: </span>order-router → [^<]*order-cancellation', html)
    assert "Tokens: </span>" in html and "Steps: </span>" in html
    assert client.get(f"/chat/conversations/{theirs.pk}/transcript/").status_code == 404
    assert client.get("/chat/conversations/99999/transcript/").status_code == 404


def test_it_shows_a_members_own_conversation_on_its_page_and_no_one_elses(
    client, member, outsider, order_agents, scripted_model
):
    _play_cancellation(scripted_model)
    mine = conversation_start(agent=order_agents[ROUTER], owner=member, title="My cancellation")
    conversation_send(conversation=mine, text=CANCEL_1043)
    theirs = conversation_start(agent=order_agents[ROUTER], owner=outsider)
    client.force_login(member)

    page = client.get(f"/conversations/{mine.pk}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "My cancellation" in html and "Please cancel order 1043" in html
    assert re.search(rf'<span class="tool-name">{VOID_ORDER}</span>', html)
    assert 'href="/static/agenthost/conversation.css"' in html
    # Panels are the harness's; Record and Extract (and their sheet) are for staff only.
    assert "Make test cases" not in html and "recording/recording.css" not in html
    assert client.get(f"/conversations/{theirs.pk}/").status_code == 404
    assert client.get("/conversations/99999/").status_code == 404
    assert client.post(f"/conversations/{mine.pk}/").status_code == 405


def test_it_lists_only_the_members_own_conversations(client, member, outsider, order_agents):
    router = order_agents[ROUTER]
    conversation_start(agent=router, owner=member, title="Mine about refunds", tags=["demo"])
    conversation_start(agent=router, owner=member, title="Mine without tag")
    conversation_start(agent=router, owner=outsider, title="Otto's question")
    client.force_login(member)

    html = client.get("/conversations/").content.decode()
    assert "Mine about refunds" in html and "Mine without tag" in html
    assert "Otto" not in html
    filtered = client.get("/conversations/?tag=demo").content.decode()
    assert "Mine about refunds" in filtered and "Mine without tag" not in filtered
    assert "No conversations match" in client.get("/conversations/?search=nothing-like-this").content.decode()


def test_it_pages_the_conversations_keeping_the_filter_in_the_links(client, member, order_agents):
    router = order_agents[ROUTER]
    for number in range(CONVERSATIONS_PER_PAGE + 2):
        conversation_start(agent=router, owner=member, title=f"Refund question {number}", tags=["demo"])
    client.force_login(member)

    first = client.get("/conversations/?tag=demo").content.decode()
    second = client.get("/conversations/?tag=demo&page=2").content.decode()
    by_router = client.get(f"/conversations/?agent={router.pk}").content.decode()

    assert "Page 1 of 2" in first and 'href="?tag=demo&amp;page=2">Older →</a>' in first
    assert "← Newer" not in first
    assert "Page 2 of 2" in second and 'href="?tag=demo&amp;page=1">← Newer</a>' in second
    assert second.count("Refund question") == 2
    assert f'<option value="{router.pk}" selected>order-router</option>' in by_router


# --- Admin ------------------------------------------------------------------------------------------------------


def _admin_agent_form(**overrides):
    form = {
        "name": "billing",
        "description": "",
        "instruction": "You help {{ customer_email|default:'a customer' }}.",
        "provider": "scripted",
        "model": "scripted",
        "temperature": "0",
        "max_steps": "",
        "functions": json.dumps([{"name": TRACK_ORDER}]),
        "rules": "[]",
    }
    return {**form, **overrides}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"functions": f'[{{"name": "{TRACK_ORDER}"'}, "Enter a valid JSON."),
        ({"functions": '[{"name": ""}]'}, "functions[0].name: must be a non-empty string"),
        ({"model": "imaginary"}, "scripted:imaginary"),
        ({"instruction": "{% if %}"}, "does not compile as a Django template"),
    ],
)
def test_it_refuses_an_agent_the_loop_could_not_run_in_the_admin(
    client, admin_user, scripted_model, overrides, message
):
    client.force_login(admin_user)
    response = client.post("/admin/agenthost/agent/add/", _admin_agent_form(**overrides))
    assert response.status_code == 200
    assert message in response.content.decode().replace("&quot;", '"')
    assert not Agent.objects.filter(name="billing").exists()


def test_it_saves_an_agent_in_the_admin_and_shows_its_json_indented(client, admin_user, order_agents):
    client.force_login(admin_user)
    response = client.post(
        "/admin/agenthost/agent/add/", _admin_agent_form(sub_agents=[order_agents[LOOKUP].pk])
    )
    assert response.status_code == 302
    agent = Agent.objects.get(name="billing")
    assert agent.functions == [{"name": TRACK_ORDER}]
    assert list(agent.sub_agents.values_list("name", flat=True)) == ["order-lookup"]

    page = client.get(f"/admin/agenthost/agent/{agent.pk}/change/").content.decode()
    assert f'[\n  {{\n    &quot;name&quot;: &quot;{TRACK_ORDER}&quot;\n  }}\n]' in page


def test_it_shows_a_conversation_read_only_with_messages_and_state_in_the_admin(
    client, admin_user, order_agents, scripted_model
):
    scripted_model.play(Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1041"})]), "Order 1041 has shipped.")
    conversation = conversation_start(
        agent=order_agents[LOOKUP], owner=admin_user, initial_state={"customer_email": "ana@example.com"}
    )
    conversation_send(conversation=conversation, text="Where is order 1041?")
    client.force_login(admin_user)
    page = client.get(f"/admin/agenthost/conversation/{conversation.pk}/change/").content.decode()
    assert "Where is order 1041?" in page and TRACK_ORDER in page and "ana@example.com" in page
    assert 'name="messages-0-content"' not in page and 'name="state_changes-0-key"' not in page, "read-only"
    assert client.get("/admin/agenthost/conversation/add/").status_code == 403
