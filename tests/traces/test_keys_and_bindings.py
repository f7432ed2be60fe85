"""Conversations keyed by service and conversation id, and bindings that hold (issue 35, findings 5 and 6): two
services using the same conversation id get a conversation each, each bound by its own trace; a conversation staff
bound to an agent stays bound to it when more of its spans arrive — whether their trace names another agent agenttest
knows or none at all (its later spans were dropped without notice)."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenthost.models import Agent, Conversation
from tests.traces.conftest import PROTOBUF, TRACES
from tests.traces.dialects.test_genai import VERSIONS, shop_agent
from tests.traces.test_conversations import FIND_ORDER
from tests.traces.test_receiver_conversations import exported, send, transcript  # noqa: F401 (exported: a fixture)
from traces.conversations import trace_conversation_bind
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db

CONVERSATION_ID = "support-4711"


def run_in(service: str, question: str) -> list:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    shop_agent(provider, VERSIONS[-1]).run_sync(question)
    provider.shutdown()
    return list(exporter.get_finished_spans())


def post_with_conversation_id(client, token: str, spans, conversation_id: str) -> None:
    """The spans as one request, every one naming `conversation_id` (as a service that keeps its own ids does)."""
    request = encode_spans(spans)
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                kept = [kv for kv in span.attributes if kv.key != "gen_ai.conversation.id"]
                del span.attributes[:]
                span.attributes.extend(kept)
                added = span.attributes.add()
                added.key = "gen_ai.conversation.id"
                added.value.string_value = conversation_id
    response = client.post(
        TRACES, request.SerializeToString(), content_type=PROTOBUF, HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 200, response.content


def test_it_keeps_two_services_with_the_same_conversation_id_apart(client, staff_token, admin_user):
    Agent.objects.create(name="shop", provider="scripted", model="scripted", functions=[FIND_ORDER])

    post_with_conversation_id(client, staff_token, run_in("shop-eu", "Where is order 1042?"), CONVERSATION_ID)
    post_with_conversation_id(client, staff_token, run_in("shop-us", "Where is order 7?"), CONVERSATION_ID)

    conversations = {c.trace_service: c for c in Conversation.objects.filter(trace_key=CONVERSATION_ID)}
    assert sorted(conversations) == ["shop-eu", "shop-us"]
    assert transcript(conversations["shop-eu"])[0] == ("user", "Where is order 1042?")
    assert transcript(conversations["shop-us"])[0] == ("user", "Where is order 7?")
    assert "Where is order 7?" not in [content for _, content in transcript(conversations["shop-eu"])]
    assert set(TraceSpan.objects.values_list("service_name", flat=True)) == {"shop-eu", "shop-us"}
    client.force_login(admin_user)
    listed = client.get("/traces/conversations/").content.decode()
    for service, conversation in conversations.items():
        assert f"#{conversation.pk}</a> of {service}, bound to agent shop by the agent its trace names" in listed


@pytest.mark.parametrize("trace_names", ["an agent agenttest knows", "no agent agenttest knows"])
def test_it_keeps_a_staff_binding_when_more_spans_arrive(client, staff_token, exported, trace_names):  # noqa: F811
    first_run, second_run = exported
    support = Agent.objects.create(name="support", provider="scripted", model="scripted", functions=[FIND_ORDER])
    if trace_names == "an agent agenttest knows":
        Agent.objects.create(name="shop", provider="scripted", model="scripted", functions=[FIND_ORDER])
    send(client, staff_token, first_run)
    key = TraceSpan.objects.values_list("conversation_key", flat=True).first()
    bound = trace_conversation_bind(key=key, agent="support")
    assert (bound.agent, bound.bound_by) == (support, "chosen")

    send(client, staff_token, second_run)

    [conversation] = Conversation.objects.all()
    assert (conversation.pk, conversation.agent, conversation.bound_by) == (bound.pk, support, "chosen")
    assert ("user", "And order 7?") in transcript(conversation), "the later spans are in it, not dropped"
