"""A sealed conversation refuses every send and invocation that does not present its seal key — in the service, the
API and the chat page — and sealed conversations stay out of the lists unless asked for."""

from __future__ import annotations

import hashlib

import httpx
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Conversation, Message
from agenthost.services import conversation_invoke_function, conversation_send, conversation_start
from agenthost.turns import ConversationSealed
from tests.order_tools import TRACK_ORDER
from tests.properties import SUPPRESSED_WITH_FIXTURES

pytestmark = pytest.mark.django_db

EMAIL = "util-email-handle_email_sender"
REASON = "this conversation belongs to test run 12"


@pytest.fixture
def agent(scripted_model):
    return Agent.objects.create(
        name="mailer",
        instruction="You send email.",
        provider=scripted_model.provider_name,
        model=scripted_model.model,
        functions=[{"name": EMAIL}, {"name": TRACK_ORDER}],
    )


def _untouched(conversation: Conversation) -> tuple:
    row = Conversation.objects.get(pk=conversation.pk)
    return (row.message_count, row.turn_count, row.turn_claimed_until, Message.objects.filter(conversation=row).count())


def test_it_seals_a_conversation_with_a_key_only_its_creator_holds(agent):
    conversation = conversation_start(agent=agent, seal=REASON)

    key = conversation.seal_key
    assert isinstance(key, str) and len(key) >= 43
    stored = Conversation.objects.get(pk=conversation.pk)
    assert stored.sealed and stored.sealed_reason == REASON
    assert stored.seal_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in str(Conversation.objects.filter(pk=conversation.pk).values().get())
    assert not hasattr(conversation_start(agent=agent), "seal_key"), "an unsealed conversation has no key"


def test_it_refuses_a_send_without_the_seal_key_before_anything_runs(agent, scripted_model, mailoutbox):
    scripted_model.play(Answer(tool_calls=[Call(EMAIL, {"to": "a@example.com", "subject": "s", "body": "b"})]), "ok")
    conversation = conversation_start(agent=agent, seal=REASON)
    before = _untouched(conversation)

    for offered in ("", "wrong-key", conversation.seal_key[:-1]):
        with pytest.raises(ConversationSealed, match=f"^{REASON}; it cannot be continued$") as raised:
            conversation_send(conversation=conversation, text="send it", seal_key=offered)
        assert raised.value.code == "sealed"

    assert _untouched(conversation) == before
    assert scripted_model.requests == [] and mailoutbox == []


def test_it_reads_the_seal_from_the_database_not_from_the_callers_instance(agent, scripted_model):
    conversation = conversation_start(agent=agent, seal=REASON)
    forged = Conversation.objects.get(pk=conversation.pk)
    forged.seal_hash = forged.sealed_reason = ""

    with pytest.raises(ConversationSealed):
        conversation_send(conversation=forged, text="hi")
    assert scripted_model.requests == []


