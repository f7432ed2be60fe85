"""A real exporter over real HTTP: the OpenTelemetry SDK's OTLP/HTTP exporter, configured only by the environment
variables a team sets (OTEL_EXPORTER_OTLP_ENDPOINT = the site, OTEL_EXPORTER_OTLP_HEADERS = the token), sending to a
live agenttest; and a 50 MB body refused before it is read."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.traces.conftest import CONTENT, NOT_KEPT, PROTOBUF
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "sk-" + "Planted0123456789" * 2


def finished_spans(conversation: str, question: str) -> list:
    """An agent run as pydantic-ai's instrumentation shapes it: invoke_agent → chat, execute_tool."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("pydantic-ai")
    with tracer.start_as_current_span("invoke_agent shop", attributes={"gen_ai.conversation.id": conversation}):
        messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}])
        with tracer.start_as_current_span("chat gpt-4o", attributes={CONTENT: messages, NOT_KEPT: f"Bearer {SECRET}"}):
            pass
        with tracer.start_as_current_span("execute_tool lookup_order", attributes={"gen_ai.tool.name": "lookup_order"}):
            pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_it_stores_what_the_sdks_exporter_sends_plain_and_gzipped_once(live_server, staff_token, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", live_server.url)  # the exporter appends /v1/traces
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{staff_token}")
    spans = finished_spans("conv-42", f"my key is {SECRET}, where is order 1042?")

    assert OTLPSpanExporter().export(spans) is SpanExportResult.SUCCESS
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    assert OTLPSpanExporter().export(spans) is SpanExportResult.SUCCESS  # a retry's duplicate: stored once

    rows = {row.name: row for row in TraceSpan.objects.all()}
    assert sorted(rows) == ["chat gpt-4o", "execute_tool lookup_order", "invoke_agent shop"]
    assert {row.conversation_key for row in rows.values()} == {"conv-42"}
    assert {row.service_name for row in rows.values()} == {"shop-agent"}
    chat = rows["chat gpt-4o"]
    assert NOT_KEPT not in chat.attributes
    question = json.loads(chat.attributes[CONTENT])[0]["parts"][0]["content"]
    assert question == "my key is [redacted], where is order 1042?"
    assert chat.parent_span_id == rows["invoke_agent shop"].span_id
    assert SECRET not in json.dumps([row.attributes for row in rows.values()])

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20not-a-token")
    assert OTLPSpanExporter().export(finished_spans("conv-43", "hello")) is SpanExportResult.FAILURE
    assert TraceSpan.objects.count() == 3


def test_it_refuses_a_50_mb_body_before_reading_it(live_server, staff_token):
    address = urlsplit(live_server.url)
    head = (
        f"POST /v1/traces HTTP/1.1\r\nHost: {address.hostname}\r\nContent-Type: {PROTOBUF}\r\n"
        f"Authorization: Bearer {staff_token}\r\nContent-Length: {50 * 1024 * 1024}\r\n\r\n"
    ).encode()
    with socket.create_connection((address.hostname, address.port), timeout=10) as connection:
        # One kilobyte of the 50 MB is sent; the answer comes without the rest.
        connection.sendall(head + b"\x0a" * 1024)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += connection.recv(65536)
        header, _, body = answer.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in header.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(body) < length:
            body += connection.recv(65536)

    assert header.startswith(b"HTTP/1.1 413")
    assert b"Content-Type: application/x-protobuf" in header
    assert "AGENTTEST_TRACES_MAX_BODY_BYTES" in status_pb2.Status.FromString(body).message
    assert not TraceSpan.objects.exists()
