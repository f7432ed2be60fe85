"""Reading stored spans back (traces/selectors.py) as the next slice's pages and mapping will: conversations, the
most recently active first, and one conversation's spans in order; and the admin's read-only view of them."""

from __future__ import annotations

import pytest

from tests.traces.conftest import CONTENT, PROTOBUF, hex_trace, kept, request, span
from traces.dialects._common import loaded
from traces.selectors import trace_conversation_count, trace_conversation_list, trace_conversation_spans
from traces.services import traces_ingest
from traces.spans import SpanRecord

pytestmark = pytest.mark.django_db


def ingest(*spans, service: str = "shop") -> None:
    traces_ingest(body=request(*spans, service=service).SerializeToString(), content_type=PROTOBUF, kept=kept)


def test_it_lists_conversations_most_recent_first_and_gives_their_spans_parent_before_child():
    conversation = {"gen_ai.conversation.id": "conv-1"}
    # Two traces of one conversation, two services; the child starts in the same nanosecond as its parent and
    # arrives first; one span's parent was never sent.
    ingest(span(trace=1, span_id=2, parent=1, name="chat", start=100, end=150, **{CONTENT: "hi"}),
           span(trace=1, span_id=1, name="invoke_agent", start=100, end=300, **conversation),
           span(trace=1, span_id=3, parent=99, name="orphan", start=120, end=130))
    ingest(span(trace=2, span_id=1, name="invoke_agent again", start=400, end=900, **conversation),
           service="shop-worker")
    ingest(span(trace=3, span_id=1, name="other", start=50, end=500), service="billing")

    conversations = trace_conversation_list()

    assert [(item.key, item.span_count, item.first_ns, item.last_ns) for item in conversations] == [
        ("conv-1", 4, 100, 900), (hex_trace(3), 1, 50, 500)]
    assert conversations[0].services == ("shop", "shop-worker")
    assert conversations[0].trace_ids == (hex_trace(1), hex_trace(2))
    assert [item.key for item in trace_conversation_list(service="billing")] == [hex_trace(3)]
    assert [item.key for item in trace_conversation_list(limit=1, offset=1)] == [hex_trace(3)]
    assert (trace_conversation_count(), trace_conversation_count(service="shop-worker")) == (2, 1)

    spans = trace_conversation_spans(key="conv-1")

    assert all(isinstance(item, SpanRecord) for item in spans)
    assert [item.name for item in spans] == ["invoke_agent", "chat", "orphan", "invoke_agent again"]
    # A model call's history is read from the database when the mapping asks for it, not with every span.
    assert list(spans[1].attributes) == [CONTENT] and spans[1].service_name == "shop"
    assert loaded(spans[1].attributes[CONTENT]) == "hi"
    assert trace_conversation_spans(key="nobody") == []


def test_it_shows_spans_to_staff_in_the_admin_read_only(client, django_user_model):
    ingest(span(trace=1, span_id=1, name="chat gpt-4o", **{CONTENT: "the question"}))
    staff = django_user_model.objects.create_superuser("curator", "curator@example.com", None)
    client.force_login(staff)

    listing = client.get("/admin/traces/tracespan/", {"q": hex_trace(1)})
    detail = client.get(f"/admin/traces/tracespan/{listing.context['cl'].result_list[0].pk}/change/")

    assert listing.status_code == 200 and b"chat gpt-4o" in listing.content
    assert detail.status_code == 200 and b"the question" in detail.content
    assert client.get("/admin/traces/tracespan/add/").status_code == 403
