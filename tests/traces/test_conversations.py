"""A real pydantic-ai agent's conversation, exported by its own OpenTelemetry instrumentation, becomes a conversation of
agenttest bound to the agent of its name, shows where it came from (spans for staff only), records into a disabled
draft whose mocks are the real tool results, and that draft runs green on the scripted model."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Conversation
from cases.models import Case
from cases.services import case_enable
from recording.services import recording_create
from runs.models import CaseResult, Recording, Run
from runs.services import run_create, run_execute
from tests.recording.conftest import segments_answer
from tests.runs.test_key_free import OutboundGuard
from tests.traces.dialects.spans import records
from tests.traces.dialects.test_genai import VERSIONS, shop_agent
from traces.conversations import ConversationImportError, conversation_from_mapped
from traces.dialects import conversations_from_spans
from traces.spans import MappedConversation

SERVICE = "shop-service"
FIND_ORDER = {
    "name": "find_order",
    "description": "Find an order by its number.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
}


@pytest.fixture(scope="module")
def mapped() -> Iterator[MappedConversation]:
    """Two turns of pydantic-ai's shop agent (tests/traces/dialects), as its instrumentation exported them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = shop_agent(provider, VERSIONS[-1])
    first = agent.run_sync("Where is order 1042?")
    agent.run_sync("And order 7?", message_history=first.all_messages())
    [conversation] = conversations_from_spans(records(exporter.get_finished_spans()))
    provider.shutdown()
    yield conversation


@pytest.fixture
def shop(db, scripted_model) -> Agent:
    return Agent.objects.create(name="shop", provider="scripted", model="scripted", functions=[FIND_ORDER])


@pytest.mark.django_db
def test_it_binds_by_name_refuses_what_it_cannot_and_shows_spans_to_staff_only(
    mapped, client, admin_user, member, scripted_model
):
    with pytest.raises(ConversationImportError, match="bound to no agent: no agent is named 'shop'") as refused:
        conversation_from_mapped(mapped=mapped)
    assert refused.value.field == "agent"
    shop = Agent.objects.create(name="shop", provider="scripted", model="scripted", functions=[FIND_ORDER])
    with pytest.raises(ConversationImportError, match="no message content, so it cannot become a draft: set X"):
        conversation_from_mapped(mapped=replace(mapped, content_missing="set X"))
    assert not Conversation.objects.exists()
    by_service = Agent.objects.create(name=SERVICE, provider="scripted", model="scripted")
    assert conversation_from_mapped(mapped=replace(mapped, key="other", agent_name="")).agent == by_service

    conversation = conversation_from_mapped(mapped=mapped, owner=member)
    assert (conversation.agent, conversation.bound_by, conversation.trace_agent) == (shop, "agent name", "shop")
    assert conversation_from_mapped(mapped=mapped, agent=by_service, owner=member).pk == conversation.pk
    conversation.refresh_from_db()
    assert (conversation.agent, conversation.bound_by) == (by_service, "chosen")
    conversation = conversation_from_mapped(mapped=mapped, owner=member)
    span_ids = [message.span_id for message in mapped.messages if message.span_id]
    [trace_id, *_] = mapped.trace_ids
    page = reverse("agents:conversation", kwargs={"conversation_id": conversation.pk})

    client.force_login(admin_user)
    staff_list = client.get(reverse("agents:conversations")).content.decode()
    staff_page = client.get(page).content.decode()
    assert f"{SERVICE} · {trace_id}" in staff_list
    assert "Source: trace" in staff_page and f"<code>{mapped.key}</code>" in staff_page
    assert all(f"span <code>{span_id}</code>" in staff_page for span_id in span_ids)
    assert "Order 7 has shipped." in staff_page and "Open in the chat" not in staff_page

    client.force_login(member)
    member_list = client.get(reverse("agents:conversations")).content.decode()
    member_page = client.get(page).content.decode()
    assert ">trace<" in member_list and trace_id not in member_list
    assert "Order 7 has shipped." in member_page, "the same transcript"
    assert "Source: trace" not in member_page and not any(span_id in member_page for span_id in span_ids)
    assert trace_id not in member_page
    assert client.post(reverse("recording:record", kwargs={"conversation_id": conversation.pk})).status_code == 403


@pytest.mark.django_db(transaction=True)
def test_it_records_an_imported_conversation_into_a_draft_of_the_real_results_that_runs_green(
    mapped, shop, scripted_model
):
    real = [message.content for message in mapped.messages if message.role == "tool_result"]
    assert real == ['{"order_id":"1042","status":"shipped"}', '{"order_id":"7","status":"shipped"}']
    conversation = conversation_from_mapped(mapped=mapped)

    [draft] = recording_create(conversation=conversation).cases

    assert not draft.enabled
    assert [(mock.function_name, mock.result) for mock in draft.mocks.order_by("call_index")] == [
        ("find_order", real[0]), ("find_order", real[1])
    ]
    assert [(turn.user_message, [a.type for a in turn.assertions.all()]) for turn in draft.turns.order_by("position")] \
        == [("Where is order 1042?", ["toolCalled"]), ("And order 7?", ["toolCalled"])]
    # No output-text assertion; no stateEquals either: the tools wrote no state.
    assert not draft.assertions.filter(turn__isnull=True).exists()
    assert f"imported from the traces of service {SERVICE}" in draft.description
    assert "bound to agent shop by the trace's agent name (gen_ai.agent.name)" in draft.description

    case_enable(case=draft)
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]), "Order 1042 has shipped.",
        Answer(tool_calls=[Call("find_order", {"order_id": "7"})]), "Order 7 has shipped.",
    )
    run = run_execute(run_id=run_create(suite=draft.suite, model_keys=[scripted_model.key]).pk)

    result = CaseResult.objects.get(run=run, case=draft)
    assert result.status == "passed", result.reason
    assert [(call["name"], call["outcome"], json.loads(call["result"])["order_id"]) for call in result.tool_calls] \
        == [("find_order", "mocked", "1042"), ("find_order", "mocked", "7")]


