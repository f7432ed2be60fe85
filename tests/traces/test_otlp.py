"""Decoding OTLP requests (traces/otlp.py): both encodings to the same spans, only kept attributes, redacted and
bounded; refusals as OTLP says (400 undecodable, 413 over a limit, 415 an encoding not taken)."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.traces.conftest import (
    CONTENT,
    JSON,
    NOT_KEPT,
    PROTOBUF,
    abyss_span,
    any_value,
    attributes,
    framed,
    framed_spans,
    kept,
    request,
    span,
    with_peak_memory,
)
from traces.otlp import MAX_VALUE_DEPTH, Limits, OtlpRefused, request_decode
from traces.spans import CUT, TRUNCATED, SpanEvent, SpanRecord

LIMITS = Limits(max_body_bytes=64 * 1024, max_spans=100, max_value_chars=1000)
TRACE = "5B8EFFF798038103D269B633813FC60C"
SPAN = "EEE19B7EC3C1B174"
PARENT = "EEE19B7EC3C1B173"


def decode(body: bytes, content_type: str = PROTOBUF, encoding: str = "", limits: Limits = LIMITS):
    return request_decode(body=body, content_type=content_type, content_encoding=encoding, kept=kept, limits=limits)


def refusal(body: bytes, content_type: str = PROTOBUF, encoding: str = "", limits: Limits = LIMITS) -> OtlpRefused:
    with pytest.raises(OtlpRefused) as caught:
        decode(body, content_type, encoding, limits)
    return caught.value


def test_it_reads_otlp_json_as_the_specification_writes_it_into_the_same_spans_as_protobuf():
    # The specification's example shape: hex ids (any case), integer enums, 64-bit integers as strings,
    # lowerCamelCase keys, unknown fields ignored. The same request in protobuf decodes to equal records.
    document = {
        "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "shop"}},
                                        {"key": "session.id", "value": {"stringValue": "resource-level"}}]},
            "scopeSpans": [{
                "scope": {"name": "pydantic-ai", "version": "1.0"},
                "spans": [{
                    "traceId": TRACE, "spanId": SPAN.lower(), "parentSpanId": PARENT, "name": "chat gpt-4o",
                    "kind": 3, "startTimeUnixNano": "1544712660000000000", "endTimeUnixNano": 1544712661000000000,
                    "attributes": [
                        {"key": "gen_ai.conversation.id", "value": {"stringValue": "conv-7"}},
                        {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
                        {"key": "gen_ai.request.temperature", "value": {"doubleValue": 0.5}},
                        {"key": "gen_ai.tool.definitions", "value": {"arrayValue": {"values": [
                            {"kvlistValue": {"values": [{"key": "name", "value": {"stringValue": "lookup"}}]}}]}}},
                        {"key": NOT_KEPT, "value": {"stringValue": "Bearer abc"}},
                    ],
                    "events": [{"timeUnixNano": "1544712660500000000", "name": "gen_ai.choice",
                                "attributes": [{"key": "gen_ai.output.messages", "value": {"stringValue": "Hi"}}]},
                               {"timeUnixNano": "1544712660600000000", "name": "http.retry"}],
                    "status": {"code": 2, "message": "timeout"},
                    "droppedAttributesCount": 0, "aFieldOfTomorrow": {"x": 1},
                }],
            }],
        }],
    }
    expected_span = Span(
        trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex(SPAN), parent_span_id=bytes.fromhex(PARENT),
        name="chat gpt-4o", kind=3, start_time_unix_nano=1544712660000000000,
        end_time_unix_nano=1544712661000000000, status=Status(code=2, message="timeout"),
        attributes=attributes({"gen_ai.conversation.id": "conv-7", "gen_ai.usage.input_tokens": 12,
                               "gen_ai.request.temperature": 0.5,
                               "gen_ai.tool.definitions": [{"name": "lookup"}], NOT_KEPT: "Bearer abc"}),
        events=[Span.Event(time_unix_nano=1544712660500000000, name="gen_ai.choice",
                           attributes=attributes({"gen_ai.output.messages": "Hi"})),
                Span.Event(time_unix_nano=1544712660600000000, name="http.retry")],
    )
    as_protobuf = request(expected_span, scope="pydantic-ai")
    del as_protobuf.resource_spans[0].resource.attributes[1]
    as_protobuf.resource_spans[0].resource.attributes.add(key="session.id", value=any_value("resource-level"))

    from_json = decode(json.dumps(document).encode(), JSON)
    from_protobuf = decode(as_protobuf.SerializeToString())

    assert from_json == from_protobuf
    assert from_json.rejected == []
    assert [item.conversation_id for item in from_json.spans] == ["conv-7"]
    assert from_json.spans[0].record == SpanRecord(
        trace_id=TRACE.lower(), span_id=SPAN.lower(), parent_span_id=PARENT.lower(), name="chat gpt-4o",
        start_ns=1544712660000000000, end_ns=1544712661000000000, service_name="shop", scope_name="pydantic-ai",
        kind=3, status_code=2, status_message="timeout",
        attributes={"gen_ai.conversation.id": "conv-7", "gen_ai.usage.input_tokens": 12,
                    "gen_ai.request.temperature": 0.5, "gen_ai.tool.definitions": [{"name": "lookup"}]},
        resource={"session.id": "resource-level"},
        events=(SpanEvent(name="gen_ai.choice", time_ns=1544712660500000000,
                          attributes={"gen_ai.output.messages": "Hi"}),),
    )
    # The proto3 mapping's own form of an id, base64, is read too.
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "W47/95gDgQPSabYzgT/GDA=="
    assert decode(json.dumps(document).encode(), JSON) == from_protobuf


def test_it_redacts_kept_values_before_cutting_them_to_size(settings):
    settings.AGENTTEST_REDACT_PATTERNS = [r"ACCT-\d{6}"]
    secret = "sk-" + "A1b2C3d4" * 4
    body = request(
        span(**{"gen_ai.input.messages": f"my key is {secret} and account ACCT-774411", "gen_ai.output.messages":
                "x" * 994 + " " + secret, NOT_KEPT: f"Bearer {secret}", "gen_ai.conversation.id": "ACCT-774411"}),
    ).SerializeToString()

    decoded = decode(body)

    record = decoded.spans[0].record
    assert record.attributes[CONTENT] == "my key is [redacted] and account [redacted]"
    # Redacted first, then cut: the half of a key that fits would otherwise be stored.
    assert record.attributes["gen_ai.output.messages"] == "x" * 994 + " [reda" + TRUNCATED
    assert NOT_KEPT not in record.attributes
    assert "ACCT-774411" not in json.dumps(record.attributes) + decoded.spans[0].conversation_id
    assert decoded.spans[0].conversation_id.startswith("[redacted]~")


def test_it_cuts_values_nested_too_deep_and_refuses_nesting_no_decoder_reads():
    nested: object = "bottom"
    for _ in range(12):
        nested = {"inner": nested}
    long_list = ["word"] * 500
    body = request(span(**{"gen_ai.tool.call.arguments": nested, "gen_ai.tool.definitions": long_list}))

    record = decode(body.SerializeToString()).spans[0].record

    value, depth = record.attributes["gen_ai.tool.call.arguments"], 0
    while isinstance(value, dict):
        value, depth = value["inner"], depth + 1
    assert (value, depth) == (CUT, MAX_VALUE_DEPTH)
    definitions = record.attributes["gen_ai.tool.definitions"]
    assert definitions[-1] == TRUNCATED and 150 < len(definitions) < 250  # 5 characters a word within 1,000

    # Nesting beyond what protobuf's decoders read at all (100 levels), encoded by hand since no message type can
    # be built that deep: the request is refused, not a crash.
    assert refusal(framed(abyss_span())).status == 400
    deep_json = '{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": ' + "[" * 5000 + "]" * 5000 + "}]}]}]}"
    assert refusal(deep_json.encode(), JSON).status == 400


def test_it_replaces_text_that_is_not_utf8_or_not_storable():
    valid = request(span(name="chat é", **{CONTENT: "say é", "gen_ai.system": "a\x00b"})).SerializeToString()
    broken = valid.replace("é".encode(), b"\xff\xfe")  # same length: the framing stays right

    record = decode(broken).spans[0].record

    assert record.name == "chat \ufffd\ufffd"
    assert record.attributes == {CONTENT: "say \ufffd\ufffd", "gen_ai.system": "a\ufffdb"}
    text = ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "%s", "spanId": "%s", "name": "a\\ud800b",'
            ' "attributes": [{"key": "gen_ai.system", "value": {"stringValue": "\xff\\u0000"}}]}]}]}]}')
    from_json = decode((text % ("1" * 32, "2" * 16)).encode("latin-1"), JSON).spans[0].record
    assert (from_json.name, from_json.attributes) == ("a\ufffdb", {"gen_ai.system": "\ufffd\ufffd"})


def test_it_rejects_spans_with_invalid_ids_or_times_one_by_one():
    body = request(
        span(trace=1, span_id=1),
        span(trace=0, span_id=2),
        Span(trace_id=b"\x01" * 16, span_id=b"\x01" * 7, name="short id"),
        Span(trace_id=b"\x01" * 16, span_id=b"\x01" * 8, parent_span_id=b"\x02" * 3, name="bad parent"),
        Span(trace_id=b"\x01" * 16, span_id=b"\x03" * 8, start_time_unix_nano=2**64 - 1, name="far future"),
        span(trace=1, span_id=9, parent=77),  # a parent never sent: fine
    ).SerializeToString()

    decoded = decode(body)

    assert [item.record.span_id for item in decoded.spans] == ["0000000000000001", "0000000000000009"]
    assert len(decoded.rejected) == 4
    message = decoded.rejection_message()
    assert message.startswith("4 span(s) rejected: span 'chat gpt-4o' (00000000000000000000000000000000/")
    assert "trace_id must be 16 bytes" in message and "span_id must be 8 bytes" in message
    assert "parent_span_id must be empty or 8 bytes" in message and "after the year 2262" in message
    json_body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "not hex at all", "spanId": "1" * 16}, {"traceId": "1" * 32, "spanId": "2" * 16}]}]}]})
    assert len(decode(json_body.encode(), JSON).rejected) == 1


def test_it_inflates_compressed_bodies_only_up_to_the_limit():
    body = request(span(**{CONTENT: "hello"})).SerializeToString()
    assert decode(gzip.compress(body), encoding="gzip") == decode(body)
    assert decode(zlib.compress(body), encoding="deflate") == decode(body)
    # Two gzip members, as `cat a.gz b.gz` writes: one body.
    halves = gzip.compress(body[:10]) + gzip.compress(body[10:])
    assert decode(halves, encoding="GZIP") == decode(body)
    assert refusal(gzip.compress(body)[:-12], encoding="gzip").status == 400
    assert refusal(b"not gzip at all", encoding="gzip").status == 400
    assert refusal(body, encoding="br").status == 415
    assert refusal(body, content_type="text/plain").status == 415

    # 30 MB of zeros in 30 KB: refused once the limit (1 MiB) is passed, never inflated whole.
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    bomb = b"".join(compressor.compress(bytes(1 << 20)) for _ in range(30)) + compressor.flush()
    limits = Limits(max_body_bytes=1 << 20, max_spans=100, max_value_chars=1000)
    refused, peak = with_peak_memory(lambda: refusal(bomb, encoding="gzip", limits=limits))
    assert refused.status == 413 and "AGENTTEST_TRACES_MAX_BODY_BYTES" in str(refused)
    assert peak < 4 * (1 << 20), peak


def test_it_refuses_a_million_spans_by_counting_them_before_decoding_one():
    # Built cheaply: one encoded span (the smallest, all defaults: tag and length 0) repeated.
    body = framed_spans(b"\x12\x00" * 10**6)
    limits = Limits(max_body_bytes=len(body), max_spans=10_000, max_value_chars=1000)

    refused, peak = with_peak_memory(lambda: refusal(body, limits=limits))

    # Not one span decoded: 10⁶ would take hundreds of MB (how fast the refusal is: bench/traces_ingest.py).
    assert peak < 1 << 20, peak
    assert refused.status == 413
    assert "holds 1000000 spans; at most 10000" in str(refused)


def test_it_refuses_bodies_that_are_no_request():
    assert refusal(b"\xff\xff\xff\xff").status == 400
    assert refusal(b"[1, 2]", JSON).status == 400
    assert refusal(b'{"resourceSpans": "many"}', JSON).status == 400
    assert refusal(b'{"resourceSpans": [', JSON).status == 400
    assert refusal(b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "' + b"9" * 5000 + b'"}]}]}]}',
                   JSON).status == 400
    assert refusal(bytes(LIMITS.max_body_bytes + 1)).status == 413
    # An empty request is a success with nothing in it, as OTLP says.
    assert decode(b"").spans == [] and decode(b"{}", JSON).spans == []
