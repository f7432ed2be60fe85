"""The OpenAI Agents SDK through the official opentelemetry-instrumentation-openai-agents-v2 (GenAI semconv), run on
the local stub: a triage agent hands off to an orders agent, which calls a function tool."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from agents import Agent, AsyncOpenAI, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
from agents.tracing import get_trace_provider, set_trace_processors
from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

from agenthost.llm.scripted import Answer, Call
from tests.traces.dialects.spans import kept_only, records, transcript
from traces.dialects import conversations_from_spans


@function_tool
def find_order(order_id: str) -> str:
    """Find an order by its number."""
    return json.dumps({"order_id": order_id, "status": "shipped"})


ORDERS = Agent(name="orders", instructions="You look orders up.", tools=[find_order])
TRIAGE = Agent(name="triage", instructions="Send order questions to the orders agent.", handoffs=[ORDERS])


def shop_model(body: dict) -> Answer | str:
    """Triage hands off; the orders agent looks the order up, then answers with what the tool said."""
    tools = [tool["function"]["name"] for tool in body.get("tools") or []]
    last = body["messages"][-1]
    if "transfer_to_orders" in tools:
        return Answer(tool_calls=[Call("transfer_to_orders", {})])
    if last["role"] == "tool" and "status" in last["content"]:
        return f"Order 1042: {json.loads(last['content'])['status']}."
    return Answer(tool_calls=[Call("find_order", {"order_id": "1042"})])


@pytest.fixture
def instrumented(otel, exporter, model_server, monkeypatch) -> Iterator[Callable[[str], list]]:
    """Runs TRIAGE on the stub with the instrumentation on (content capture as `capture` says); the SDK's own
    processors (its OpenAI exporter) are put back afterwards."""
    model_server.respond_with(shop_model)
    original = list(get_trace_provider()._multi_processor._processors)
    instrumentor = OpenAIAgentsInstrumentor()

    def run(capture: str) -> list:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", capture)
        set_trace_processors([])
        instrumentor.instrument(tracer_provider=otel[0])
        try:
            model = OpenAIChatCompletionsModel(
                model="gpt-4o-mini", openai_client=AsyncOpenAI(base_url=model_server.base_url, api_key="unused")
            )
            Runner.run_sync(TRIAGE, "Where is order 1042?", run_config=RunConfig(model=model))
        finally:
            instrumentor.uninstrument()
        return records(exporter.get_finished_spans())

    yield run
    set_trace_processors(original)
    model_server.respond_with(None)


def test_it_maps_an_agents_sdk_run_with_a_handoff_and_a_tool(instrumented):
    spans = instrumented("true")

    [conversation] = conversations_from_spans(spans)

    assert conversations_from_spans(kept_only(spans)) == [conversation]
    assert conversation.dialect == "genai"
    assert conversation.key == spans[0].trace_id  # no conversation id: the trace is the conversation
    assert conversation.agent_name == "triage"
    assert conversation.system_instruction == "Send order questions to the orders agent."
    assert transcript(conversation) == [
        ("user", "Where is order 1042?", None, ""),
        ("assistant", "", None, "triage"),
        ("tool_call", "transfer_to_orders", {}, "triage"),
        ("tool_result", '{"assistant": "orders"}', None, "triage"),
        ("assistant", "", None, "orders"),
        ("tool_call", "find_order", {"order_id": "1042"}, "orders"),
        ("tool_result", '{"order_id": "1042", "status": "shipped"}', None, "orders"),
        ("assistant", "Order 1042: shipped.", None, "orders"),
    ]
    # the handoff was answered by the SDK itself (its result went back to the model), not by the provider
    assert not any(m.provider_executed for m in conversation.messages)
    answers = [m for m in conversation.messages if m.role == "assistant"]
    chats = [s for s in sorted(spans, key=lambda s: s.start_ns) if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert [(a.span_id, a.input_tokens, a.output_tokens) for a in answers] == [
        (s.span_id, s.attributes["gen_ai.usage.input_tokens"], s.attributes["gen_ai.usage.output_tokens"])
        for s in chats
    ]
    assert {a.model for a in answers} == {"openai:gpt-4o-mini"}
    [execution] = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert "gen_ai.tool.call.id" not in execution.attributes  # this exporter records none: paired by name and order
    [result] = [m for m in conversation.messages if m.role == "tool_result" and "status" in m.content]
    assert result.span_id == execution.span_id


def test_it_names_the_capture_setting_when_the_agents_sdk_instrumentation_records_no_content(instrumented):
    [conversation] = conversations_from_spans(instrumented("false"))

    assert conversation.messages == ()
    assert conversation.agent_name == "triage"
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true" in conversation.content_missing
