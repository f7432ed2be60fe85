"""Retention that deletes what it promises (issue 35, finding 1): past AGENTTEST_TRACES_RETENTION_DAYS a
conversation's spans go, and so do the imported conversation, its messages (customer emails, addresses) and the drafts
recorded from it that nobody enabled; an enabled case stays — a person reviewed it — without a trace id or key.
`agenttest traces purge` deletes the same now for one service or conversation. Counted in rows."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenthost.models import Agent, Conversation, Message
from cases.models import Case
from recording.services import recording_create
from runs.models import CaseSnapshot, Recording
from tests.traces.conftest import stored_texts
from tests.traces.dialects.test_genai import VERSIONS, shop_agent
from tests.traces.test_conversations import FIND_ORDER
from tests.traces.test_receiver_conversations import send
from traces.models import TraceSpan
from traces.services import DELETED_TRACE, spans_sweep_expired

pytestmark = pytest.mark.django_db(transaction=True)


def received(client, token: str, service: str, question: str) -> Conversation:
    """One run of pydantic-ai's shop agent in `service`, posted to the receiver: its imported conversation."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    shop_agent(provider, VERSIONS[-1]).run_sync(question)
    before = set(Conversation.objects.values_list("pk", flat=True))
    send(client, token, exporter.get_finished_spans())
    provider.shutdown()
    [conversation] = Conversation.objects.exclude(pk__in=before)
    return conversation


def held(conversation: Conversation) -> dict[str, int]:
    return {
        "spans": TraceSpan.objects.filter(conversation_key=conversation.trace_key).count(),
        "conversations": Conversation.objects.filter(pk=conversation.pk).count(),
        "messages": Message.objects.filter(conversation=conversation).count(),
        "cases": Case.objects.filter(source_conversation=conversation).count(),
    }


@pytest.fixture
def shop() -> Agent:
    return Agent.objects.create(name="shop", provider="scripted", model="scripted", functions=[FIND_ORDER])


def test_it_deletes_everything_derived_past_retention_and_keeps_enabled_cases_without_trace_ids(
    client, staff_token, shop, settings
):
    old = received(client, staff_token, "shop", "Where is order 1042? Mail ana@example.com")
    recent = received(client, staff_token, "shop", "Where is order 7?")
    [reviewed] = recording_create(conversation=old).cases
    [unreviewed] = recording_create(conversation=old).cases
    Case.objects.filter(pk=reviewed.pk).update(enabled=True)
    recording_create(conversation=recent)
    before_old, before_recent = held(old), held(recent)
    assert before_old["spans"] > 0 and before_old["messages"] > 0 and before_old["cases"] == 2
    assert old.trace_key in Case.objects.get(pk=reviewed.pk).description
    TraceSpan.objects.filter(conversation_key=old.trace_key).update(
        received_at=timezone.now() - timedelta(days=31)
    )
    settings.AGENTTEST_TRACES_RETENTION_DAYS = 30

    report = spans_sweep_expired()

    assert (report.spans, report.conversations, report.messages, report.drafts, report.cases_kept) == (
        before_old["spans"], 1, before_old["messages"], 1, 1
    )
    assert held(old) == {"spans": 0, "conversations": 0, "messages": 0, "cases": 0}
    assert held(recent) == before_recent
    assert not Case.objects.filter(pk=unreviewed.pk).exists()
    assert not Recording.objects.filter(case_id=unreviewed.pk).exists()
    kept = Case.objects.get(pk=reviewed.pk)
    assert kept.enabled and kept.source_conversation is None
    text = kept.description + " ".join(str(warning) for warning in kept.warnings)
    for identifier in [old.trace_key, *old.trace_ids]:
        assert identifier not in text
    assert DELETED_TRACE in kept.description
    assert kept.turns.exists(), "the case a person reviewed still runs"
    # Nothing left to delete: a second sweep counts nothing.
    assert spans_sweep_expired().spans == 0


def test_it_deletes_the_case_snapshot_a_drafts_recording_left_and_keeps_a_reviewed_cases(
    client, staff_token, shop, settings
):
    old = received(client, staff_token, "shop", "Where is order 1042? Mail ana@example.com")
    reviewed = received(client, staff_token, "shop", "Where is order 7? Mail bo@example.com")
    recording_create(conversation=old)
    [kept] = recording_create(conversation=reviewed).cases
    Case.objects.filter(pk=kept.pk).update(enabled=True)
    # The recording run planned each draft, storing what it tests (the customer's words) as a snapshot.
    assert "ana@example.com" in stored_texts() and CaseSnapshot.objects.count() == 2
    TraceSpan.objects.update(received_at=timezone.now() - timedelta(days=31))
    settings.AGENTTEST_TRACES_RETENTION_DAYS = 30

    spans_sweep_expired()

    assert "ana@example.com" not in stored_texts(), "nothing of the draft nobody reviewed is left, in any table"
    assert list(CaseSnapshot.objects.values_list("content_hash", flat=True)) == [
        Case.objects.get(pk=kept.pk).content_hash
    ]


def test_it_deletes_imported_conversations_whose_spans_an_older_sweep_took(client, staff_token, shop, settings):
    orphan = received(client, staff_token, "shop", "Where is order 1042?")
    TraceSpan.objects.all().delete()  # what the sweep of old deleted: spans only
    Conversation.objects.filter(pk=orphan.pk).update(updated_at=timezone.now() - timedelta(days=31))
    settings.AGENTTEST_TRACES_RETENTION_DAYS = 30

    report = spans_sweep_expired()

    assert (report.conversations, report.messages > 0) == (1, True)
    assert not Conversation.objects.filter(pk=orphan.pk).exists()


def test_it_purges_one_service_or_one_conversation_now_with_the_command(client, staff_token, shop):
    first = received(client, staff_token, "shop", "Where is order 1042?")
    second = received(client, staff_token, "shop", "Where is order 7?")
    other = received(client, staff_token, "billing", "Where is invoice 3?")
    recording_create(conversation=first)
    kept_other, of_first = held(other), held(first)

    out = StringIO()
    call_command("traces", "purge", "--conversation", first.trace_key, stdout=out)
    assert out.getvalue().strip() == (
        f"deleted {of_first['spans']} span(s), 1 imported conversation(s) with {of_first['messages']} message(s), "
        "1 draft(s) never enabled; 0 enabled case(s) kept without their trace ids"
    )
    assert held(first) == {"spans": 0, "conversations": 0, "messages": 0, "cases": 0}
    assert held(second)["conversations"] == 1

    out = StringIO()
    call_command("traces", "purge", "--service", "shop", stdout=out)
    assert ", 1 imported conversation(s)" in out.getvalue()
    assert held(second) == {"spans": 0, "conversations": 0, "messages": 0, "cases": 0}
    assert held(other) == kept_other
    with pytest.raises(Exception, match="--service: must not be blank"):
        call_command("traces", "purge", "--service", " ", stdout=StringIO())
    assert held(other) == kept_other
