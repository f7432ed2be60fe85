"""The traces page staff work with (issue 35, item 8): each conversation with when it was received, its service, its
first user message, its model, its spans, its binding and its status; filtered by service, binding and status; a
bad filter is a 400 naming it; and a fixed number of queries however many conversations the page lists."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenthost.models import Agent, Conversation
from tests.traces.dialects.test_genai import VERSIONS, shop_agent
from tests.traces.test_conversations import FIND_ORDER
from tests.traces.test_cut_history import FIRST, SECOND
from tests.traces.test_receiver_conversations import send

pytestmark = pytest.mark.django_db

LIST = "/traces/conversations/"


def received(client, token: str, service: str, *questions: str) -> None:
    """A conversation of pydantic-ai's shop agent (model "orders-model") of `service`, one turn per question, posted
    to the receiver."""
    send(client, token, exported(service, *questions))


def exported(service: str, *questions: str) -> list:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = shop_agent(provider, VERSIONS[-1])
    history = None
    for question in questions:
        history = agent.run_sync(question, message_history=history).all_messages()
    provider.shutdown()
    return list(exporter.get_finished_spans())


def rows(page: str) -> list[str]:
    return page.split("<tbody>", 1)[1].split("</tbody>", 1)[0].split("</tr>")[:-1] if "<tbody>" in page else []


@pytest.fixture
def three(client, staff_token, admin_user):
    """Service storefront's conversation, imported (an agent is named as the service; none as the trace's agent,
    shop); warehouse's, which no agent is named for; and storefront's long one, whose second turn's history was
    cut."""
    Agent.objects.create(name="storefront", provider="scripted", model="scripted", functions=[FIND_ORDER])
    received(client, staff_token, "storefront", "Where is order 1042?")
    received(client, staff_token, "warehouse", "Is order 7 in stock?")
    received(client, staff_token, "storefront", FIRST, SECOND)
    client.force_login(admin_user)


def test_it_lists_each_conversations_time_service_question_model_spans_binding_and_status(client, three):
    page = client.get(LIST).content.decode()

    assert "<th scope=\"col\">First user message</th>" in page
    newest, warehouse, shop = rows(page)
    short = Conversation.objects.get(messages__content="Where is order 1042?")
    assert "Where is order 1042?" in shop and ">storefront</td>" in shop
    assert "<code>orders-model</code>" in shop
    assert f"#{short.pk}</a>, bound to agent storefront by its service&#x27;s name" in shop
    assert 'trace-status-imported">Imported' in shop
    assert '<time datetime="' in shop
    assert "Is order 7 in stock?" not in warehouse  # not imported: no message of it is stored to show
    assert 'trace-status-unimported">Not imported' in warehouse and "is bound to no agent" in warehouse
    assert 'name="agent"' in warehouse  # the form that binds it
    assert 'trace-status-incomplete">Incomplete' in newest
    assert FIRST[:60] in newest and FIRST[:1_000] not in newest  # the question's start, not 250 KB of it


@pytest.mark.parametrize(
    ("query", "listed"),
    [
        ("service=warehouse", ["warehouse"]),
        ("service=storefront", ["incomplete", "shop"]),
        ("binding=unbound", ["warehouse"]),
        ("binding=bound", ["incomplete", "shop"]),
        ("status=imported", ["shop"]),
        ("status=incomplete", ["incomplete"]),
        ("status=unimported", ["warehouse"]),
        ("service=storefront&status=unimported", []),
    ],
)
def test_it_filters_by_service_binding_and_status(client, three, query, listed):
    page = client.get(f"{LIST}?{query}").content.decode()

    found = []
    for row in rows(page):
        if "trace-status-incomplete" in row:
            found.append("incomplete")
        elif "Where is order 1042?" in row:
            found.append("shop")
        elif ">warehouse</td>" in row:
            found.append("warehouse")
    assert found == listed
    assert ("No conversation matches these filters" in page) == (not listed)
    # The form shows the filters chosen, each as its select's one selected option.
    chosen = [value for pair in query.split("&") for value in pair.partition("=")[2:]]
    assert re.findall(r'<option value="([^"]*)" selected>', page) == chosen


@pytest.mark.parametrize(("query", "named"), [("binding=maybe", "binding: must be one of bound, unbound"),
                                              ("status=done", "status: must be one of imported, incomplete")])
def test_it_refuses_an_unknown_filter_naming_it(client, three, query, named):
    refused = client.get(f"{LIST}?{query}")

    assert refused.status_code == 400
    assert named in refused.content.decode()


def test_it_lists_with_the_same_number_of_queries_however_many_conversations(client, staff_token, admin_user):
    Agent.objects.create(name="storefront", provider="scripted", model="scripted", functions=[FIND_ORDER])
    client.force_login(admin_user)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(LIST).status_code == 200
        return len(captured)

    received(client, staff_token, "storefront", "Where is order 1?")
    received(client, staff_token, "warehouse", "Where is order 2?")
    few = queries()
    for number in range(3, 9):
        received(client, staff_token, "storefront" if number % 2 else "warehouse", f"Where is order {number}?")
    many = queries()

    assert len(rows(client.get(LIST).content.decode())) == 8
    assert many == few, (few, many)
