"""What one request may cost is bounded by AGENTTEST_TRACES_MAX_VALUES (issue 35, finding 8): the 8 KB gzip OTLP/JSON
body of the issue — one attribute array of millions of empty values — is refused before it is parsed (it took 28-65 s
of CPU and ~364 MB); in protobuf the span holding such an array is refused alone, counted on the wire, and the
request's other spans are stored, the OTLP partial-success answer naming the limit."""

from __future__ import annotations

import gzip
import json

import pytest
from django.test import Client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from bench.traces_ingest import gzip_bomb, varint
from tests.traces.conftest import CONTENT, JSON, PROTOBUF, TRACES, framed, span, stored, with_peak_memory
from tests.traces.test_api import status_of

pytestmark = pytest.mark.django_db

EMPTY_VALUES = 2_500_000


def protobuf_bomb_span() -> bytes:
    """An encoded span whose one attribute is an array of EMPTY_VALUES empty values (two bytes each)."""
    array = b"\x0a\x00" * EMPTY_VALUES  # ArrayValue.values: an empty AnyValue
    value = b"\x2a" + varint(len(array)) + array  # AnyValue.array_value
    key_value = b"\x0a\x15gen_ai.input.messages\x12" + varint(len(value)) + value
    return span(trace=2, span_id=1).SerializeToString() + b"\x4a" + varint(len(key_value)) + key_value


def post(body: bytes, token: str, content_type: str, **headers: str):
    return Client().generic(
        "POST", TRACES, body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}", **headers
    )


def test_it_refuses_the_8_kb_gzip_json_bomb_before_parsing_it(staff_token):
    body = gzip_bomb(EMPTY_VALUES)
    assert len(body) < 16 * 1024

    response, peak = with_peak_memory(lambda: post(body, staff_token, JSON, HTTP_CONTENT_ENCODING="gzip"))

    assert response.status_code == 413
    assert "AGENTTEST_TRACES_MAX_VALUES" in status_of(response).message
    # The inflated 5 MB body and its copy without strings, never millions of objects.
    assert peak < 40 * (1 << 20), peak
    assert stored() == []


def test_it_refuses_a_span_of_millions_of_values_alone_naming_the_limit(staff_token):
    good = span(trace=1, span_id=1, **{CONTENT: json.dumps([{"role": "user", "content": "hi"}])}).SerializeToString()
    body = gzip.compress(framed(good, protobuf_bomb_span()))

    response, peak = with_peak_memory(lambda: post(body, staff_token, PROTOBUF, HTTP_CONTENT_ENCODING="gzip"))

    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 1
    assert "AGENTTEST_TRACES_MAX_VALUES" in partial.error_message
    assert stored() == [("00000000000000000000000000000001", "0000000000000001")]
    assert peak < 40 * (1 << 20), peak


def test_it_takes_a_request_within_the_limit_whole(staff_token, settings):
    settings.AGENTTEST_TRACES_MAX_VALUES = 100
    spans = [span(trace=1, span_id=number, **{CONTENT: "x", "gen_ai.tool.call.arguments": ["a", "b"]})
             for number in range(1, 11)]
    response = post(framed(*(item.SerializeToString() for item in spans)), staff_token, PROTOBUF)
    assert response.status_code == 200 and not ExportTraceServiceResponse.FromString(response.content).HasField(
        "partial_success"
    )
    assert len(stored()) == 10

    # Each span holds 7 (two key-values, their two values, the array and its two items): of 16, 14 fit in 100, and
    # the last two are refused one by one.
    more = [span(trace=3, span_id=number, **{CONTENT: "x", "gen_ai.tool.call.arguments": ["a", "b"]})
            for number in range(1, 17)]
    answer = post(framed(*(item.SerializeToString() for item in more)), staff_token, PROTOBUF)
    partial = ExportTraceServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_spans == 2 and "AGENTTEST_TRACES_MAX_VALUES" in partial.error_message
    assert len(stored()) == 24
