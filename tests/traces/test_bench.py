"""bench/traces_ingest.py measures what it says, with tiny numbers (a smoke test: no timing is asserted). It runs in
process on the test database: a subprocess would spend half a minute migrating a scratch database first."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from bench.traces_ingest import format_growth, format_report, growing_benchmark, ingest_benchmark
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db


def _figure(output: str, label: str) -> float:
    match = re.search(rf"^{re.escape(label)}\s+(-?[\d.]+)", output, re.MULTILINE)
    assert match, f"{label!r} is missing from the report:\n{output}"
    return float(match.group(1))


@pytest.mark.parametrize(("encoding", "gzipped"), [("protobuf", False), ("json", True)])
def test_it_ingests_through_the_receiver_and_prints_spans_per_second_and_peak_rss(staff_token, encoding, gzipped):
    report = ingest_benchmark(client=Client(), token=staff_token, spans=45, batch=20, encoding=encoding,
                              gzipped=gzipped)

    output = format_report(report, "the test database")

    assert output.startswith(f"traces ingest benchmark: 45 spans in 3 requests of up to 20, {encoding}")
    assert _figure(output, "spans stored") == 45
    assert _figure(output, "spans/s") > 0
    assert _figure(output, "peak RSS") >= _figure(output, "peak RSS before") > 0
    assert _figure(output, "10^6 spans refused in") > 0
    assert _figure(output, "gzip bomb bytes") < 16 * 1024 and _figure(output, "gzip bomb refused in") > 0
    # Content kept, what the mapping does not read dropped, every span keyed to its agent run's conversation.
    chat = TraceSpan.objects.filter(name="chat gpt-4o", service_name="bench-shop").first()
    assert "gen_ai.input.messages" in chat.attributes and "http.request.header.user-agent" not in chat.attributes
    assert set(TraceSpan.objects.filter(service_name="bench-shop").values_list("conversation_key", flat=True)) == {
        f"conversation-{trace}" for trace in range(1, 6)}


def test_it_prints_the_per_span_cost_of_one_conversation_growing_span_by_span(staff_token):
    growth = growing_benchmark(client=Client(), token=staff_token, sizes=(4, 12), window=2)

    output = format_growth(growth)

    assert output.startswith("one conversation growing span by span: 12 spans, one a request")
    assert _figure(output, "growing spans/s") > 0
    assert _figure(output, "ms per span at 4") > 0 and _figure(output, "ms per span at 12") > 0
    # Three turns of four spans: each a question, a tool call and its result, and an answer, written as they came.
    assert _figure(output, "messages imported") == 3 * 5
    assert set(TraceSpan.objects.values_list("conversation_key", flat=True)) == {"bench-growing-conversation"}