def test_it_runs_turns_and_invocations_for_the_holder_of_the_key(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1041"})]), "Shipped.")
    conversation = conversation_start(agent=agent, seal=REASON)

    result = conversation_send(conversation=conversation, text="Where is 1041?", seal_key=conversation.seal_key)
    invoked = conversation_invoke_function(
        conversation=conversation, name=TRACK_ORDER, arguments={"order_id": "1042"}, seal_key=conversation.seal_key
    )

    assert result.output == "Shipped." and invoked.outcome == "executed"


def test_it_refuses_a_direct_invocation_without_the_seal_key(agent, mailoutbox):
    conversation = conversation_start(agent=agent, seal=REASON)
    before = _untouched(conversation)

    with pytest.raises(ConversationSealed, match=REASON):
        conversation_invoke_function(
            conversation=conversation, name=EMAIL, arguments={"to": "a@example.com", "subject": "s", "body": "b"}
        )

    assert mailoutbox == [] and _untouched(conversation) == before


@hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(offered=st.text(max_size=60))
def test_it_refuses_any_key_but_the_seal_key(agent, scripted_model, offered):
    conversation = conversation_start(agent=agent, seal=REASON)

    with pytest.raises(ConversationSealed):
        conversation_send(conversation=conversation, text="hi", seal_key=offered)
    assert scripted_model.requests == []


# --- Over HTTP ------------------------------------------------------------------------------------------------------


@pytest.fixture
def staff_http(live_server, admin_user):
    token = Token.objects.create(user=admin_user)
    with httpx.Client(base_url=live_server.url, headers={"Authorization": f"Token {token.key}"}, timeout=10) as client:
        yield client


@pytest.mark.django_db(transaction=True)
def test_it_answers_409_to_a_send_to_a_sealed_conversation_over_http(agent, scripted_model, staff_http, mailoutbox):
    scripted_model.play(Answer(tool_calls=[Call(EMAIL, {"to": "a@example.com", "subject": "s", "body": "b"})]), "ok")
    conversation = conversation_start(agent=agent, seal=REASON)
    before = _untouched(conversation)

    response = staff_http.post(f"/api/conversations/{conversation.pk}/messages/", json={"text": "send it"})

    assert response.status_code == 409, response.text
    assert response.json()["detail"] == f"{REASON}; it cannot be continued"
    assert response.json()["code"] == "sealed"
    assert _untouched(conversation) == before
    assert scripted_model.requests == [] and mailoutbox == []
    detail = staff_http.get(f"/api/conversations/{conversation.pk}/").json()
    assert (detail["sealed"], detail["sealed_reason"]) == (True, REASON)


@pytest.mark.django_db(transaction=True)
def test_it_hides_sealed_conversations_from_the_list_unless_asked_over_http(agent, staff_http):
    sealed = conversation_start(agent=agent, seal=REASON)
    open_one = conversation_start(agent=agent)

    def ids(query: str) -> list[int]:
        response = staff_http.get(f"/api/conversations/{query}")
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["results"]]

    assert ids("") == [open_one.pk]
    assert ids("?sealed=0") == [open_one.pk]
    assert ids("?sealed=1") == [sealed.pk]
    assert ids("?sealed=all") == [open_one.pk, sealed.pk]
    for bad in ("yes", "2", "true", "ALL"):
        refused = staff_http.get(f"/api/conversations/?sealed={bad}")
        assert refused.status_code == 400 and "sealed" in refused.json(), refused.text
    # A sealed conversation stays readable by id: only sending is refused.
    assert staff_http.get(f"/api/conversations/{sealed.pk}/messages/").status_code == 200


# --- The host's pages -----------------------------------------------------------------------------------------------


def test_it_shows_a_sealed_conversation_read_only_in_the_chat(client, admin_user, agent):
    client.force_login(admin_user)
    conversation = conversation_start(agent=agent, seal=REASON)

    html = client.get(f"/chat/?conversation={conversation.pk}").content.decode()

    assert f"Read-only: {REASON}; it cannot be continued." in html
    assert 'data-sealed="1"' in html
    assert 'data-sealed=""' in client.get(f"/chat/?conversation={conversation_start(agent=agent).pk}").content.decode()


@pytest.mark.parametrize("wanted", ["³", "٣", str(10**25), "-1", "1.0"])
def test_it_answers_an_id_that_cannot_exist_in_the_chat_with_a_404_not_a_500(client, admin_user, wanted):
    client.force_login(admin_user)

    response = client.get("/chat/", {"conversation": wanted})

    assert response.status_code == 404 and "does not exist" in response.content.decode()


def _host_list(client, user, query: dict[str, str]):
    client.force_login(user)
    return client.get("/conversations/", query)


def test_it_hides_sealed_conversations_from_the_hosts_conversation_list(client, admin_user, agent):
    conversation_start(agent=agent, seal=REASON, title="sealed one")
    conversation_start(agent=agent, title="open one")

    def titles(query):
        response = _host_list(client, admin_user, query)
        assert response.status_code == 200
        return [title for title in ("sealed one", "open one") if title in response.content.decode()]

    assert titles({}) == ["open one"]
    assert titles({"sealed": "1"}) == ["sealed one"]
    assert titles({"sealed": "all"}) == ["sealed one", "open one"]
    # An unreadable filter is ignored like an unreadable date: the list still answers and says which one it dropped.
    assert titles({"sealed": "maybe"}) == ["open one"]
    ignored = _host_list(client, admin_user, {"sealed": "maybe"}).content.decode()
    assert "The test conversations filter (sealed) must be one of 0, 1, all; it was ignored." in ignored


@pytest.mark.parametrize("agent_id", ["³", str(10**25)])
def test_it_ignores_an_agent_filter_that_is_no_id_in_the_hosts_list(client, admin_user, agent, agent_id):
    assert _host_list(client, admin_user, {"agent": agent_id}).status_code == 200
