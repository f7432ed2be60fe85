"""Storing spans (traces/services.py): once per (trace, span), keyed to their conversation, whole or not at all;
the retention sweep, by service, command and worker."""

from __future__ import annotations

import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from tests.traces.conftest import CONTENT, PROTOBUF, hex_trace, kept, request, span, stored
from tests.workers import WAIT_SECONDS
from traces.models import TraceSpan
from traces.otlp import Limits, OtlpRefused
from traces.services import spans_sweep_expired, traces_ingest

pytestmark = pytest.mark.django_db

LIMITS = Limits(max_body_bytes=1 << 20, max_spans=100, max_value_chars=1000)


def ingest(*spans, service: str = "shop"):
    return traces_ingest(body=request(*spans, service=service).SerializeToString(), content_type=PROTOBUF,
                         kept=kept, limits=LIMITS)


def keys() -> dict[tuple[int, int], str]:
    """(trace, span) as the small numbers the test gave them → conversation key."""
    return {(int(trace_id, 16), int(span_id, 16)): key
            for trace_id, span_id, key in TraceSpan.objects.values_list("trace_id", "span_id", "conversation_key")}


def test_it_stores_each_span_once_and_keys_a_trace_to_the_conversation_any_of_its_spans_names():
    # The tool and model spans end first, so they are exported before the agent span that names the conversation.
    first = ingest(span(trace=1, span_id=2, parent=1, name="execute_tool lookup"),
                   span(trace=1, span_id=3, parent=1, name="chat gpt-4o", **{CONTENT: "hi"}),
                   span(trace=1, span_id=3, parent=1, name="chat gpt-4o, sent twice"),
                   span(trace=2, span_id=1, name="a trace of its own"))
    assert (first.new, first.duplicate, first.rejected) == (3, 1, 0)
    assert first.conversations == (hex_trace(1), hex_trace(2))
    assert TraceSpan.objects.get(span_id="0000000000000003").name == "chat gpt-4o"

    second = ingest(span(trace=1, span_id=1, name="invoke_agent shop", **{"gen_ai.conversation.id": "conv-1"}),
                    span(trace=1, span_id=3, parent=1, name="chat gpt-4o, sent again"),
                    span(trace=3, span_id=1, **{"session.id": "session-9"}))
    assert (second.new, second.duplicate) == (2, 1)
    assert second.conversations == ("conv-1", "session-9")
    # The spans stored under their trace's id moved to the conversation; the other trace kept its own.
    assert keys() == {(1, 1): "conv-1", (1, 2): "conv-1", (1, 3): "conv-1", (2, 1): hex_trace(2),
                      (3, 1): "session-9"}

    # A late span of a trace already keyed joins its conversation; one naming its own id keeps it.
    third = ingest(span(trace=1, span_id=4, parent=3, name="late"),
                   span(trace=1, span_id=5, parent=1, **{"gen_ai.conversation.id": "conv-2"}))
    assert third.conversations == ("conv-1", "conv-2")
    assert keys()[(1, 4)] == "conv-1" and keys()[(1, 5)] == "conv-2"
    assert TraceSpan.objects.count() == 7


def test_it_stores_nothing_of_a_request_refused_whole():
    ingest(span(trace=1, span_id=1))
    before = stored()
    too_many = request(*[span(trace=9, span_id=number) for number in range(1, 102)]).SerializeToString()

    with pytest.raises(OtlpRefused):
        traces_ingest(body=too_many, content_type=PROTOBUF, kept=kept, limits=LIMITS)
    with pytest.raises(OtlpRefused):
        traces_ingest(body=request(span(trace=9)).SerializeToString()[:-3], content_type=PROTOBUF, kept=kept,
                      limits=LIMITS)

    assert stored() == before


def test_it_sweeps_whole_conversations_past_retention_by_service_command_and_worker(settings):
    ingest(span(trace=1, span_id=1, **{"gen_ai.conversation.id": "old"}),
           span(trace=1, span_id=2, parent=1),
           span(trace=2, span_id=1, **{"gen_ai.conversation.id": "active"}),
           span(trace=3, span_id=1, **{"gen_ai.conversation.id": "recent"}))
    long_ago = timezone.now() - timedelta(days=31)
    TraceSpan.objects.filter(conversation_key__in=["old", "active"]).update(received_at=long_ago)
    ingest(span(trace=2, span_id=2, parent=1))  # "active" received a span today: kept whole

    assert spans_sweep_expired(retention_days=0).spans == 0
    assert spans_sweep_expired(retention_days=40).spans == 0
    settings.AGENTTEST_TRACES_RETENTION_DAYS = 30
    assert spans_sweep_expired().spans == 2

    assert sorted(set(TraceSpan.objects.values_list("conversation_key", flat=True))) == ["active", "recent"]
    TraceSpan.objects.filter(conversation_key="recent").update(received_at=long_ago)
    out = StringIO()
    call_command("traces", "sweep", "--days", "7", stdout=out)
    assert out.getvalue().strip().startswith("past the retention period: deleted 1 span(s), 0 imported conversation")
    assert TraceSpan.objects.filter(conversation_key="active").count() == 2


@pytest.mark.django_db(transaction=True)
def test_it_sweeps_in_the_worker_from_its_start():
    from traces import signals

    ingest(span(trace=1, span_id=1, **{"gen_ai.conversation.id": "old"}))
    TraceSpan.objects.update(received_at=timezone.now() - timedelta(days=400))

    signals.start_sweeping()
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while TraceSpan.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        signals.stop_sweeping()

    assert not TraceSpan.objects.exists()
