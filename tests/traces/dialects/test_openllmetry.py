"""OpenLLMetry: its indexed layout (an exact copy of what its openai instrumentation and SDK decorators wrote, the
source named in the fixture) and the GenAI form its current releases emit (spans its instrumentation exported)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.traces.dialects.spans import kept_only, span, transcript
from traces.dialects import conversations_from_spans
from traces.spans import SpanRecord

FIXTURE = Path(__file__).parent / "fixtures" / "openllmetry_chat_tool_calls.json"
CURRENT = Path(__file__).parent / "fixtures" / "openllmetry_0_62_genai.json"
EXPECTED = [
    ("user", "Where is order 1042?", None, ""),
    ("assistant", "", None, "shop"),
    ("tool_call", "find_order", {"order_id": "1042"}, "shop"),
    ("tool_result", '{"order_id": "1042", "status": "shipped"}', None, "shop"),
    ("assistant", "Order 1042 has shipped.", None, "shop"),
]


def fixture_spans(path: Path) -> list[SpanRecord]:
    return [span(s["span_id"], parent=s.get("parent", ""), start=s["start"], name=s["name"], scope=s["scope"],
                 attributes=s["attributes"]) for s in json.loads(path.read_text())["spans"]]


def test_it_maps_openllmetrys_indexed_layout():
    spans = fixture_spans(FIXTURE)

    [conversation] = conversations_from_spans(spans)

    assert conversations_from_spans(kept_only(spans)) == [conversation]
    assert conversation.dialect == "openllmetry"
    assert conversation.agent_name == "shop"
    assert conversation.system_instruction == "Look orders up."
    assert transcript(conversation) == EXPECTED
    answers = [m for m in conversation.messages if m.role == "assistant"]
    assert [(a.model, a.input_tokens, a.output_tokens, a.span_id) for a in answers] == [
        ("openai:gpt-4o-mini", 61, 17, spans[1].span_id), ("openai:gpt-4o-mini", 98, 9, spans[3].span_id)
    ]
    [call] = [m for m in conversation.messages if m.role == "tool_call"]
    assert (call.tool_call_id, call.raw_arguments) == ("call_Wk1", '{"order_id":"1042"}')
    [result] = [m for m in conversation.messages if m.role == "tool_result"]
    assert (result.tool_call_id, result.span_id) == ("call_Wk1", spans[2].span_id)
    assert conversation.tools == ({"name": "find_order", "description": "Find an order by its number.", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},)


def test_it_names_traceloops_setting_when_openllmetry_traced_no_content():
    spans = [span(s["span_id"], parent=s.get("parent", ""), start=s["start"], name=s["name"], scope=s["scope"],
                  attributes={k: v for k, v in s["attributes"].items()
                              if not k.startswith(("gen_ai.prompt.", "gen_ai.completion.", "traceloop.entity.in",
                                                   "traceloop.entity.out", "llm.request.functions"))})
             for s in json.loads(FIXTURE.read_text())["spans"]]

    [conversation] = conversations_from_spans(spans)

    assert conversation.messages == ()
    assert "TRACELOOP_TRACE_CONTENT=true" in conversation.content_missing


def test_it_maps_the_current_openllmetry_output():
    spans = fixture_spans(CURRENT)
    [conversation] = conversations_from_spans(spans)

    assert conversations_from_spans(kept_only(spans)) == [conversation]

    assert conversation.dialect == "genai"
    assert conversation.system_instruction == "Look orders up."
    assert [entry[:3] for entry in transcript(conversation)] == [entry[:3] for entry in EXPECTED]
    assert [m.model for m in conversation.messages if m.role == "assistant"] == ["openai:gpt-4o-mini"] * 2
    assert [m.input_tokens for m in conversation.messages if m.role == "assistant"] == [79, 145]
    assert [t["name"] for t in conversation.tools] == ["find_order"]
