"""Recording and extraction as stored drafts: where they go, what they are called, and that a bad answer stores
nothing. The extraction model is the scripted one, so the test sees every request it received."""

from __future__ import annotations

import json

import pytest

from agenthost.llm.scripted import Fail
from cases.models import Case, Suite
from recording.services import (
    ExtractionModelUnavailable,
    RecordingError,
    extraction_create,
    recording_create,
)
from tests.recording.conftest import (
    CANCEL_1043,
    ROUTED_1042,
    SEEDED_STATE,
    THREE_TOPICS,
    WHERE_IS_1042,
    segments_answer,
)

pytestmark = pytest.mark.django_db

THREE_SEGMENTS = segments_answer(("Order status", 0, 1), ("Cancel an undelivered order", 2, 2), ("", 3, 3))


def test_it_stores_a_recording_as_a_disabled_draft_named_after_its_conversation(three_topics):
    drafts = recording_create(conversation=three_topics)

    (case,) = drafts.cases
    assert case.name == f"Recorded from {three_topics}"
    assert (case.enabled, case.source, case.source_conversation_id) == (False, "recorded", three_topics.pk)
    assert case.turns.count() == 4 and case.mocks.count() == 6
    assert set(case.assertions.values_list("type", flat=True)) == {"toolCalled", "stateEquals"}


def test_it_files_drafts_in_the_one_suite_that_tests_the_agent(three_topics):
    suite = Suite.objects.create(name="Cancellations", agent=three_topics.agent)

    drafts = recording_create(conversation=three_topics)

    assert (drafts.suite, drafts.suite_created) == (suite, False)
    assert drafts.cases[0].suite == suite and drafts.cases[0].entry_agent is None


def test_it_creates_a_suite_for_an_agent_that_has_none(three_topics):
    drafts = recording_create(conversation=three_topics)

    assert drafts.suite_created is True
    assert drafts.suite.name == "Recorded: order-cancellation" and drafts.suite.agent == three_topics.agent
    assert recording_create(conversation=three_topics).suite == drafts.suite, "the second recording finds it"


def test_it_asks_to_choose_when_several_suites_test_the_agent(three_topics):
    Suite.objects.create(name="Cancellations", agent=three_topics.agent)
    Suite.objects.create(name="Smoke", agent=three_topics.agent)

    with pytest.raises(RecordingError) as raised:
        recording_create(conversation=three_topics)

    assert str(raised.value) == (
        "choose a suite: 2 suites test agent order-cancellation ('Cancellations', 'Smoke')"
    )
    assert raised.value.field == "suite"
    assert not Case.objects.exists()


def test_it_starts_a_draft_in_another_agents_suite_with_the_conversations_agent(three_topics, order_agents):
    suite = Suite.objects.create(name="Router", agent=order_agents["order-router"])

    case = recording_create(conversation=three_topics, suite=suite).cases[0]

    assert case.suite == suite and case.entry_agent == three_topics.agent


def test_it_numbers_a_second_recording_of_the_same_conversation(three_topics):
    first = recording_create(conversation=three_topics).cases[0]
    second = recording_create(conversation=three_topics).cases[0]

    assert second.name == f"{first.name} (2)"


def test_it_refuses_a_conversation_without_turns(order_agents, talk):
    with pytest.raises(RecordingError, match="has no turns"):
        recording_create(conversation=talk(order_agents["order-router"]))
    assert not Suite.objects.exists() and not Case.objects.exists()


# --- Extraction ---------------------------------------------------------------------------------------------------


