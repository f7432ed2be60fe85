"""AI extraction asks for structured output where the model supports it, parses free text where it does not, and
says so when the model refuses or is cut off — against the realistic stub, on a reasoning model."""

from __future__ import annotations

import pytest

from agenthost.llm.scripted import Answer
from agenthost.testing.openai_stub import OpenAIStub
from cases.models import Case
from recording.services import RecordingError, extraction_create
from tests.recording.conftest import segments_answer
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db

SEGMENTS = segments_answer(("Order status", 0, 1), ("Cancel an undelivered order", 2, 2), ("Cancel 1047", 3, 3))


@pytest.fixture
def stub(settings):
    with OpenAIStub(models=("gpt-5-mini",)) as running:
        settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": {
            "kind": "openai", "base_url": running.base_url, "api_key_env": "", "timeout": WAIT_SECONDS,
            "max_retries": 0,
            "models": [{"name": "gpt-5-mini", "accepts_temperature": False}],
        }}
        yield running


def test_it_asks_a_reasoning_model_for_the_segments_schema_without_a_temperature(three_topics, stub):
    stub.queue(SEGMENTS)

    drafts = extraction_create(conversation=three_topics, model_key="stub:gpt-5-mini")

    assert [case.name for case in drafts.cases] == ["Order status", "Cancel an undelivered order", "Cancel 1047"]
    (body,) = stub.requests
    assert "temperature" not in body
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema" and response_format["json_schema"]["name"] == "segments"
    assert response_format["json_schema"]["schema"]["required"] == ["segments"]


def test_it_parses_free_text_from_a_model_without_structured_output(three_topics, stub, settings):
    settings.AGENTTEST_PROVIDERS["stub"]["models"][0]["structured_output"] = False
    stub.queue(f"Here are the cases:\n{SEGMENTS}")

    drafts = extraction_create(conversation=three_topics, model_key="stub:gpt-5-mini")

    assert len(drafts.cases) == 3
    assert "response_format" not in stub.requests[0]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (Answer(refusal="I can't process this conversation."), "the model refused to answer: I can't process this"),
        (Answer('{"segments": [{"name": "Ord', finish_reason="length"), "cut off at the length limit"),
    ],
)
def test_it_stores_nothing_and_says_why_when_the_model_refuses_or_is_cut_off(three_topics, stub, answer, reason):
    stub.queue(answer)

    with pytest.raises(RecordingError) as raised:
        extraction_create(conversation=three_topics, model_key="stub:gpt-5-mini")

    prefix = "AI extraction failed: the extraction model stub:gpt-5-mini's answer is unusable: "
    assert str(raised.value).startswith(prefix)
    assert reason in str(raised.value)
    assert not Case.objects.exists()
