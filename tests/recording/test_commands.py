"""`record_conversation` and `extract_cases`: draft ids alone on standard output, the story on standard error."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from agenthost.llm.scripted import Answer, Call
from cases.models import Case, Suite
from tests.recording.conftest import segments_answer

pytestmark = pytest.mark.django_db


def run(*args):
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_it_records_a_conversation_and_prints_the_draft_id(three_topics):
    out, err = run("record_conversation", str(three_topics.pk))

    case = Case.objects.get()
    assert out == f"{case.pk}\n"
    assert "Recorded 1 disabled draft(s) in suite 'Recorded: order-cancellation' (created for them)" in err
    assert f"#{case.pk} Recorded from {three_topics}" in err
    assert case.enabled is False


def test_it_records_into_the_suite_named(three_topics):
    suite = Suite.objects.create(name="Cancellations", agent=three_topics.agent)
    Suite.objects.create(name="Smoke", agent=three_topics.agent)

    run("record_conversation", str(three_topics.pk), "--suite", "Cancellations")

    assert Case.objects.get().suite == suite


def test_it_extracts_and_prints_one_id_per_line(three_topics, scripted_model):
    scripted_model.play(segments_answer(("Status", 0, 1), ("Cancel", 2, 2), ("Delivered", 3, 3)))

    out, _ = run("extract_cases", str(three_topics.pk), "--model", scripted_model.key)

    ids = [case.pk for case in Case.objects.order_by("pk")]
    assert out.split() == [str(pk) for pk in ids] and len(ids) == 3


def test_it_prints_the_warnings_for_the_reviewer(scripted_model, scripted_desk, talk):
    scripted_model.play(Answer(tool_calls=[Call("human_intervention_needed", {"reason": "upset"})]))
    conversation = talk(scripted_desk, "Get me a person")

    _, err = run("record_conversation", str(conversation.pk))

    assert "    warning: turn 0: its state changes (human_intervention_needed) were dropped" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("record_conversation", "999999"), "no conversation with id 999999"),
        (("record_conversation", "abc"), "must be a conversation id"),
        (("record_conversation", "ID", "--suite", "Nowhere"), "no suite 'Nowhere'"),
        (("extract_cases", "ID", "--model", "x:y"), "choose an extraction model: model 'x:y' is not configured"),
    ],
)
def test_it_fails_with_the_reason_and_stores_nothing(three_topics, args, message):
    args = [str(three_topics.pk) if arg == "ID" else arg for arg in args]

    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not Case.objects.exists()


def test_it_fails_when_the_extraction_model_answers_badly(three_topics, scripted_model):
    scripted_model.play('{"segments": []}')

    with pytest.raises(CommandError, match="AI extraction failed: the answer has no segments"):
        run("extract_cases", str(three_topics.pk), "--model", scripted_model.key)