def test_it_splits_a_three_topic_conversation_into_three_named_drafts_with_earlier_state(three_topics, scripted_model):
    scripted_model.play(THREE_SEGMENTS)

    drafts = extraction_create(conversation=three_topics, model_key=scripted_model.key)

    status, cancel, delivered = drafts.cases
    assert [case.name for case in drafts.cases] == ["Order status", "Cancel an undelivered order", "Turns 3–3"]
    assert all(case.source == "extracted" and not case.enabled for case in drafts.cases)
    assert [list(case.turns.values_list("user_message", flat=True)) for case in drafts.cases] == [
        list(THREE_TOPICS[:2]), [CANCEL_1043], [THREE_TOPICS[3]],
    ]
    assert status.initial_state == SEEDED_STATE
    assert cancel.initial_state == {**SEEDED_STATE, "order_id": "1042", "order_status": "delivered"}
    assert delivered.initial_state == {**SEEDED_STATE, "order_id": "1043", "order_status": "cancelled"}
    state_assertions = [
        {item.params["key"]: item.params["value"] for item in case.assertions.filter(type="stateEquals")}
        for case in drafts.cases
    ]
    assert state_assertions == [
        {"order_id": "1042", "order_status": "delivered"},
        {"order_id": "1043", "order_status": "cancelled"},
        {"order_id": "1047", "order_status": "delivered"},
    ]
    assert [segment.as_dict() for segment in drafts.segments] == json.loads(THREE_SEGMENTS)["segments"][:2] + [
        {"name": "Turns 3–3", "firstTurn": 3, "lastTurn": 3}
    ]


def test_it_never_sends_the_extraction_model_tool_arguments_results_or_state(three_topics, scripted_model):
    scripted_model.play(THREE_SEGMENTS)

    extraction_create(conversation=three_topics, model_key=scripted_model.key)

    (request,) = scripted_model.requests
    sent = json.dumps(request.as_dict())
    for user_message in THREE_TOPICS:
        assert json.dumps(user_message)[1:-1] in sent
    for tool in ("track_order", "void_order", "util-email-handle_email_sender"):
        assert tool in sent
    withheld = [
        "order_id", "order_status", "customer_email",  # argument and state keys
        "bo@example.com",  # seeded state
        "delivered", "processing", "cancelled",  # state values and results
        "item-42", "gift wrap", "customer1043@example.com", "refund",  # tool results
        "Kind regards", "Order 1043 is now cancelled",  # the email's arguments
    ]
    assert [value for value in withheld if value in sent] == []


def test_it_stores_nothing_when_the_answer_is_rejected(three_topics, scripted_model):
    scripted_model.play(segments_answer(("Status", 0, 1), ("Rest", 3, 3)))

    with pytest.raises(RecordingError) as raised:
        extraction_create(conversation=three_topics, model_key=scripted_model.key)

    assert str(raised.value) == "AI extraction failed: segments 0 and 1 leave a gap: turns 2–2 are in no segment"
    assert not Case.objects.exists()
    assert not Suite.objects.exists(), "not even the suite it would have created"


def test_it_needs_no_model_for_a_one_turn_conversation(order_agents, agent_model, talk, scripted_model):
    agent_model.play(*ROUTED_1042)
    conversation = talk(order_agents["order-router"], WHERE_IS_1042, title="Where is order 1042?")

    drafts = extraction_create(conversation=conversation)

    assert [case.name for case in drafts.cases] == ["Where is order 1042?"]
    assert scripted_model.requests == []


def test_it_asks_for_an_extraction_model_when_none_is_given(three_topics, agent_model, settings):
    settings.AGENTTEST_EXTRACTION_MODEL = ""

    with pytest.raises(RecordingError) as raised:
        extraction_create(conversation=three_topics)

    assert str(raised.value).startswith("choose an extraction model (provider:model); configured: ")
    assert agent_model.key in str(raised.value)


def test_it_uses_the_configured_default_extraction_model(three_topics, scripted_model, settings):
    settings.AGENTTEST_EXTRACTION_MODEL = scripted_model.key
    scripted_model.play(THREE_SEGMENTS)

    assert len(extraction_create(conversation=three_topics).cases) == 3


def test_it_refuses_an_extraction_model_that_is_not_configured(three_topics):
    with pytest.raises(RecordingError) as raised:
        extraction_create(conversation=three_topics, model_key="nowhere:gpt-9")

    assert str(raised.value).startswith("choose an extraction model: model 'nowhere:gpt-9' is not configured")
    assert raised.value.field == "extraction_model"


def test_it_reports_an_extraction_model_that_does_not_answer(three_topics, scripted_model):
    scripted_model.play(Fail(code="rate_limited", message="slow down"))

    with pytest.raises(ExtractionModelUnavailable) as raised:
        extraction_create(conversation=three_topics, model_key=scripted_model.key)

    assert str(raised.value) == "AI extraction failed: the extraction model scripted:scripted did not answer: slow down"
    assert not Case.objects.exists()
