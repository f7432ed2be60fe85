"""OpenInference, from its own instrumentation: an app's agent loop on the openai SDK (openinference-instrumentation-
openai's LLM spans) with its agent and tool wrapped in OpenInference's AGENT and TOOL spans, two turns in two traces
joined by `session.id`, run on the local stub."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import openai
import pytest
from openinference.instrumentation import OITracer, TraceConfig, using_session
from openinference.instrumentation.openai import OpenAIInstrumentor

from agenthost.llm.scripted import Answer, Call
from tests.traces.dialects.spans import kept_only, records, transcript
from traces.dialects import conversations_from_spans

TOOLS = [{"type": "function", "function": {
    "name": "find_order", "description": "Find an order by its number.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]


def orders_model(body: dict) -> Answer | str:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return f"Order {json.loads(last['content'])['order_id']}: shipped."
    return Answer(tool_calls=[Call("find_order", {"order_id": last["content"].split()[-1].strip("?")})])


@pytest.fixture
def shop(otel, exporter, model_server) -> Iterator[Callable[..., list]]:
    """The app: `shop(config, *questions)` asks each question in a turn of its own, within one session, with the
    openai SDK instrumented under `config`; gives the spans."""
    model_server.respond_with(orders_model)
    client = openai.OpenAI(base_url=model_server.base_url, api_key="unused")
    instrumentor = OpenAIInstrumentor()

    def run(config: TraceConfig, *questions: str) -> list:
        tracer = OITracer(otel[0].get_tracer("shop"), config=config)

        @tracer.tool
        def find_order(order_id: str) -> dict:
            return {"order_id": order_id, "status": "shipped"}

        @tracer.agent(name="shop")
        def answer(history: list[dict], question: str) -> str:
            history.append({"role": "user", "content": question})
            while True:
                reply = client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "system", "content": "Look orders up."}, *history],
                    tools=TOOLS,
                ).choices[0].message
                history.append(reply.model_dump(exclude_none=True))
                if not reply.tool_calls:
                    return reply.content
                for call in reply.tool_calls:
                    result = find_order(**json.loads(call.function.arguments))
                    history.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})

        instrumentor.instrument(tracer_provider=otel[0], config=config)
        try:
            history: list[dict] = []
            with using_session("session-7"):
                for question in questions:
                    answer(history, question)
        finally:
            instrumentor.uninstrument()
        return records(exporter.get_finished_spans())

    yield run
    model_server.respond_with(None)


def test_it_maps_openinference_spans_of_a_two_turn_session(shop):
    spans = shop(TraceConfig(), "Where is order 1042?", "And order 7?")

    [conversation] = conversations_from_spans(spans)

    assert conversations_from_spans(kept_only(spans)) == [conversation]
    assert len({s.trace_id for s in spans}) == 2
    assert conversation.key == "session-7"
    assert conversation.dialect == "openinference"
    assert conversation.agent_name == "shop"
    assert conversation.system_instruction == "Look orders up."
    assert transcript(conversation) == [
        ("user", "Where is order 1042?", None, ""),
        ("assistant", "", None, "shop"),
        ("tool_call", "find_order", {"order_id": "1042"}, "shop"),
        ("tool_result", '{"order_id": "1042", "status": "shipped"}', None, "shop"),
        ("assistant", "Order 1042: shipped.", None, "shop"),
        ("user", "And order 7?", None, ""),
        ("assistant", "", None, "shop"),
        ("tool_call", "find_order", {"order_id": "7"}, "shop"),
        ("tool_result", '{"order_id": "7", "status": "shipped"}', None, "shop"),
        ("assistant", "Order 7: shipped.", None, "shop"),
    ]
    llm = sorted((s for s in spans if s.attributes.get("openinference.span.kind") == "LLM"), key=lambda s: s.start_ns)
    answers = [m for m in conversation.messages if m.role == "assistant"]
    assert [(a.span_id, a.input_tokens, a.output_tokens, a.model) for a in answers] == [
        (s.span_id, s.attributes["llm.token_count.prompt"], s.attributes["llm.token_count.completion"],
         "openai:gpt-4o-mini") for s in llm
    ]
    tools = {s.span_id for s in spans if s.attributes.get("openinference.span.kind") == "TOOL"}
    assert {m.span_id for m in conversation.messages if m.role == "tool_result"} == tools
    assert [t["name"] for t in conversation.tools] == ["find_order"]


def test_it_names_openinferences_settings_when_inputs_and_outputs_are_hidden(shop):
    [conversation] = conversations_from_spans(shop(TraceConfig(hide_inputs=True, hide_outputs=True), "Where is 1042?"))

    assert conversation.messages == ()
    assert "OPENINFERENCE_HIDE_INPUTS" in conversation.content_missing
    assert "OPENINFERENCE_HIDE_OUTPUTS" in conversation.content_missing
