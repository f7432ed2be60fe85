"""The conversation pages: the list with its filters, one conversation's transcript and state timeline, and the
staff-only buttons that lead to the drafts they create."""

from __future__ import annotations

import datetime
import re

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from agenthost.models import Conversation
from cases.models import Case, Suite
from tests.recording.conftest import (
    CANCEL_1043,
    ORDER_ANSWERS,
    ROUTED_1042,
    THREE_TOPICS,
    WHERE_IS_1042,
    answer_by_user_message,
    segments_answer,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_page(client, admin_user):
    client.force_login(admin_user)
    return client


@pytest.fixture
def member_page(client, member):
    client.force_login(member)
    return client


@pytest.mark.parametrize("url", ["/conversations/", "/conversations/1/"])
def test_it_sends_anonymous_visitors_to_the_login_page(client, url):
    response = client.get(url)

    assert response.status_code == 302 and response["Location"] == f"/accounts/login/?next={url}"


def test_it_lists_conversations_filtered_by_agent_date_tag_and_text(staff_page, order_agents, agent_model, talk):
    router, lookup = order_agents["order-router"], order_agents["order-lookup"]
    old = talk(router, title="Old refund question", tags=["demo"])
    Conversation.objects.filter(pk=old.pk).update(created_at=timezone.now() - datetime.timedelta(days=10))
    agent_model.play(*ROUTED_1042)
    talk(router, WHERE_IS_1042, title="Parcel status", tags=["demo"])
    talk(lookup, title="Direct lookup")

    def titles(query):
        html = staff_page.get(f"/conversations/?{query}").content.decode()
        return sorted(re.findall(r'<td class="conversation-title"><a href="/conversations/\d+/">([^<]+)</a>', html))

    assert titles("") == ["Direct lookup", "Old refund question", "Parcel status"]
    assert titles(f"agent={lookup.pk}") == ["Direct lookup"]
    assert titles("tag=demo") == ["Old refund question", "Parcel status"]
    assert titles("search=1042") == ["Parcel status"], "message text is searched too"
    today = timezone.now().date()
    assert titles(f"from={today - datetime.timedelta(days=1)}") == ["Direct lookup", "Parcel status"]
    assert titles(f"to={today - datetime.timedelta(days=5)}") == ["Old refund question"]
    html = staff_page.get("/conversations/?from=yesterday").content.decode()
    assert "this filter was ignored: from" in html
    assert "No conversations match" in staff_page.get("/conversations/?search=nothing-like-this").content.decode()


def test_it_shows_members_only_their_own_conversations(member_page, member, outsider, order_agents, talk):
    mine = talk(order_agents["order-router"], owner=member, title="Mine")
    theirs = talk(order_agents["order-router"], owner=outsider, title="Otto's")

    assert "Otto" not in member_page.get("/conversations/").content.decode()
    assert member_page.get(f"/conversations/{mine.pk}/").status_code == 200
    assert member_page.get(f"/conversations/{theirs.pk}/").status_code == 404


def test_it_shows_the_transcript_with_tool_calls_and_the_state_timeline(staff_page, three_topics):
    html = staff_page.get(f"/conversations/{three_topics.pk}/").content.decode()

    for index, text in enumerate(THREE_TOPICS):
        assert f'id="turn-{index}"' in html and text in html
    assert html.count('<span class="tool-name">track_order</span>') >= 4
    assert "util-email-handle_email_sender" in html
    assert "&quot;order_id&quot;: &quot;1043&quot;" in html, "call arguments are shown as JSON"
    assert "&quot;refund&quot;: &quot;full&quot;" in html, "tool results are shown"
    assert "I checked: order 1047 is already delivered" in html, "what the agent answered"
    timeline = html.split('id="timeline-heading"')[1]
    assert re.search(r"initial.*customer_email.*bo@example.com", timeline, re.S)
    assert re.search(r'href="#turn-2">turn 2</a>.*via <span class="tool-name">void_order</span>.*order_status'
                     r".*&quot;cancelled&quot;", timeline, re.S)


def test_it_offers_staff_the_buttons_and_members_none(staff_page, client, member, order_agents, agent_model, talk):
    agent_model.play(*ROUTED_1042)
    conversation = talk(order_agents["order-router"], WHERE_IS_1042, owner=member)

    staff_html = staff_page.get(f"/conversations/{conversation.pk}/").content.decode()
    assert "Record as draft" in staff_html and "Extract cases" in staff_html
    assert "Automatic: Recorded: order-router" in staff_html

    client.force_login(member)
    member_html = client.get(f"/conversations/{conversation.pk}/").content.decode()
    assert "Record as draft" not in member_html and "Extract cases" not in member_html
    assert client.post(f"/conversations/{conversation.pk}/record/").status_code == 403
    assert client.post(f"/conversations/{conversation.pk}/extract/").status_code == 403
    assert not Case.objects.exists()


def test_it_records_and_leads_to_the_draft_in_the_admin(staff_page, three_topics):
    response = staff_page.post(f"/conversations/{three_topics.pk}/record/", {"suite": ""})

    case = Case.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/admin/cases/case/{case.pk}/change/"
    admin_html = staff_page.get(response["Location"]).content.decode()
    assert "Recorded 1 disabled draft in suite &#x27;Recorded: order-cancellation&#x27; (a new suite)" in admin_html
    conversation_html = staff_page.get(f"/conversations/{three_topics.pk}/").content.decode()
    assert f'href="/admin/cases/case/{case.pk}/change/">Recorded from' in conversation_html


def test_it_extracts_and_leads_to_the_drafts_in_the_admin(staff_page, three_topics, scripted_model):
    scripted_model.play(segments_answer(("Status", 0, 1), ("Cancel", 2, 2), ("Delivered", 3, 3)))

    response = staff_page.post(
        f"/conversations/{three_topics.pk}/extract/", {"suite": "", "extraction_model": scripted_model.key}
    )

    ids = ",".join(str(pk) for pk in Case.objects.order_by("pk").values_list("pk", flat=True))
    assert response.status_code == 302 and response["Location"] == f"/admin/cases/case/?id__in={ids}"
    changelist = staff_page.get(response["Location"]).content.decode()
    assert all(name in changelist for name in ("Status", "Cancel", "Delivered"))
    assert "3 cases" in changelist or "3 results" in changelist


def test_it_shows_why_nothing_was_stored(staff_page, three_topics, scripted_model):
    chosen = Suite.objects.create(name="Chosen", agent=three_topics.agent)
    scripted_model.play(segments_answer(("Status", 0, 1), ("Cancel", 1, 3)))

    response = staff_page.post(
        f"/conversations/{three_topics.pk}/extract/", {"suite": chosen.pk, "extraction_model": scripted_model.key}
    )

    assert response.status_code == 400
    html = response.content.decode()
    assert "AI extraction failed: segments 0 and 1 overlap: they both cover turns 1–1" in html
    assert re.search(r'<option value="\d+" selected>Chosen', html), "the choices made are kept"
    assert not Case.objects.exists()


def test_it_requires_a_suite_choice_when_several_test_the_agent(staff_page, three_topics):
    Suite.objects.create(name="A", agent=three_topics.agent)
    Suite.objects.create(name="B", agent=three_topics.agent)

    html = staff_page.get(f"/conversations/{three_topics.pk}/").content.decode()
    assert '<select id="draft-suite" name="suite" required>' in html

    response = staff_page.post(f"/conversations/{three_topics.pk}/record/", {"suite": ""})
    assert response.status_code == 400
    assert "choose a suite: 2 suites test agent order-cancellation" in response.content.decode()


def test_it_lists_the_cases_made_from_the_conversation(staff_page, order_agents, agent_model, talk):
    agent_model.respond_with(answer_by_user_message(ORDER_ANSWERS))
    conversation = talk(order_agents["order-cancellation"], WHERE_IS_1042, CANCEL_1043)
    staff_page.post(f"/conversations/{conversation.pk}/record/")

    html = staff_page.get(f"/conversations/{conversation.pk}/").content.decode()

    assert "Cases made from this conversation" in html
    assert '<span class="badge">draft</span>' in html


def test_it_shares_the_apis_throttle_budget(staff_page, three_topics):
    rate = django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["recording"]
    for _ in range(int(rate.split("/")[0])):
        assert staff_page.post("/api/recordings/", {"conversation": 999999}).status_code == 400

    response = staff_page.post(f"/conversations/{three_topics.pk}/record/")

    assert response.status_code == 429
    assert "Too many recordings and extractions for now. Try again in" in response.content.decode()
    assert not Case.objects.exists()


def test_it_hides_sealed_test_conversations_unless_asked(staff_page, order_agents, agent_model, talk):
    from agenthost.services import conversation_start

    agent_model.play(*ROUTED_1042)
    chat = talk(order_agents["order-router"], WHERE_IS_1042, title="a customer chat")
    sealed = conversation_start(
        agent=order_agents["order-router"], title="[test] a case", seal="this conversation belongs to test run 7"
    )

    def titles(query: str = "") -> set[str]:
        page = staff_page.get(f"/conversations/{query}")
        assert page.status_code == 200
        return {title for title in (chat.title, sealed.title) if title in page.content.decode()}

    assert titles() == {"a customer chat"}
    assert titles("?sealed=1") == {"[test] a case"}
    assert titles("?sealed=all") == {"a customer chat", "[test] a case"}
    assert titles("?sealed=bogus") == {"a customer chat"}
    # Opened by its id, a sealed conversation still shows: it is hidden from lists, not from its reviewers.
    assert staff_page.get(f"/conversations/{sealed.pk}/").status_code == 200
