"""What the receiver does with a request's spans beyond storing them: the conversations they make are written, and
brought up to date in place as more of their spans arrive — whatever order the exporter sends them in."""

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
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db

SERVICE = "shop-service"


@pytest.fixture
def exported():
    """Two runs of pydantic-ai's shop agent (one conversation, two traces), as its instrumentation ends its spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = shop_agent(provider, VERSIONS[-1])
    first = agent.run_sync("Where is order 1042?")
    first_run = list(exporter.get_finished_spans())
    agent.run_sync("And order 7?", message_history=first.all_messages())
    second_run = list(exporter.get_finished_spans())[len(first_run) :]
    provider.shutdown()
    return first_run, second_run


def send(client, token: str, spans, *, unnamed: bool = False) -> None:
    """The spans as one OTLP request; `unnamed`: without gen_ai.conversation.id, as exporters that name the
    conversation on the agent's span only send them."""
    request = encode_spans(spans)
    if unnamed:
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    kept = [kv for kv in span.attributes if kv.key != "gen_ai.conversation.id"]
                    del span.attributes[:]
                    span.attributes.extend(kept)
    response = client.post(
        TRACES, request.SerializeToString(), content_type=PROTOBUF, HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 200, response.content


def transcript(conversation: Conversation) -> list[tuple[str, str]]:
    return [
        (m.role, m.function_name if m.role == "tool_call" else m.content) for m in conversation.messages.order_by("seq")
    ]


def test_it_writes_the_conversation_as_its_spans_arrive_and_updates_it_in_place(client, staff_token, exported):
    shop = Agent.objects.create(name="shop", provider="scripted", model="scripted")
    first_run, second_run = exported
    # The invoke_agent span, which names the conversation, ends last: its children come first, keyed by their trace.
    *children, invoke = first_run
    assert invoke.name.startswith("invoke_agent")

    send(client, staff_token, children, unnamed=True)
    [early] = Conversation.objects.all()
    assert (early.agent, early.bound_by, early.trace_key) == (
        shop,
        "agent name",
        f"{children[0].context.trace_id:032x}",
    )
    assert transcript(early)[-1] == ("assistant", "Order 1042 has shipped.")

    send(client, staff_token, [invoke])
    [named] = Conversation.objects.all()
    assert named.pk == early.pk, "the conversation takes its id as its key, not a second copy"
    assert named.trace_key == TraceSpan.objects.get(span_id=f"{invoke.context.span_id:016x}").conversation_key
    assert named.trace_key != early.trace_key

    send(client, staff_token, second_run)
    [grown] = Conversation.objects.all()
    assert grown.pk == early.pk
    assert transcript(grown) == [
        ("user", "Where is order 1042?"),
        ("assistant", ""),
        ("tool_call", "find_order"),
        ("tool_result", '{"order_id":"1042","status":"shipped"}'),
        ("assistant", "Order 1042 has shipped."),
        ("user", "And order 7?"),
        ("assistant", ""),
        ("tool_call", "find_order"),
        ("tool_result", '{"order_id":"7","status":"shipped"}'),
        ("assistant", "Order 7 has shipped."),
    ]
    message_ids = list(grown.messages.values_list("pk", flat=True))

    send(client, staff_token, [*first_run, *second_run])  # an exporter's retry: nothing changes
    [again] = Conversation.objects.all()
    assert again.pk == early.pk and list(again.messages.values_list("pk", flat=True)) == message_ids


def test_it_keeps_the_spans_of_a_conversation_no_agent_is_named_for_until_one_is(client, staff_token, exported):
    first_run, _ = exported

    send(client, staff_token, first_run)

    assert TraceSpan.objects.count() == len(first_run)
    assert not Conversation.objects.exists()
    Agent.objects.create(name=SERVICE, provider="scripted", model="scripted")
    send(client, staff_token, first_run)
    [conversation] = Conversation.objects.all()
    assert (conversation.agent.name, conversation.bound_by) == (SERVICE, "service name")


def test_it_writes_or_queues_at_most_the_configured_number_of_conversations_per_request(
    client, staff_token, exported, settings
):
    Agent.objects.create(name="shop", provider="scripted", model="scripted")
    settings.AGENTTEST_TRACES_CONVERSATIONS_PER_REQUEST = 0
    settings.AGENTTEST_TRACES_CONVERSATIONS_QUEUED_PER_REQUEST = 0

    send(client, staff_token, exported[0])

    assert TraceSpan.objects.count() == len(exported[0]) and not Conversation.objects.exists()
