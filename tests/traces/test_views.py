"""The staff page of imported traces, and binding a conversation to an agent chosen by hand: a trace whose agent
agenttest does not know, or one bound to the wrong agent, from its conversation page."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenthost.models import Agent, Conversation
from recording.services import recording_create
from tests.traces.dialects.test_genai import VERSIONS, shop_agent
from tests.traces.test_conversations import FIND_ORDER
from tests.traces.test_receiver_conversations import send
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db(transaction=True)

BIND = "/traces/conversations/bind/"
LIST = "/traces/conversations/"


@pytest.fixture
def unknown_trace(client, staff_token) -> str:
    """One run of a pydantic-ai agent named "shop" of service "warehouse" — no agent agenttest knows — received."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "warehouse"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    shop_agent(provider, VERSIONS[-1]).run_sync("Where is order 1042?")
    send(client, staff_token, exporter.get_finished_spans())
    provider.shutdown()
    return TraceSpan.objects.values_list("conversation_key", flat=True).first()


def test_it_lists_an_unbound_trace_with_why_and_binds_it_to_the_agent_chosen(client, admin_user, unknown_trace):
    support = Agent.objects.create(name="support", provider="scripted", model="scripted", functions=[FIND_ORDER])
    client.force_login(admin_user)
    assert not Conversation.objects.exists()

    page = client.get(LIST).content.decode()
    assert f"<code>{unknown_trace}</code>" in page
    assert "bound to no agent: no agent is named &#x27;shop&#x27; (gen_ai.agent.name) or &#x27;warehouse&#x27;" in page
    assert f'<option value="{support.pk}">support</option>' in page

    bound = client.post(BIND, {"conversation": unknown_trace, "agent": str(support.pk)})

    conversation = Conversation.objects.get()
    assert bound.status_code == 302 and bound["Location"] == f"/conversations/{conversation.pk}/"
    assert (conversation.agent, conversation.bound_by, conversation.trace_agent) == (support, "chosen", "shop")
    assert "is bound to agent support" in client.get(bound["Location"]).content.decode()
    [draft] = recording_create(conversation=conversation).cases
    assert "bound to agent support by choice" in draft.description
    listed = client.get(LIST).content.decode()
    assert f"#{conversation.pk}</a>, bound to agent support by staff choice" in listed
    assert 'href="/admin/traces/ingesttoken/add/"' in listed, "where an exporter's token is made"


def test_it_binds_an_imported_conversation_again_from_its_page(client, admin_user, staff_token, unknown_trace):
    warehouse = Agent.objects.create(name="warehouse", provider="scripted", model="scripted")
    other = Agent.objects.create(name="other", provider="scripted", model="scripted")
    client.force_login(admin_user)
    client.post(BIND, {"conversation": unknown_trace, "agent": "warehouse"})  # by name too
    conversation = Conversation.objects.get()
    assert conversation.agent == warehouse

    page = client.get(f"/conversations/{conversation.pk}/").content.decode()
    assert f'<input type="hidden" name="conversation" value="{unknown_trace}">' in page
    assert f'<option value="{warehouse.pk}" selected>warehouse</option>' in page

    client.post(BIND, {"conversation": unknown_trace, "agent": str(other.pk)})
    conversation.refresh_from_db()
    assert (conversation.agent, conversation.bound_by) == (other, "chosen")
    assert Conversation.objects.count() == 1


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"conversation": "", "agent": "support"}, "conversation: must be the key of a conversation of stored spans"),
        ({"conversation": "no-such-key", "agent": "support"}, "conversation: no stored spans make a conversation"),
        ({"agent": "nobody"}, "conversation: must be the key"),
        ({"conversation": "KEY", "agent": "nobody"}, "agent: must be an agent&#x27;s id or name; no agent is"),
        ({"conversation": "KEY", "agent": ""}, "agent: choose an agent"),
        ({"conversation": "KEY", "agent": "support", "agnet": "2"}, "Unknown field &#x27;agnet&#x27;"),
    ],
)
def test_it_refuses_bad_input_naming_the_field_and_binds_nothing(client, admin_user, unknown_trace, data, named):
    Agent.objects.create(name="support", provider="scripted", model="scripted")
    client.force_login(admin_user)
    data = {key: value.replace("KEY", unknown_trace) for key, value in data.items()}

    refused = client.post(BIND, data)

    assert refused.status_code == 400
    assert named in refused.content.decode()
    assert not Conversation.objects.exists()


def test_it_shows_traces_and_binds_for_staff_only(client, member, unknown_trace):
    support = Agent.objects.create(name="support", provider="scripted", model="scripted")
    assert client.get(LIST)["Location"] == f"/accounts/login/?next={LIST}"
    client.force_login(member)

    refused = client.get(LIST)
    assert refused.status_code == 403
    # The app's page (its menu and styles), saying why, not Django's bare "403 Forbidden".
    assert "<h1>Staff only</h1>" in refused.content.decode() and "/static/" in refused.content.decode()
    assert unknown_trace not in refused.content.decode()
    assert client.post(BIND, {"conversation": unknown_trace, "agent": str(support.pk)}).status_code == 403
    assert not Conversation.objects.exists()


def test_it_links_the_traces_page_in_the_menu_for_staff_only(client, admin_user, member):
    link = '<a href="/traces/conversations/"'
    client.force_login(member)
    assert link not in client.get("/runs/").content.decode()

    client.force_login(admin_user)
    page = client.get("/runs/").content.decode()
    assert link in page
    assert f'{link} aria-current="page">Traces</a>' in client.get(LIST).content.decode()
