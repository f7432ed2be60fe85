"""The GenAI semantic conventions, from pydantic-ai's own instrumentation (every data-format version it offers) and
from the event-based form its version 1 emitted."""

from __future__ import annotations

import json
import re
import typing
import warnings
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from tests.traces.dialects.spans import kept_only, records, span, transcript
from traces.dialects import conversations_from_spans
from traces.spans import SpanRecord

VERSIONS = typing.get_args(typing.get_type_hints(InstrumentationSettings.__init__)["version"])
FIXTURES = Path(__file__).parent / "fixtures"


def orders_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Looks the order the user names up, then answers with what the tool said."""
    last = messages[-1].parts[-1]
    if isinstance(last, ToolReturnPart):
        return ModelResponse(parts=[TextPart(f"Order {last.content['order_id']} has {last.content['status']}.")])
    assert isinstance(last, UserPromptPart)
    return ModelResponse(parts=[ToolCallPart("find_order", {"order_id": re.findall(r"\d+", last.content)[0]})])


def shop_agent(provider, version: int, include_content: bool = True) -> Agent:
    agent = Agent(FunctionModel(orders_model, model_name="orders-model"), name="shop",
                  instructions="Look orders up before answering.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # versions 2-4 are deprecated, and still emitted by teams that pinned them
        agent.instrument = InstrumentationSettings(tracer_provider=provider, version=version,
                                                   include_content=include_content)

    @agent.tool_plain
    def find_order(order_id: str) -> dict:
        """Find an order by its number."""
        return {"order_id": order_id, "status": "shipped"}

    return agent


EXPECTED = [
    ("user", "Where is order 1042?", None, ""),
    ("assistant", "", None, "shop"),
    ("tool_call", "find_order", {"order_id": "1042"}, "shop"),
    ("tool_result", '{"order_id":"1042","status":"shipped"}', None, "shop"),
    ("assistant", "Order 1042 has shipped.", None, "shop"),
    ("user", "And order 7?", None, ""),
    ("assistant", "", None, "shop"),
    ("tool_call", "find_order", {"order_id": "7"}, "shop"),
    ("tool_result", '{"order_id":"7","status":"shipped"}', None, "shop"),
    ("assistant", "Order 7 has shipped.", None, "shop"),
]


@pytest.mark.parametrize("version", VERSIONS)
def test_it_maps_a_two_turn_pydantic_ai_conversation_at_every_instrumentation_version(otel, exporter, version):
    agent = shop_agent(otel[0], version)
    first = agent.run_sync("Where is order 1042?")
    second = agent.run_sync("And order 7?", message_history=first.all_messages())
    spans = records(exporter.get_finished_spans())

    [conversation] = conversations_from_spans(spans)

    assert conversations_from_spans(kept_only(spans)) == [conversation]  # the store keeps all the mapping reads
    assert len({s.trace_id for s in spans}) == 2  # each run is a trace of its own; the conversation id joins them
    assert conversation.key == second.conversation_id == first.conversation_id
    assert conversation.trace_ids == tuple(dict.fromkeys(s.trace_id for s in sorted(spans, key=lambda s: s.start_ns)))
    assert conversation.dialect == "genai"
    assert conversation.agent_name == "shop"
    assert conversation.system_instruction == "Look orders up before answering."
    assert conversation.content_missing == ""
    assert transcript(conversation) == EXPECTED
    calls = [m for m in conversation.messages if m.role == "tool_call"]
    results = [m for m in conversation.messages if m.role == "tool_result"]
    assert [c.tool_call_id for c in calls] == [r.tool_call_id for r in results] and all(c.tool_call_id for c in calls)
    assert not any(m.provider_executed for m in conversation.messages)
    executions = {s.span_id for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"}
    assert {r.span_id for r in results} == executions  # each result links to the span that ran the tool
    answers = [m for m in conversation.messages if m.role == "assistant"]
    responses = [m for m in second.all_messages() if isinstance(m, ModelResponse)]
    assert [(a.input_tokens, a.output_tokens) for a in answers] == [
        (r.usage.input_tokens, r.usage.output_tokens) for r in responses
    ]
    assert all(a.input_tokens > 0 for a in answers)
    assert {a.model for a in answers} == {"function:orders-model"}
    assert conversation.tools == ({
        "name": "find_order", "description": "Find an order by its number.",
        "parameters": {"additionalProperties": False, "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"], "type": "object"},
    },)


def test_it_names_pydantic_ais_setting_when_content_capture_is_off(otel, exporter):
    shop_agent(otel[0], VERSIONS[-1], include_content=False).run_sync("Where is order 1042?")

    [conversation] = conversations_from_spans(records(exporter.get_finished_spans()))

    assert conversation.messages == ()
    assert conversation.system_instruction == ""
    assert conversation.agent_name == "shop"
    assert "InstrumentationSettings(include_content=True)" in conversation.content_missing


def fixture_spans(name: str) -> list[SpanRecord]:
    data = json.loads((FIXTURES / name).read_text())
    return [span(s["span_id"], parent=s.get("parent", ""), start=s["start"], name=s["name"], scope=s["scope"],
                 attributes=s["attributes"]) for s in data["spans"]]


def test_it_reads_the_event_based_form_of_pydantic_ai_instrumentation_version_1():
    spans = fixture_spans("pydantic_ai_v1_events.json")
    [conversation] = conversations_from_spans(spans)

    assert conversations_from_spans(kept_only(spans)) == [conversation]

    assert conversation.system_instruction == "Look orders up before answering."
    assert conversation.agent_name == "shop"
    assert transcript(conversation) == EXPECTED[:5]
    answers = [m for m in conversation.messages if m.role == "assistant"]
    assert [(a.model, a.input_tokens, a.output_tokens) for a in answers] == [
        ("openai:gpt-4o-mini", 54, 5), ("openai:gpt-4o-mini", 60, 11)
    ]
    assert [m.tool_call_id for m in conversation.messages if m.role.startswith("tool")] == ["call_1", "call_1"]
