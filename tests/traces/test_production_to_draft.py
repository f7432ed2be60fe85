"""Issue 23's done-when, end to end: a team's pydantic-ai agent and its OpenAI Agents SDK agent serve a customer in
production (on the local OpenAI-compatible stub), their own OpenTelemetry instrumentation exporting over HTTP to a live
agenttest with an API token, as OTEL_EXPORTER_OTLP_* configure it. The conversations appear, record into drafts whose
mocks are what the tools really returned, and the drafts replay green with no key and no network — the tools wrote
their marker in production only."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from agents import AsyncOpenAI, OpenAIChatCompletionsModel, RunConfig, Runner
from agents.tracing import get_trace_provider, set_trace_processors
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from rest_framework.authtoken.models import Token

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Conversation
from agenthost.runtimes.entry import load_entry
from cases.services import case_enable
from recording.services import recording_create
from runs.models import CaseResult, Recording, Run
from runs.services import run_create, run_execute
from tests.runs.test_key_free import OutboundGuard
from tests.runtimes.conftest import markers
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "Where is order 1042? Email me."
EMAIL = {"to": "ana@example.com", "body": "Your order has shipped."}

# The team's pydantic-ai service: its instrumentation on (content is captured by default), spans to OTLP/HTTP.
PYDANTIC_AI_SERVICE = '''
import os
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings

MARKERS = Path(os.environ["SHOP_MARKERS"])
TRACING = TracerProvider(resource=Resource.create({"service.name": "shop-service"}))
TRACING.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_OTLP_ENDPOINT / _HEADERS

agent = Agent(
    "openai:gpt-4o-mini", name="shop", defer_model_check=True,
    instructions="You are the shop's assistant. Look orders up before answering.",
)
agent.instrument = InstrumentationSettings(tracer_provider=TRACING)


@agent.tool_plain
def find_order(order_id: str) -> dict:
    """Find an order by its number."""
    return {"order_id": order_id, "status": "shipped"}


@agent.tool_plain
def send_email(to: str, body: str) -> str:
    """Email the customer."""
    MARKERS.mkdir(parents=True, exist_ok=True)
    marker = MARKERS / f"pydantic-ai-email-{len(list(MARKERS.iterdir()))}"
    marker.write_text(f"{to}: {body}")
    return f"sent as {marker.name}"
'''

# The team's Agents SDK service: instrumented by opentelemetry-instrumentation-openai-agents-v2 (in the test).
AGENTS_SDK_SERVICE = '''
import os
from pathlib import Path

from agents import Agent, function_tool

MARKERS = Path(os.environ["SHOP_MARKERS"])


@function_tool
def find_order(order_id: str) -> dict:
    """Find an order by its number."""
    return {"order_id": order_id, "status": "shipped"}


@function_tool
def send_email(to: str, body: str) -> str:
    """Email the customer."""
    MARKERS.mkdir(parents=True, exist_ok=True)
    marker = MARKERS / f"agents-sdk-email-{len(list(MARKERS.iterdir()))}"
    marker.write_text(f"{to}: {body}")
    return f"sent as {marker.name}"


orders = Agent(name="orders", instructions="You look orders up and email customers.", tools=[find_order, send_email])
'''


def production_model(body: dict) -> Answer | str:
    """The stub standing in for OpenAI in production: look the order up, email, then say so."""
    last = body["messages"][-1]
    if last["role"] == "tool" and "status" in last["content"]:
        return Answer(tool_calls=[Call("send_email", EMAIL)])
    if last["role"] == "tool":
        return "Done: I emailed you."
    return Answer(tool_calls=[Call("find_order", {"order_id": "1042"})])


@pytest.fixture
def exporting(live_server, django_user_model, monkeypatch) -> None:
    """The environment a team's service runs with: agenttest's address and an API token of a staff user."""
    token = Token.objects.create(user=django_user_model.objects.create_user("exporter", is_staff=True)).key
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", live_server.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{token}")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")


@pytest.fixture
def no_sdk_tracing() -> Iterator[None]:
    """The Agents SDK's own trace processors (its exporter to OpenAI) off for the test, put back after."""
    original = list(get_trace_provider()._multi_processor._processors)
    set_trace_processors([])
    yield
    set_trace_processors(original)


