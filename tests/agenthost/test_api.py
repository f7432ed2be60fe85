"""The host's REST API: authentication, who may do what, validation, turns on the scripted model."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from agenthost.llm.scripted import Answer, Call, Fail
from agenthost.models import Agent, Conversation, Message
from agenthost.services import conversation_start
from tests.agenthost.conftest import CANCELLATION, EMAIL, LOOKUP, ROUTER
from tests.order_tools import TRACK_ORDER, VOID_ORDER

pytestmark = pytest.mark.django_db

ROUTES = [
    ("get", "/api/agents/"),
    ("post", "/api/agents/"),
    ("get", "/api/agents/1/"),
    ("patch", "/api/agents/1/"),
    ("get", "/api/conversations/"),
    ("post", "/api/conversations/"),
    ("get", "/api/conversations/1/"),
    ("get", "/api/conversations/1/messages/"),
    ("post", "/api/conversations/1/messages/"),
    ("get", "/api/conversations/1/state/"),
    ("get", "/api/schema/"),
]


def _agent_payload(**overrides):
    payload = {
        "name": "billing",
        "description": "Answers billing questions.",
        "instruction": "You help {{ customer_email|default:'a customer' }} with invoices.",
        "provider": "scripted",
        "model": "scripted",
        "temperature": 0.2,
        "functions": [
            {"name": TRACK_ORDER},
            {
                "name": "invoice_total",
                "description": "The invoice total.",
                "parameters": {"type": "object", "properties": {"invoice": {"type": "string"}}},
                "output": "42 EUR",
            },
        ],
    }
    return {**payload, **overrides}


@pytest.fixture
def scripted_agent(scripted_model):
    return Agent.objects.create(
        name="scripted-support",
        instruction="You help with orders.",
        provider=scripted_model.provider_name,
        model=scripted_model.model,
        functions=[{"name": TRACK_ORDER}],
    )


# --- Authentication and permissions -------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "url"), ROUTES)
def test_it_refuses_anonymous_requests_on_every_route(api_client, order_agents, method, url):
    response = getattr(api_client, method)(url, data={}, format="json")
    assert response.status_code in (401, 403)


def test_it_lets_only_staff_create_agents(member_client, admin_client_api, scripted_model):
    refused = member_client.post("/api/agents/", _agent_payload(), format="json")
    assert refused.status_code == 403
    assert not Agent.objects.filter(name="billing").exists()

    created = admin_client_api.post("/api/agents/", _agent_payload(sub_agents=[]), format="json")
    assert created.status_code == 201, created.data
    assert created.data["model_key"] == "scripted:scripted"
    assert created.data["functions"][1]["output"] == "42 EUR"
    listed = member_client.get("/api/agents/").data
    assert [agent["name"] for agent in listed["results"]] == ["billing"]


def test_it_lets_only_staff_change_agents(member_client, admin_client_api, order_agents):
    lookup = order_agents[LOOKUP]
    refused = member_client.patch(f"/api/agents/{lookup.pk}/", {"temperature": 0.9}, format="json")
    assert refused.status_code == 403

    changed = admin_client_api.patch(f"/api/agents/{lookup.pk}/", {"temperature": 0.9}, format="json")
    assert changed.status_code == 200, changed.data
    lookup.refresh_from_db()
    assert lookup.temperature == 0.9
    assert lookup.functions == [{"name": TRACK_ORDER}], "a PATCH keeps the fields it does not send"


def test_it_shows_agents_with_their_model_key_and_sub_agent_names(member_client, order_agents):
    router = order_agents[ROUTER]
    listed = {agent["name"]: agent for agent in member_client.get("/api/agents/").data["results"]}
    assert listed["order-router"]["sub_agents"] == ["order-cancellation", "order-lookup"]
    assert listed["order-cancellation"]["functions"] == [
        {"name": TRACK_ORDER}, {"name": VOID_ORDER}, {"name": EMAIL}
    ]
    detail = member_client.get(f"/api/agents/{router.pk}/").data
    assert detail["model_key"] == "scripted:scripted"
    assert "{{ customer_email|default:'unknown' }}" in detail["instruction"]
    assert member_client.get("/api/agents/999999/").status_code == 404


# --- Agent validation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"name": "order-lookup"}, "name", "already exists"),
        ({"functions": {"name": TRACK_ORDER}}, "functions", "must be a list"),
        ({"functions": [{"description": "no name"}]}, "functions", "functions[0].name"),
        ({"functions": [{"name": "  "}]}, "functions", "functions[0].name"),
        ({"functions": [TRACK_ORDER]}, "functions", "functions[0]: must be an object"),
        (
            {"functions": [{"name": "x", "parameters": {"type": "object", "properties": {"a": {"type": "nope"}}}}]},
            "functions",
            "functions[0].parameters: not a valid JSON Schema",
        ),
        ({"functions": [{"name": "x", "parameters": {"type": "string"}}]}, "functions", "functions[0].parameters"),
        ({"functions": [{"name": "x"}, {"name": "x"}]}, "functions", "functions[1].name"),
        ({"model": "gpt-imaginary"}, "model", "scripted:gpt-imaginary"),
        ({"provider": "nowhere"}, "provider", "provider 'nowhere' is not configured"),
        ({"instruction": "Hello {% if customer %}"}, "instruction", "Django template"),
        ({"instruction": "Hello {{ customer|no_such_filter }}"}, "instruction", "no_such_filter"),
        ({"sub_agents": ["ghost"]}, "sub_agents", "ghost"),
        ({"rules": [{"trigger": "sometimes", "function": TRACK_ORDER}]}, "rules", "rules[0].trigger"),
        ({"temperature": 7}, "temperature", ""),
        ({"name": ""}, "name", ""),
        # Each of these was a 500: beyond what the database column holds, or text PostgreSQL cannot store.
        ({"max_steps": 2**31}, "max_steps", "from 1 to 1000"),
        (
            {"functions": [{"name": "x", "description": "a\x00b"}]},
            "functions",
            "functions[0].description: must not contain NUL",
        ),
        (
            {"rules": [{"trigger": "conversation_started", "function": TRACK_ORDER, "arguments": {"q": "\x00"}}]},
            "rules",
            "rules[0].arguments.q: must not contain NUL",
        ),
    ],
)
def test_it_names_the_field_of_each_agent_validation_error(admin_client_api, order_agents, overrides, field, fragment):
    response = admin_client_api.post("/api/agents/", _agent_payload(**overrides), format="json")
    assert response.status_code == 400
    assert field in response.data, response.data
    assert fragment in " ".join(str(message) for message in response.data[field])
    assert not Agent.objects.filter(name="billing").exists()


def test_it_refuses_a_lone_surrogate_in_functions_sent_as_json_text_in_a_form(admin_client_api):
    # A form field parsed as JSON may escape a lone surrogate, which no database can encode: a 500 before.
    payload = _agent_payload(functions='[{"name": "x", "description": "\\ud800"}]')

    response = admin_client_api.post("/api/agents/", payload)

    assert response.status_code == 400
    [problem] = response.data["functions"]
    assert problem.startswith("functions[0].description: must not contain NUL (\\u0000) or a lone surrogate")
    assert not Agent.objects.filter(name="billing").exists()


def test_it_validates_a_patch_against_the_agent_as_it_would_become(admin_client_api, order_agents):
    lookup = order_agents[LOOKUP]
    response = admin_client_api.patch(f"/api/agents/{lookup.pk}/", {"model": "nonexistent"}, format="json")
    assert response.status_code == 400
    assert "scripted:nonexistent" in str(response.data["model"])

    taken = admin_client_api.patch(f"/api/agents/{lookup.pk}/", {"name": "order-router"}, format="json")
    assert "already exists" in str(taken.data["name"])
    self_routing = admin_client_api.patch(f"/api/agents/{lookup.pk}/", {"sub_agents": ["order-lookup"]}, format="json")
    assert "own sub-agent" in str(self_routing.data["sub_agents"])

    renamed = admin_client_api.patch(f"/api/agents/{lookup.pk}/", {"name": "order-lookup"}, format="json")
    assert renamed.status_code == 200, "keeping its own name is not a clash"


# --- Conversations: ownership -----------------------------------------------------------------------------------


def test_it_starts_a_conversation_owned_by_the_caller(member_client, member, order_agents):
    response = member_client.post(
        "/api/conversations/",
        {
            "agent": "order-router",
            "tags": ["smoke"],
            "initial_state": {"customer_email": "ana@example.com"},
            "history": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
        },
        format="json",
    )
    assert response.status_code == 201, response.data
    conversation = Conversation.objects.get(pk=response.data["id"])
    assert conversation.owner == member
    assert response.data["agent"] == {"id": order_agents[ROUTER].pk, "name": "order-router"}
    assert response.data["state"] == {"customer_email": "ana@example.com"}
    assert response.data["tags"] == ["smoke"]
    by_id = member_client.post("/api/conversations/", {"agent": str(order_agents[LOOKUP].pk)}, format="json")
    assert by_id.data["agent"]["name"] == "order-lookup"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"agent": "nobody"}, "agent"),
        ({}, "agent"),
        ({"agent": "order-router", "initial_state": ["not", "an", "object"]}, "initial_state"),
        ({"agent": "order-router", "history": [{"role": "system", "content": "x"}]}, "history"),
        ({"agent": "order-router", "history": [{"role": "user", "content": ""}]}, "history"),
        ({"agent": "order-router", "tags": "demo"}, "tags"),
        # Each of these was a 500: a digit int() cannot read, and text PostgreSQL cannot store.
        ({"agent": "³"}, "agent"),
        ({"agent": "order-router", "initial_state": {"note": "a\x00b"}}, "initial_state"),
    ],
)
def test_it_names_the_field_of_a_bad_conversation_start(member_client, order_agents, payload, field):
    response = member_client.post("/api/conversations/", payload, format="json")
    assert response.status_code == 400
    assert field in response.data, response.data
    assert not Conversation.objects.exists()


def test_it_names_an_agent_filter_beyond_any_id_instead_of_failing(member_client, order_agents):
    # SQLite cannot bind an integer past 64 bits: this was a 500.
    response = member_client.get("/api/conversations/", {"agent": 2**63})

    assert response.status_code == 400
    assert "agent" in response.data


def test_it_hides_a_conversation_from_everyone_but_its_owner_and_staff(
    member, member_client, outsider_client, admin_client_api, order_agents
):
    conversation = conversation_start(agent=order_agents[ROUTER], owner=member)
    base = f"/api/conversations/{conversation.pk}"
    for response in (
        outsider_client.get(f"{base}/"),
        outsider_client.get(f"{base}/messages/"),
        outsider_client.get(f"{base}/state/"),
        outsider_client.post(f"{base}/messages/", {"text": "Cancel order 1043"}, format="json"),
    ):
        assert response.status_code == 404
    assert not conversation.messages.exists(), "the outsider's message was not run"
    assert outsider_client.get("/api/conversations/").data["count"] == 0

    assert member_client.get(f"{base}/").status_code == 200
    assert admin_client_api.get(f"{base}/").status_code == 200
    assert [c["id"] for c in admin_client_api.get("/api/conversations/").data["results"]] == [conversation.pk]


def test_it_filters_conversations_by_agent_tag_and_text(member, member_client, order_agents):
    router, lookup = order_agents[ROUTER], order_agents[LOOKUP]
    tagged = conversation_start(agent=router, owner=member, tags=["demo"], title="Refund question")
    other = conversation_start(agent=lookup, owner=member, tags=["demonstration"])

    def ids(query):
        return [c["id"] for c in member_client.get(f"/api/conversations/?{query}").data["results"]]

    assert ids("tag=demo") == [tagged.pk]
    assert ids(f"agent={lookup.pk}") == [other.pk]
    assert ids("search=refund") == [tagged.pk]
    assert member_client.get("/api/conversations/?agent=x").status_code == 400


# --- Turns ------------------------------------------------------------------------------------------------------


def test_it_runs_a_routed_turn_and_returns_what_happened(member, member_client, order_agents, scripted_model):
    scripted_model.play(
        Answer(tool_calls=[Call("route_to_agent", {"agent_name": LOOKUP})]),
        Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1042"})]),
        "Order 1042 was delivered.",
    )
    conversation = conversation_start(agent=order_agents[ROUTER], owner=member)
    response = member_client.post(
        f"/api/conversations/{conversation.pk}/messages/", {"text": "Where is my order #1042?"}, format="json"
    )
    assert response.status_code == 200, response.data
    turn = response.data
    assert turn["agent_chain"] == ["order-router", "order-lookup"]
    assert [call["name"] for call in turn["tool_calls"]] == ["route_to_agent", TRACK_ORDER]
    lookup = turn["tool_calls"][1]
    assert lookup["arguments"] == {"order_id": "1042"}
    assert lookup["outcome"] == "executed" and json.loads(lookup["result"])["status"] == "delivered"
    assert "1042" in turn["output"]
    assert turn["state"] == {"order_id": "1042", "order_status": "delivered"}
    assert turn["usage"]["total_tokens"] == turn["usage"]["input_tokens"] + turn["usage"]["output_tokens"] > 0
    assert turn["model_latency_ms"] >= 0 and turn["models"] == ["scripted:scripted"]

    messages = member_client.get(f"/api/conversations/{conversation.pk}/messages/").data["results"]
    assert [m["role"] for m in messages][:3] == ["user", "assistant", "tool_call"]
    assert messages[0]["content"] == "Where is my order #1042?"
    assert [m["seq"] for m in messages] == list(range(len(messages)))

    detail = member_client.get(f"/api/conversations/{conversation.pk}/").data
    assert detail["state"]["order_status"] == "delivered"
    assert detail["current_agent"]["name"] == "order-lookup"


def test_it_shows_the_state_after_any_message_and_its_timeline(member, member_client, order_agents, scripted_model):
    scripted_model.play(
        Answer(tool_calls=[Call("route_to_agent", {"agent_name": LOOKUP})]),
        Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1041"})]),
        "Order 1041 has shipped.",
    )
    conversation = conversation_start(
        agent=order_agents[ROUTER], owner=member, initial_state={"customer_email": "bo@example.com"}
    )
    member_client.post(f"/api/conversations/{conversation.pk}/messages/", {"text": "Where is order 1041?"})
    url = f"/api/conversations/{conversation.pk}/state/"
    now = member_client.get(url).data
    assert now["state"] == {"customer_email": "bo@example.com", "order_id": "1041", "order_status": "shipped"}
    lookup_result = Message.objects.get(conversation=conversation, role="tool_result", function_name=TRACK_ORDER)
    assert [(e["key"], e["message_seq"]) for e in now["timeline"]] == [
        ("customer_email", None), ("order_id", lookup_result.seq), ("order_status", lookup_result.seq)
    ]
    before = member_client.get(f"{url}?at={lookup_result.seq - 1}").data
    assert before["state"] == {"customer_email": "bo@example.com"} and before["at"] == lookup_result.seq - 1
    assert member_client.get(f"{url}?at={lookup_result.seq}").data["state"] == now["state"]
    bad = member_client.get(f"{url}?at=-3")
    assert bad.status_code == 400 and "at" in bad.data


def test_it_survives_a_malformed_tool_call_from_a_scripted_model(member, member_client, scripted_agent, scripted_model):
    scripted_model.play(
        Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1041"}), Call(TRACK_ORDER, '{"order_id": 10')]),
        Answer("Order 1041 has shipped; I could not read the second order number."),
    )
    conversation = conversation_start(agent=scripted_agent, owner=member)
    response = member_client.post(
        f"/api/conversations/{conversation.pk}/messages/", {"text": "Where are orders 1041 and 10?"}, format="json"
    )
    assert response.status_code == 200, response.data
    good, malformed = response.data["tool_calls"]
    assert (good["outcome"], good["arguments"]) == ("executed", {"order_id": "1041"})
    assert malformed["outcome"] == "invalid" and malformed["error"] is True
    assert malformed["arguments"] == '{"order_id": 10', "the raw text is shown when it is not JSON"
    assert "not valid JSON" in malformed["result"]
    assert response.data["output"].startswith("Order 1041 has shipped")
    assert response.data["state"]["order_id"] == "1041"
    assert "not valid JSON" in scripted_model.requests[1].messages[-1]["content"]


def test_it_answers_502_with_the_partial_turn_when_the_model_fails(
    member, member_client, scripted_agent, scripted_model
):
    scripted_model.play(
        Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1044"})]),
        Fail(code="rate_limited", message="too many requests"),
        Answer("Order 1044 has shipped."),
    )
    conversation = conversation_start(agent=scripted_agent, owner=member)
    url = f"/api/conversations/{conversation.pk}/messages/"
    failed = member_client.post(url, {"text": "Where is order 1044?"}, format="json")
    assert failed.status_code == 502
    assert "too many requests" in failed.data["detail"] and failed.data["code"] == "model_error"
    assert [call["name"] for call in failed.data["partial"]["tool_calls"]] == [TRACK_ORDER]
    assert failed.data["state"] == {"order_id": "1044", "order_status": "shipped"}

    retried = member_client.post(url, {"text": "Where is order 1044?"}, format="json")
    assert retried.status_code == 200 and retried.data["output"] == "Order 1044 has shipped."


def test_it_answers_422_with_the_partial_turn_at_the_step_limit(member, member_client, scripted_agent, scripted_model):
    scripted_agent.max_steps = 2
    scripted_agent.save()
    scripted_model.play(*[Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1041"})])] * 2)
    conversation = conversation_start(agent=scripted_agent, owner=member)
    response = member_client.post(f"/api/conversations/{conversation.pk}/messages/", {"text": "Loop"}, format="json")
    assert response.status_code == 422
    assert "2 model steps" in response.data["detail"] and response.data["code"] == "step_limit"
    assert response.data["partial"]["steps"] == 2 and len(response.data["partial"]["tool_calls"]) == 2


def test_it_answers_400_when_the_turn_cannot_start(member, member_client, scripted_model):
    broken = Agent.objects.create(
        name="broken", instruction="{% if %}", provider=scripted_model.provider_name, model=scripted_model.model
    )
    conversation = conversation_start(agent=broken, owner=member)
    url = f"/api/conversations/{conversation.pk}/messages/"
    response = member_client.post(url, {"text": "Hello"}, format="json")
    assert response.status_code == 400
    assert "not a valid template" in response.data["detail"] and response.data["code"] == "invalid_input"
    assert response.data["state"] == {} and "partial" in response.data

    blank = member_client.post(url, {"text": "   "}, format="json")
    assert blank.status_code == 400 and "text" in blank.data


# --- Session use from the browser -------------------------------------------------------------------------------


def test_it_needs_the_csrf_token_for_writes_with_a_browser_session(member, order_agents):
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(member)
    without = browser.post("/api/conversations/", {"agent": "order-router"}, format="json")
    assert without.status_code == 403 and "CSRF" in str(without.data["detail"])

    browser.get("/chat/")
    token = browser.cookies["csrftoken"].value
    with_token = browser.post(
        "/api/conversations/", {"agent": "order-router"}, format="json", headers={"X-CSRFToken": token}
    )
    assert with_token.status_code == 201


def test_it_documents_every_endpoint_in_the_schema(member_client):
    response = member_client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    paths = json.loads(response.content)["paths"]
    for path, methods in {
        "/api/agents/": {"get", "post"},
        "/api/agents/{agent_id}/": {"get", "patch"},
        "/api/conversations/": {"get", "post"},
        "/api/conversations/{conversation_id}/": {"get"},
        "/api/conversations/{conversation_id}/messages/": {"get", "post"},
        "/api/conversations/{conversation_id}/state/": {"get"},
    }.items():
        assert methods <= set(paths[path]), path
    assert "502" in paths["/api/conversations/{conversation_id}/messages/"]["post"]["responses"]


def test_it_serves_a_schema_that_validates_as_openapi(member_client):
    # The case document's schema is pydantic's JSON Schema 2020-12 (`type: "null"`), valid in OpenAPI 3.1 only: a
    # client generator given a 3.0 document with it refuses the whole schema.
    schema = json.loads(member_client.get("/api/schema/", {"format": "json"}).content)

    assert schema["openapi"] == "3.1.0"
    validate_schema(schema)


# --- Query counts -----------------------------------------------------------------------------------------------


def _query_count(client, url):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries), response.data


def test_it_lists_conversations_in_a_constant_number_of_queries(admin_user, admin_client_api, order_agents):
    router, lookup = order_agents[ROUTER], order_agents[LOOKUP]

    def add(count):
        for _ in range(count):
            conversation = conversation_start(agent=router, owner=admin_user, tags=["demo"])
            conversation.current_agent = lookup
            conversation.save()

    add(2)
    few, data = _query_count(admin_client_api, "/api/conversations/?tag=demo")
    assert data["count"] == 2
    add(8)
    many, data = _query_count(admin_client_api, "/api/conversations/?tag=demo")
    assert data["count"] == 10 and data["results"][0]["current_agent"]["name"] == "order-lookup"
    assert many == few


def test_it_lists_agents_and_messages_in_a_constant_number_of_queries(
    member, member_client, admin_client_api, order_agents, scripted_model
):
    few_agents, _ = _query_count(member_client, "/api/agents/")
    for index in range(6):
        response = admin_client_api.post(
            "/api/agents/", _agent_payload(name=f"agent-{index}", sub_agents=["order-lookup"]), format="json"
        )
        assert response.status_code == 201
    many_agents, data = _query_count(member_client, "/api/agents/")
    assert data["count"] == 9 and many_agents == few_agents

    # The second turn brings more agents and calls: the lookup hands the cancellation back to the router.
    scripted_model.play(
        Answer(tool_calls=[Call("route_to_agent", {"agent_name": LOOKUP})]),
        Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1041"})]),
        "Order 1041 has shipped.",
        Answer(tool_calls=[Call("util-routing-fallback_to_router", {"reason": "a cancellation"})]),
        Answer(tool_calls=[Call("route_to_agent", {"agent_name": CANCELLATION})]),
        Answer(tool_calls=[Call(VOID_ORDER, {"order_id": "1043"})]),
        "Order 1043 is now cancelled.",
    )
    conversation = conversation_start(agent=order_agents[ROUTER], owner=member)
    url = f"/api/conversations/{conversation.pk}/messages/"
    member_client.post(url, {"text": "Where is order 1041?"}, format="json")
    few_messages, data = _query_count(member_client, url)
    first_count = data["count"]
    member_client.post(url, {"text": "Please cancel order 1043"}, format="json")
    many_messages, data = _query_count(member_client, url)
    assert data["count"] > first_count and many_messages == few_messages


def test_it_answers_502_when_the_agents_model_is_no_longer_configured(member, member_client):
    # Saved before the provider was removed from the configuration: the API refuses to create such an agent.
    orphan = Agent.objects.create(name="orphan", instruction="Hi", provider="retired", model="old-model")
    conversation = conversation_start(agent=orphan, owner=member)
    response = member_client.post(f"/api/conversations/{conversation.pk}/messages/", {"text": "Hello"}, format="json")
    assert response.status_code == 502
    assert "retired" in response.data["detail"] and response.data["code"] == "model_error"
