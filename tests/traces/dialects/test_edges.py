"""The mapping on spans no exporter should send but some do: hidden content, provider-run tools, turns in separate
traces, orphans, duplicates, text that is not JSON, very long conversations and arbitrary attributes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.traces.dialects.spans import span, transcript
from traces.dialects import attribute_kept, conversations_from_spans, genai, openinference, openllmetry
from traces.spans import SpanEvent, SpanRecord


def text(role: str, content: str) -> dict:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def call(call_id: str, name: str, **arguments: str) -> dict:
    return {"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}]}


def result(call_id: str, content: str) -> dict:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "result": content}]}


def chat(span_id: str, inputs: list, outputs: list, *, start: int, parent: str = "", trace: str = "a",
         conversation: str = "", **attributes: object) -> SpanRecord:
    return span(span_id, parent=parent, trace=trace, start=start, name="chat gpt-4o", attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
        "gen_ai.input.messages": json.dumps(inputs), "gen_ai.output.messages": json.dumps(outputs),
        **({"gen_ai.conversation.id": conversation} if conversation else {}), **attributes,
    })


def agent(span_id: str, name: str, *, start: int, trace: str = "a", conversation: str = "") -> SpanRecord:
    return span(span_id, trace=trace, start=start, name=f"invoke_agent {name}", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
        **({"gen_ai.conversation.id": conversation} if conversation else {}),
    })


def execution(span_id: str, name: str, call_id: str, output: str, *, start: int, parent: str) -> SpanRecord:
    return span(span_id, parent=parent, start=start, name=f"execute_tool {name}", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.result": output,
    })


def test_it_keeps_exactly_the_attributes_the_mapping_reads():
    for name in ("gen_ai.input.messages", "gen_ai.prompt.3.content", "gen_ai.completion.0.tool_calls.1.arguments",
                 "llm.input_messages.0.message.role", "llm.output_messages.2.message.tool_calls.0.tool_call.id",
                 "llm.input_messages.0.message.contents.1.message_content.text", "input.value", "session.id",
                 "gen_ai.tool.call.result", "llm.request.functions.0.parameters", "traceloop.entity.input",
                 "llm.tools.4.tool.json_schema", "events"):
        assert attribute_kept(name), name
    for name in ("http.url", "gen_ai.prompt.x.content", "gen_ai.prompt.0.secret", "llm.input_messages.0.message",
                 "llm.input_messages.0.message.role.extra", "user.email", "gen_ai.input.messages.0", "db.statement",
                 "llm.token_count.total", "gen_ai.usage.total_tokens", "openai.api_key"):
        assert not attribute_kept(name), name


def test_it_names_the_genai_capture_setting_for_an_unknown_exporter_with_content_off():
    spans = [agent("1", "shop", start=1), span("2", parent="1", start=2, name="chat gpt-4o", scope="my.exporter",
                                               attributes={"gen_ai.operation.name": "chat"})]

    [conversation] = conversations_from_spans(spans)

    assert conversation.messages == () and conversation.agent_name == "shop"
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in conversation.content_missing


def test_it_names_the_tools_the_provider_ran_itself():
    question = text("user", "What is the weather in Oslo, and where is order 7?")
    searched = {"role": "assistant", "parts": [
        {"type": "server_tool_call", "id": "ws_1", "name": "web_search",
         "server_tool_call": {"type": "web_search", "query": "weather Oslo"}},
        {"type": "server_tool_call_response", "id": "ws_1",
         "server_tool_call_response": {"type": "web_search", "results": ["4°C, rain"]}},
        {"type": "tool_call", "id": "call_1", "name": "find_order", "arguments": {"order_id": "7"}},
        {"type": "tool_call", "id": "code_1", "name": "code_interpreter", "arguments": {"code": "1+1"}},
    ]}
    spans = [
        agent("1", "shop", start=1),
        chat("2", [question], [searched], parent="1", start=2),
        execution("3", "find_order", "call_1", "shipped", start=3, parent="1"),
        chat("4", [question, searched, result("call_1", "shipped")], [text("assistant", "Rain; shipped.")],
             parent="1", start=4),
    ]

    [conversation] = conversations_from_spans(spans)

    assert [(m.role, m.function_name or m.content, m.provider_executed) for m in conversation.messages] == [
        ("user", "What is the weather in Oslo, and where is order 7?", False),
        ("assistant", "", False),
        ("tool_call", "web_search", True),  # marked by the semconv's server_tool_call part
        ("tool_call", "find_order", False),
        ("tool_call", "code_interpreter", True),  # no span ran it, though one ran find_order, and no result went back
        ("tool_result", '{"type":"web_search","results":["4°C, rain"]}', True),
        ("tool_result", "shipped", False),
        ("assistant", "Rain; shipped.", False),
    ]


def test_it_joins_turns_in_separate_traces_by_conversation_id_whether_or_not_the_history_was_resent():
    first = [text("user", "Hi"), text("assistant", "Hello!")]
    spans = [
        # turn 3 started first in the list: spans arrive in any order
        chat("30", [text("user", "Order 7?")], [text("assistant", "Shipped.")], trace="c", start=30,
             conversation="conv-1"),
        agent("10", "shop", trace="a", start=10, conversation="conv-1"),
        chat("11", first[:1], first[1:], parent="10", trace="a", start=11),  # inherits the conversation id
        # turn 2 resends the history, trimmed of its first message
        chat("20", [first[1], text("user", "Thanks")], [text("assistant", "Welcome.")], trace="b", start=20,
             conversation="conv-1"),
        chat("99", [text("user", "unrelated")], [text("assistant", "other")], trace="d", start=40),
    ]

    conversations = conversations_from_spans(spans)

    assert [c.key for c in conversations] == ["conv-1", "d".rjust(32, "0")]
    assert conversations[0].trace_ids == tuple(t.rjust(32, "0") for t in "abc")
    assert [entry[:2] for entry in transcript(conversations[0])] == [
        ("user", "Hi"), ("assistant", "Hello!"), ("user", "Thanks"), ("assistant", "Welcome."),
        ("user", "Order 7?"), ("assistant", "Shipped."),
    ]
    assert transcript(conversations[0])[1][3] == "shop"


def test_it_maps_a_span_whose_parent_is_missing_and_ignores_duplicates_and_arrival_order():
    history = [text("user", "Where is order 7?"), call("c1", "find_order", order_id="7")]
    spans = [
        agent("1", "shop", start=1),
        chat("2", history[:1], history[1:], parent="1", start=2, **{"gen_ai.usage.input_tokens": 10}),
        execution("3", "find_order", "c1", "shipped", start=3, parent="1"),
        # its parent (an agent span of another process) never arrived; it names its own agent
        chat("4", [*history, result("c1", "shipped")], [text("assistant", "It shipped.")], parent="77", start=4,
             **{"gen_ai.agent.name": "orders"}),
    ]
    expected = [
        ("user", "Where is order 7?", None, ""), ("assistant", "", None, "shop"),
        ("tool_call", "find_order", {"order_id": "7"}, "shop"), ("tool_result", "shipped", None, "shop"),
        ("assistant", "It shipped.", None, "orders"),
    ]

    [in_order] = conversations_from_spans(spans)
    [shuffled] = conversations_from_spans([spans[3], spans[1], spans[3], spans[0], spans[2], spans[1]])

    assert transcript(in_order) == expected
    assert shuffled == in_order
    assert [m.input_tokens for m in in_order.messages if m.role == "assistant"] == [10, 0]


def test_it_keeps_the_text_of_messages_that_are_not_json():
    spans = [chat("1", [], [], start=1) for _ in range(1)]
    spans = [span("1", start=1, attributes={**spans[0].attributes, "gen_ai.input.messages": "Where is [order 7?",
                                            "gen_ai.output.messages": '{"role": "assistant", "parts": [{"ty'})]

    [conversation] = conversations_from_spans(spans)

    assert transcript(conversation) == [
        ("user", "Where is [order 7?", None, ""), ("assistant", '{"role": "assistant", "parts": [{"ty', None, ""),
    ]


@pytest.mark.timeout(20)
def test_it_maps_a_conversation_of_ten_thousand_messages_in_one_pass():
    history = [text("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(9_999)]
    one_trace = [
        chat("1", history[:-1], history[-1:], start=1, conversation="long"),
        chat("2", history, [text("assistant", "the end")], start=2, conversation="long"),
    ]
    # 2,000 turns, each a trace of its own that does not resend the history
    many_traces = [
        chat(f"{turn:x}", [text("user", f"q{turn}"), text("assistant", f"a{turn}"), text("user", f"again {turn}")],
             [text("assistant", f"done {turn}"), text("assistant", "!")], trace=f"{turn:x}", start=turn,
             conversation="many")
        for turn in range(1, 2_001)
    ]

    for spans, check in ((one_trace, "the end"), (many_traces, "!")):
        # A quadratic dedupe or stitch takes minutes here, past the timeout; bench/traces_ingest.py prints the time.
        [conversation] = conversations_from_spans(spans)

        assert len(conversation.messages) == 10_000 and conversation.messages[-1].content == check


_KNOWN_KEYS = sorted(genai.KEPT_NAMES | openinference.KEPT_NAMES | openllmetry.KEPT_NAMES) + [
    "gen_ai.prompt.0.role", "gen_ai.prompt.1.content", "gen_ai.prompt.1.tool_calls.0.arguments",
    "gen_ai.completion.0.tool_calls.0.name", "llm.input_messages.0.message.role",
    "llm.input_messages.0.message.tool_calls.0.tool_call.function.arguments", "llm.output_messages.0.message.content",
    "llm.input_messages.1.message.contents.0.message_content.text", "llm.tools.0.tool.json_schema",
    "llm.request.functions.0.parameters",
]
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["role", "parts", "type", "content", "id", "name", "arguments", "result", "tool_calls",
                         "function", "message", "event.name", "kwargs", "args"]) | st.text(max_size=8),
        children, max_size=5),
    max_leaves=10,
)
_values = _json | _json.map(lambda v: json.dumps(v)) | st.sampled_from(
    ["chat", "execute_tool", "invoke_agent", "LLM", "TOOL", "AGENT", "tool", "agent", "assistant", "user",
     "{'content': None, 'tool_calls': [", "__REDACTED__", "[", "{}"])
_attributes = st.dictionaries(st.sampled_from(_KNOWN_KEYS) | st.text(max_size=12), _values, max_size=8)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(_attributes, st.lists(st.tuples(st.sampled_from(
    ["gen_ai.user.message", "gen_ai.choice", "gen_ai.tool.message", "other"]), _attributes), max_size=1)),
    min_size=1, max_size=4), st.sampled_from(["", "pydantic-ai", "openinference.instrumentation.openai"]))
def test_it_never_raises_on_arbitrary_attributes(raw, scope):
    spans = [
        span(f"{i + 1:x}", parent=f"{i:x}" if i else "", start=i % 3, scope=scope, attributes=attributes,
             events=tuple(SpanEvent(name=name, time_ns=0, attributes=event) for name, event in events))
        for i, (attributes, events) in enumerate(raw)
    ]
    for record in spans:  # each dialect reads every span strictly: no safety net here
        for module in (genai, openinference, openllmetry):
            step = module.read(record)
            assert isinstance(step.has_content(), bool) and isinstance(step.system, list)
    for conversation in conversations_from_spans(spans):
        assert all(isinstance(m.content, str) for m in conversation.messages)
