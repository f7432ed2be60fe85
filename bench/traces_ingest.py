"""Span ingestion through the real receiver: spans/s and peak RSS.

    python bench/traces_ingest.py [--spans 20000] [--batch 200] [--encoding protobuf|json] [--gzip]
                                  [--growing 10,100,1000] [--database-url postgres://…]

Posts `--spans` spans to POST /v1/traces in requests of `--batch` spans, with Django's test client in process (the
view, authentication, throttle, decoding and the one-transaction store — no network), on a scratch database. Each
request holds traces shaped as an agent's: an invoke_agent span and, under it, model calls carrying their messages
(about 1 KB of kept content each) and tool calls, plus attributes the mapping does not read (dropped). Bodies are
built outside the timed part, and one request before them is not timed (the first pays for imports). Prints spans/s
over the time spent in the requests, the median and slowest request, the process's peak RSS before and after, how
long a request of 10⁶ spans takes to be refused, and what issue 35's 8 KB gzip OTLP/JSON body of millions of empty
values costs (it took 28-65 s of CPU and ~364 MB before AGENTTEST_TRACES_MAX_VALUES).

Then one conversation grows span by span (`--growing`: the sizes to report at): each turn a trace of an agent run —
two model calls, each resending the whole history, a tool call and the invoke_agent span — posted one span a request,
as a service exporting each span when it ends does, with an agent to bind it to, so every request writes the
conversation. Prints spans/s over the whole growth, the process's peak RSS, and at each size the median cost of the
last spans that brought the conversation to it: a cost that stays flat as the conversation grows is one that does not
re-read the conversation.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as a script, Python puts bench/ first on the path; the project packages live one level up.
    sys.path.insert(0, str(ROOT))

from bench.harness_overhead import scratch_database, setup_django  # noqa: E402

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
SPANS_PER_TRACE = 10
WARM_UP = "bench-warm-up"


@dataclass(frozen=True)
class Report:
    spans: int
    batch: int
    requests: int
    encoding: str
    gzipped: bool
    seconds: float  # in the requests
    median_ms: float
    slowest_ms: float
    stored: int
    rss_before_mb: float
    rss_after_mb: float
    million_refused_ms: float
    bomb_bytes: int = 0
    bomb_refused_ms: float = 0.0
    bomb_rss_mb: float = 0.0  # the process's peak RSS once the bomb was refused


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def request_body(first_trace: int, spans: int, encoding: str, service: str = "bench-shop") -> bytes:
    """`spans` spans in traces of SPANS_PER_TRACE, trace numbers from `first_trace`."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    def attributes(values: dict[str, Any]) -> list[KeyValue]:
        return [KeyValue(key=key, value=AnyValue(int_value=value) if isinstance(value, int)
                         else AnyValue(string_value=value)) for key, value in values.items()]

    made = []
    for index in range(spans):
        trace, position = first_trace + index // SPANS_PER_TRACE, index % SPANS_PER_TRACE
        start = 1_700_000_000_000_000_000 + trace * 1_000_000_000 + position * 1_000_000
        if position == 0:
            name, values = "invoke_agent shop", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "shop",
                                                 "gen_ai.conversation.id": f"conversation-{trace}"}
        elif position % 2:
            messages = [{"role": "user", "parts": [{"type": "text", "content": f"Where is order {trace}? " * 20}]}]
            name, values = "chat gpt-4o", {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps(messages), "gen_ai.output.messages": json.dumps(messages),
                "gen_ai.usage.input_tokens": 250, "gen_ai.usage.output_tokens": 40,
                "http.request.header.user-agent": "bench", "server.address": "api.openai.com"}
        else:
            name, values = "execute_tool lookup_order", {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order",
                "gen_ai.tool.call.id": f"call_{trace}_{position}",
                "gen_ai.tool.call.arguments": json.dumps({"order_id": str(trace)}),
                "gen_ai.tool.call.result": json.dumps({"status": "shipped"}), "code.function": "lookup_order"}
        made.append(Span(
            trace_id=trace.to_bytes(16, "big"), span_id=(position + 1).to_bytes(8, "big"),
            parent_span_id=b"" if position == 0 else (1).to_bytes(8, "big"), name=name, kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=start, end_time_unix_nano=start + 500_000, attributes=attributes(values),
        ))
    message = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource={"attributes": attributes({"service.name": service, "host.name": "bench-host"})},
        scope_spans=[ScopeSpans(scope={"name": "pydantic-ai"}, spans=made)],
    )])
    if encoding == "protobuf":
        return message.SerializeToString()
    document = json_format.MessageToDict(message)
    for span in document["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for field in ("traceId", "spanId", "parentSpanId"):
            if field in span:
                import base64

                span[field] = base64.b64decode(span[field]).hex()
    return json.dumps(document).encode()


def ingest_benchmark(*, client: Any, token: str, spans: int, batch: int, encoding: str, gzipped: bool) -> Report:
    """Posts the spans through `client` (Django's test client) and measures; the database must be empty of them."""
    from traces.models import TraceSpan

    content_type = PROTOBUF if encoding == "protobuf" else JSON
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", **({"HTTP_CONTENT_ENCODING": "gzip"} if gzipped else {})}
    # One request first, not timed: the first pays for imports and building the message types.
    warm_up = request_body(10**9, min(batch, spans), encoding, service=WARM_UP)
    client.generic("POST", "/v1/traces", gzip.compress(warm_up) if gzipped else warm_up, content_type=content_type,
                   **headers)
    rss_before = _peak_rss_mb()
    timings = []
    sent = 0
    while sent < spans:
        size = min(batch, spans - sent)
        body = request_body(sent // SPANS_PER_TRACE + 1, size, encoding)
        if gzipped:
            body = gzip.compress(body)
        started = time.perf_counter()
        response = client.generic("POST", "/v1/traces", body, content_type=content_type, **headers)
        timings.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise SystemExit(f"the receiver answered {response.status_code}: {response.content[:300]!r}")
        sent += size
    rss_after = _peak_rss_mb()
    million = b"\x12\x00" * 10**6  # a request of 10⁶ (empty) spans, framed by hand
    resource_spans = b"\x12" + varint(len(million)) + million
    body = b"\x0a" + varint(len(resource_spans)) + resource_spans
    started = time.perf_counter()
    refused = client.generic("POST", "/v1/traces", body, content_type=PROTOBUF,
                             HTTP_AUTHORIZATION=headers["HTTP_AUTHORIZATION"])
    million_ms = (time.perf_counter() - started) * 1000
    if refused.status_code != 413:
        raise SystemExit(f"a request of 10⁶ spans got {refused.status_code}, not 413")
    bomb = gzip_bomb()
    started = time.perf_counter()
    refused = client.generic("POST", "/v1/traces", bomb, content_type=JSON, HTTP_CONTENT_ENCODING="gzip",
                             HTTP_AUTHORIZATION=headers["HTTP_AUTHORIZATION"])
    bomb_ms = (time.perf_counter() - started) * 1000
    if refused.status_code != 413:
        raise SystemExit(f"the gzip bomb got {refused.status_code}, not 413")
    return Report(
        spans=spans, batch=batch, requests=len(timings), encoding=encoding, gzipped=gzipped, seconds=sum(timings),
        median_ms=statistics.median(timings) * 1000, slowest_ms=max(timings) * 1000,
        stored=TraceSpan.objects.exclude(service_name=WARM_UP).count(), rss_before_mb=rss_before,
        rss_after_mb=rss_after, million_refused_ms=million_ms, bomb_bytes=len(bomb), bomb_refused_ms=bomb_ms,
        bomb_rss_mb=_peak_rss_mb(),
    )


@dataclass(frozen=True)
class Growth:
    spans: int
    seconds: float  # in the requests
    per_span_ms: tuple[tuple[int, float], ...]  # (size, median ms of the spans that brought the conversation to it)
    rss_mb: tuple[tuple[int, float], ...]  # (size, the process's peak RSS then)
    messages: int  # the imported conversation's messages at the end


def growing_spans(spans: int, service: str = "bench-growing") -> list[bytes]:
    """One conversation's spans, each its own protobuf request body, in the order an exporter ends them."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    def attributes(values: dict[str, Any]) -> list[KeyValue]:
        return [KeyValue(key=key, value=AnyValue(string_value=value)) for key, value in values.items()]

    def text(role: str, content: str) -> dict[str, Any]:
        return {"role": role, "parts": [{"type": "text", "content": content}]}

    history: list[dict[str, Any]] = []
    bodies: list[bytes] = []
    turn = 0
    while len(bodies) < spans:
        turn += 1
        trace = (10**6 + turn).to_bytes(16, "big")
        start = 1_700_000_000_000_000_000 + turn * 1_000_000_000
        call_id = f"call_{turn}"
        question = text("user", f"Where is order {turn}? It was due last week.")
        asked = [*history, question]
        called = {"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": "lookup_order",
                                                   "arguments": {"order_id": str(turn)}}]}
        result = {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id,
                                              "result": {"order_id": str(turn), "status": "shipped"}}]}
        answer = text("assistant", f"Order {turn} has shipped.")
        common = {"gen_ai.conversation.id": "bench-growing-conversation"}
        chat = {**common, "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
        made = [  # (span number, name, values, offset in ms): children end, and are exported, before the run
            (2, "chat gpt-4o", {**chat, "gen_ai.input.messages": json.dumps(asked),
                                "gen_ai.output.messages": json.dumps([called])}, 1),
            (3, "execute_tool lookup_order", {**common, "gen_ai.operation.name": "execute_tool",
                                              "gen_ai.tool.name": "lookup_order", "gen_ai.tool.call.id": call_id,
                                              "gen_ai.tool.call.result": json.dumps(result["parts"][0]["result"])}, 2),
            (4, "chat gpt-4o", {**chat, "gen_ai.input.messages": json.dumps([*asked, called, result]),
                                "gen_ai.output.messages": json.dumps([answer])}, 3),
            (1, "invoke_agent shop", {**common, "gen_ai.operation.name": "invoke_agent",
                                      "gen_ai.agent.name": "shop"}, 0),
        ]
        for number, name, values, offset in made:
            span = Span(
                trace_id=trace, span_id=number.to_bytes(8, "big"),
                parent_span_id=b"" if number == 1 else (1).to_bytes(8, "big"), name=name,
                start_time_unix_nano=start + offset * 1_000_000, end_time_unix_nano=start + 900_000_000,
                kind=Span.SPAN_KIND_INTERNAL, attributes=attributes(values),
            )
            bodies.append(ExportTraceServiceRequest(resource_spans=[ResourceSpans(
                resource={"attributes": attributes({"service.name": service})},
                scope_spans=[ScopeSpans(scope={"name": "bench"}, spans=[span])],
            )]).SerializeToString())
        history = [*asked, called, result, answer]
    return bodies[:spans]


def growing_benchmark(*, client: Any, token: str, sizes: tuple[int, ...], window: int = 5) -> Growth:
    """Posts one conversation's spans one a request until it has max(sizes) spans; an agent named as its service
    exists, so each request writes the conversation."""
    from agenthost.seams import Agent, Conversation

    service = "bench-growing"
    Agent.objects.get_or_create(name=service, defaults={"provider": "scripted", "model": "scripted"})
    bodies = growing_spans(max(sizes), service=service)
    timings = []
    rss: list[tuple[int, float]] = []
    for number, body in enumerate(bodies, start=1):
        started = time.perf_counter()
        response = client.generic("POST", "/v1/traces", body, content_type=PROTOBUF,
                                  HTTP_AUTHORIZATION=f"Bearer {token}")
        timings.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise SystemExit(f"the receiver answered {response.status_code}: {response.content[:300]!r}")
        if number in sizes:
            rss.append((number, _peak_rss_mb()))
    per_span = tuple(
        (size, statistics.median(timings[max(0, size - window) : size]) * 1000) for size in sorted(sizes)
    )
    conversation = Conversation.objects.filter(trace_service=service).first()
    return Growth(spans=len(bodies), seconds=sum(timings), per_span_ms=per_span, rss_mb=tuple(rss),
                  messages=conversation.messages.count() if conversation else 0)


def format_growth(growth: Growth) -> str:
    rows = [
        f"one conversation growing span by span: {growth.spans} spans, one a request",
        f"growing spans/s            {growth.spans / growth.seconds:.0f}",
        f"messages imported          {growth.messages}",
    ]
    rss = dict(growth.rss_mb)
    for size, ms in growth.per_span_ms:
        rows.append(f"ms per span at {size:<11} {ms:.1f} (peak RSS {rss.get(size, 0.0):.1f} MB)")
    return "\n".join(rows)


def gzip_bomb(values: int = 2_500_000) -> bytes:
    """Issue 35's body: one OTLP/JSON span whose one attribute is an array of `values` empty values, gzipped (about
    8 KB for the default)."""
    empties = b"{}," * (values - 1) + b"{}"
    return gzip.compress(
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + b"0" * 31 + b'1", "spanId": "'
        + b"0" * 15 + b'1", "name": "chat", "attributes": [{"key": "gen_ai.input.messages", "value": {"arrayValue": '
        b'{"values": [' + empties + b"]}}}]}]}]}]}",
        compresslevel=9,
    )


def varint(number: int) -> bytes:
    """A protobuf varint: how a length-delimited field's length is written."""
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def format_report(report: Report, database: str) -> str:
    rows = [
        f"traces ingest benchmark: {report.spans} spans in {report.requests} requests of up to "
        f"{report.batch}, {report.encoding}{' gzipped' if report.gzipped else ''}; {database}",
        f"spans stored               {report.stored}",
        f"spans/s                    {report.spans / report.seconds:.0f}",
        f"ms per request (median)    {report.median_ms:.1f}",
        f"ms per request (slowest)   {report.slowest_ms:.1f}",
        f"peak RSS before            {report.rss_before_mb:.1f} MB",
        f"peak RSS                   {report.rss_after_mb:.1f} MB",
        f"10^6 spans refused in      {report.million_refused_ms:.0f} ms",
        f"gzip bomb bytes            {report.bomb_bytes}",
        f"gzip bomb refused in       {report.bomb_refused_ms:.0f} ms",
        f"peak RSS after the bomb    {report.bomb_rss_mb:.1f} MB",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--encoding", choices=["protobuf", "json"], default="protobuf")
    parser.add_argument("--gzip", action="store_true", help="gzip each body, as OTEL_EXPORTER_OTLP_COMPRESSION=gzip")
    parser.add_argument("--growing", default="10,100,1000",
                        help="the sizes (spans) of the growing conversation to report per-span cost at")
    parser.add_argument("--database-url", default="", help="postgres://… (a scratch database is made); default SQLite")
    args = parser.parse_args(argv)

    import logging
    import os

    # The receiver's throttle would otherwise count the benchmark's requests.
    os.environ["AGENTTEST_THROTTLE_TRACES"] = "1000000/minute"
    with scratch_database(args.database_url, purpose="traces") as (database_url, var_dir, description):
        setup_django(database_url, var_dir)
        # The 10⁶-span request's 413 is expected: no warning line for it (after set-up, which configures logging).
        logging.getLogger("django.request").setLevel(logging.ERROR)
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.test import Client
        from rest_framework.authtoken.models import Token

        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
        user = get_user_model().objects.create_user("bench-exporter", is_staff=True)
        report = ingest_benchmark(client=Client(), token=Token.objects.create(user=user).key, spans=args.spans,
                                  batch=args.batch, encoding=args.encoding, gzipped=args.gzip)
        print(format_report(report, description))
        sizes = tuple(sorted({int(size) for size in args.growing.split(",") if size.strip()}))
        if sizes:
            growth = growing_benchmark(client=Client(), token=Token.objects.get(user=user).key, sizes=sizes)
            print(format_growth(growth))
        from django.db import connections

        connections.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