def served_with_pydantic_ai(package: str, base_url: str) -> None:
    agent = load_entry(f"{package}.bot:agent")
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=base_url, api_key="unused"))
    agent.run_sync(QUESTION, model=model)
    sys.modules[f"{package}.bot"].TRACING.shutdown()  # flushes the batch; the service is done


def served_with_the_agents_sdk(package: str, base_url: str) -> None:
    orders = load_entry(f"{package}.bot:orders")
    tracing = TracerProvider(resource=Resource.create({"service.name": "orders-service"}))
    tracing.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=tracing)
    try:
        model = OpenAIChatCompletionsModel(
            model="gpt-4o-mini", openai_client=AsyncOpenAI(base_url=base_url, api_key="unused")
        )
        Runner.run_sync(orders, QUESTION, run_config=RunConfig(model=model))
    finally:
        instrumentor.uninstrument()
        tracing.shutdown()


def chat_spans(service: str) -> list[TraceSpan]:
    return [
        span
        for span in TraceSpan.objects.filter(service_name=service)
        if span.attributes.get("gen_ai.operation.name") == "chat"
    ]


@pytest.mark.parametrize(
    ("framework", "source", "entry", "service", "agent_name"),
    [
        ("pydantic-ai", PYDANTIC_AI_SERVICE, "agent", "shop-service", "shop"),
        ("openai-agents", AGENTS_SDK_SERVICE, "orders", "orders-service", "orders"),
    ],
)
def test_it_turns_a_production_conversation_into_a_draft_that_replays_green_with_no_key(
    framework,
    source,
    entry,
    service,
    agent_name,
    exporting,
    no_sdk_tracing,
    team_repo,
    openai_stub,
    tmp_path,
    monkeypatch,
):
    package = team_repo(source)
    agent = Agent.objects.create(
        name=agent_name, runtime=framework, entry=f"{package}.bot:{entry}", provider="openai", model="gpt-4o-mini"
    )
    openai_stub.respond_with(production_model)

    (served_with_pydantic_ai if framework == "pydantic-ai" else served_with_the_agents_sdk)(
        package, openai_stub.base_url
    )

    [marker] = markers(tmp_path)
    assert marker.read_text() == "ana@example.com: Your order has shipped."
    [conversation] = Conversation.objects.filter(source=Conversation.Source.TRACE)
    assert (conversation.agent, conversation.trace_service, conversation.bound_by) == (agent, service, "agent name")
    results = [m.content for m in conversation.messages.order_by("seq") if m.role == "tool_result"]
    # What the tools returned, as each framework gave it to the model (the Agents SDK writes a dict as Python would).
    assert "1042" in results[0] and "shipped" in results[0]
    assert results[1] == f"sent as {marker.name}"

    [draft] = recording_create(conversation=conversation).cases

    assert [(mock.function_name, mock.result) for mock in draft.mocks.order_by("pk")] == [
        ("find_order", results[0]),
        ("send_email", f"sent as {marker.name}"),
    ]
    [recording] = Recording.objects.filter(case=draft)
    chats = chat_spans(service)
    assert (recording.model, len(recording.entries)) == ("openai:gpt-4o-mini", len(chats)) == ("openai:gpt-4o-mini", 3)
    assert f"bound to agent {agent_name}" in draft.description

    # CI: replay mode, the endpoint gone, no key, nothing may leave the machine.
    openai_stub.stop()
    monkeypatch.setenv("OPENAI_API_KEY", "")
    guard = OutboundGuard(monkeypatch)
    case_enable(case=draft)
    run = run_execute(run_id=run_create(suite=draft.suite, model_keys=[recording.model], mode=Run.Mode.REPLAY).pk)

    result = CaseResult.objects.get(run=run, case=draft)
    assert result.status == "passed", result.reason
    assert [(call["name"], call["outcome"]) for call in result.tool_calls] == [
        ("find_order", "mocked"),
        ("send_email", "mocked"),
    ]
    # Every model call of the trace was served once: the replay's tokens are the trace's.
    assert result.input_tokens == sum(span.attributes["gen_ai.usage.input_tokens"] for span in chats)
    assert guard.attempts == []
    assert markers(tmp_path) == [marker], "the tools wrote their marker in production only"