def collector_file(spans: Any, path: Path) -> Path:
    """The spans as the OpenTelemetry Collector's file exporter writes them: one OTLP/JSON request per line, ids hex."""
    document = json_format.MessageToDict(encode_spans(spans))
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for field in ("traceId", "spanId", "parentSpanId"):
                    if span.get(field):
                        span[field] = base64.b64decode(span[field]).hex()
    path.write_text(json.dumps(document) + "\n")
    return path


@pytest.mark.django_db
def test_it_imports_a_collector_file_into_a_conversation_bound_by_name_or_by_the_agent_given(
    tmp_path, scripted_model
):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    shop_agent(provider, VERSIONS[-1]).run_sync("Where is order 1042?")
    file = collector_file(exporter.get_finished_spans(), tmp_path / "traces.jsonl")
    provider.shutdown()

    unbound = StringIO()
    call_command("traces", "import", str(file), stdout=unbound)
    assert "not imported as a conversation" in unbound.getvalue()
    assert "bound to no agent: no agent is named 'shop' (gen_ai.agent.name)" in unbound.getvalue()
    assert not Conversation.objects.exists()
    with pytest.raises(CommandError, match="--agent: no agent is named 'nobody'"):
        call_command("traces", "import", str(file), "--agent", "nobody")

    support = Agent.objects.create(name="support", provider="scripted", model="scripted", functions=[FIND_ORDER])
    chosen = StringIO()
    call_command("traces", "import", str(file), "--agent", "support", stdout=chosen)
    [conversation] = Conversation.objects.all()
    assert conversation.agent == support
    assert f"conversation #{conversation.pk} with agent 'support' (bound by chosen)" in chosen.getvalue()
    assert "0 new span(s)" in chosen.getvalue(), "the spans were stored by the first import"
    assert [(m.role, m.function_name, m.content) for m in conversation.messages.order_by("seq")] == [
        ("user", "", "Where is order 1042?"), ("assistant", "", ""), ("tool_call", "find_order", ""),
        ("tool_result", "find_order", '{"order_id":"1042","status":"shipped"}'),
        ("assistant", "", "Order 1042 has shipped."),
    ]


@pytest.mark.django_db(transaction=True)
def test_it_records_the_traces_answers_so_the_draft_replays_with_no_model(mapped, shop, monkeypatch):
    conversation = conversation_from_mapped(mapped=mapped)

    [draft] = recording_create(conversation=conversation).cases

    [recording] = Recording.objects.filter(case=draft)
    assert recording.model == "function:orders-model"
    assert len(recording.entries) == sum(m.role == "assistant" for m in mapped.messages) == 4
    assert any("recorded on function:orders-model: run it in replay mode" in note for note in draft.warnings)
    case_enable(case=draft)
    OutboundGuard(monkeypatch)
    run = run_execute(
        run_id=run_create(suite=draft.suite, model_keys=["function:orders-model"], mode=Run.Mode.REPLAY).pk
    )
    result = CaseResult.objects.get(run=run, case=draft)
    assert result.status == "passed", result.reason
    assert [call["outcome"] for call in result.tool_calls] == ["mocked", "mocked"]


@pytest.mark.django_db(transaction=True)
def test_it_extracts_an_imported_conversation_into_cases_that_each_replay_their_turns_answers_with_no_model(
    mapped, shop, admin_client_api, scripted_model, monkeypatch
):
    conversation = conversation_from_mapped(mapped=mapped)
    scripted_model.play(segments_answer(("Where is order 1042", 0, 0), ("Where is order 7", 1, 1)))

    response = admin_client_api.post(
        "/api/extractions/", {"conversation": conversation.pk, "extraction_model": scripted_model.key}, format="json"
    )

    assert response.status_code == 201, response.data
    drafts = [Case.objects.get(pk=case["id"]) for case in response.data["cases"]]
    assert [(draft.name, draft.source, draft.enabled) for draft in drafts] == [
        ("Where is order 1042", "extracted", False), ("Where is order 7", "extracted", False)
    ]
    # Each draft's mocks and recording are its own turn's: a tool call, then the text after its result.
    for draft, order in zip(drafts, ("1042", "7"), strict=True):
        assert [json.loads(mock.result)["order_id"] for mock in draft.mocks.order_by("call_index")] == [order]
        [recording] = Recording.objects.filter(case=draft)
        assert recording.model == "function:orders-model"
        assert len(recording.entries) == 2
        assert ("Order 7 has shipped." in json.dumps(recording.entries)) == (order == "7")
        assert any("recorded on function:orders-model: run it in replay mode" in note for note in draft.warnings)
        case_enable(case=draft)
    OutboundGuard(monkeypatch)
    run = run_execute(
        run_id=run_create(suite=drafts[0].suite, model_keys=["function:orders-model"], mode=Run.Mode.REPLAY).pk
    )
    results = {result.case.name: result for result in CaseResult.objects.filter(run=run).select_related("case")}
    assert {name: result.status for name, result in results.items()} == {
        "Where is order 1042": "passed", "Where is order 7": "passed"
    }, {name: result.reason for name, result in results.items()}
    calls = results["Where is order 7"].tool_calls
    assert [(call["outcome"], json.loads(call["result"])["order_id"]) for call in calls] == [("mocked", "7")]
