"""What the traces tests share: OTLP requests built with opentelemetry-proto's own types, API tokens, and the
attribute policy the receiver keeps by.

The policy the receiver applies is traces.dialects.attribute_kept (the dialect mapping's). Where a test names one, it
is `kept` below — a small real policy — passed explicitly; the tests that go through the view use the dialects' own."""

from __future__ import annotations

import base64
import json
import tracemalloc
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from django.db import connection
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from rest_framework.authtoken.models import Token

from bench.traces_ingest import varint
from tests.runtimes.conftest import openai_stub, team_repo  # noqa: F401 (fixtures: a team's agents in production)
from traces.models import TraceSpan

KEPT_PREFIXES = ("gen_ai.", "llm.", "openinference.", "input.", "output.", "tool.", "session.")
CONTENT = "gen_ai.input.messages"  # read by every mapping of the GenAI conventions: kept
NOT_KEPT = "http.request.header.authorization"  # read by none: never stored
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TRACES = "/v1/traces"


def kept(name: str) -> bool:
    return name.startswith(KEPT_PREFIXES)


def any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list):
        return AnyValue(array_value=ArrayValue(values=[any_value(item) for item in value]))
    if isinstance(value, dict):
        return AnyValue(kvlist_value=KeyValueList(values=attributes(value)))
    return AnyValue(string_value=value)


def attributes(values: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=key, value=any_value(value)) for key, value in values.items()]


def span(trace: int = 1, span_id: int = 1, parent: int = 0, name: str = "chat gpt-4o", start: int = 1_000,
         end: int = 2_000, **values: Any) -> Span:
    """A span with ids made of small numbers (trace 1 is 0…01), attributes from keyword arguments (dots as __)."""
    return Span(
        trace_id=trace.to_bytes(16, "big"),
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        kind=Span.SPAN_KIND_CLIENT,
        attributes=attributes({key.replace("__", "."): value for key, value in values.items()}),
    )


def request(*spans: Span, service: str = "shop", scope: str = "test.scope") -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource={"attributes": attributes({"service.name": service, "host.name": "web-1"})},
        scope_spans=[ScopeSpans(scope={"name": scope}, spans=list(spans))],
    )])




def json_body(message: ExportTraceServiceRequest) -> bytes:
    """The request as OTLP/JSON: protobuf's JSON mapping, with ids in hex as OTLP says (not base64)."""
    body = MessageToDict(message)
    for resource in body.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for one in scope.get("spans", []):
                for name in ("traceId", "spanId", "parentSpanId"):
                    if one.get(name):
                        one[name] = base64.b64decode(one[name]).hex()
    return json.dumps(body).encode()


def framed(*spans: bytes) -> bytes:
    """Encoded spans as one request, framed by hand: resource_spans (1) → scope_spans (2) → spans (2)."""
    return framed_spans(b"".join(b"\x12" + varint(len(one)) + one for one in spans))


def framed_spans(scope_spans: bytes) -> bytes:
    """A request of one resource and one scope whose spans are `scope_spans`, already encoded (cheap for many)."""
    resource_spans = b"\x12" + varint(len(scope_spans)) + scope_spans
    return b"\x0a" + varint(len(resource_spans)) + resource_spans


def abyss_span(levels: int = 400) -> bytes:
    """An encoded span whose attribute nests arrays `levels` deep: deeper than protobuf's decoders read (100), so no
    message type can build it; encoded by hand."""
    value = b"\x0a\x06bottom"  # AnyValue.string_value
    for _ in range(levels):
        array = b"\x0a" + varint(len(value)) + value  # ArrayValue.values
        value = b"\x2a" + varint(len(array)) + array  # AnyValue.array_value
    key_value = b"\x0a\x1agen_ai.tool.call.arguments\x12" + varint(len(value)) + value
    return span().SerializeToString() + b"\x4a" + varint(len(key_value)) + key_value  # Span.attributes


def hex_trace(number: int) -> str:
    return number.to_bytes(16, "big").hex()


def hex_span(number: int) -> str:
    return number.to_bytes(8, "big").hex()


T = TypeVar("T")


def with_peak_memory(call: Callable[[], T]) -> tuple[T, int]:
    """What `call` returns, and the most bytes Python held at once while it ran (tracemalloc)."""
    tracemalloc.start()
    try:
        outcome = call()
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def stored_texts() -> str:
    """Every value of every row of every table in the database, as text: where a secret must be found nowhere."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            found.extend(_as_text(value) for row in cursor.fetchall() for value in row)
    return "\n".join(found)


def _as_text(value: Any) -> str:
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode(errors="replace")
    return str(value)


def stored() -> list[tuple[str, str]]:
    return list(TraceSpan.objects.order_by("trace_id", "span_id").values_list("trace_id", "span_id"))


# Users without a password: hashing one costs a second of each test's setup, and a token needs none.
@pytest.fixture
def staff_token(django_user_model) -> str:
    return Token.objects.create(user=django_user_model.objects.create_user("exporter", is_staff=True)).key


@pytest.fixture
def member_token(django_user_model) -> str:
    return Token.objects.create(user=django_user_model.objects.create_user("reader")).key
