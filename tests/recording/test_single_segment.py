"""Issue 16, item 6: an extraction whose segmentation cuts nothing says so — on the draft, in the API answer, on the
page it leads to and in the command's output — instead of quietly making a near-copy of a recording."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from agenthost.testing.fixtures import ScriptedModel
from recording.services import extraction_create
from tests.recording.conftest import (
    ITEMS_OF_1042,
    ORDER_ANSWERS,
    WHERE_IS_1042,
    answer_by_user_message,
    segments_answer,
)

pytestmark = pytest.mark.django_db

SCRIPTED = ScriptedModel.key
NOTE_START = "the extraction model {model} found a single user goal across all {turns} turns"


@pytest.fixture
def one_topic(order_agents, agent_model, scripted_model, talk):
    """Two turns about one order, and an extraction model that keeps them together."""
    agent_model.respond_with(answer_by_user_message(ORDER_ANSWERS))
    scripted_model.play(segments_answer(("Where is my order #1042", 0, 1)))
    return talk(order_agents["order-cancellation"], WHERE_IS_1042, ITEMS_OF_1042)


def test_it_warns_when_the_segmentation_of_a_one_topic_conversation_is_a_single_segment(one_topic):
    drafts = extraction_create(conversation=one_topic, model_key=SCRIPTED)

    (case,) = drafts.cases
    note = NOTE_START.format(model=SCRIPTED, turns=2)
    assert drafts.warnings[0].startswith(note) and "the same as Record as draft" in drafts.warnings[0]
    assert case.warnings[0] == drafts.warnings[0], "the draft itself carries it, first, for the reviewer"


def test_it_says_nothing_of_the_kind_when_the_model_cut_the_conversation(three_topics, scripted_model):
    scripted_model.play(segments_answer(("Status", 0, 1), ("Cancel", 2, 2), ("Delivered", 3, 3)))

    drafts = extraction_create(conversation=three_topics, model_key=scripted_model.key)

    assert drafts.warnings == []
    assert not any("single user goal" in warning for case in drafts.cases for warning in case.warnings)


def test_it_says_nothing_for_a_one_turn_conversation_which_has_nothing_to_cut(
    order_agents, agent_model, scripted_model, talk
):
    agent_model.respond_with(answer_by_user_message(ORDER_ANSWERS))
    conversation = talk(order_agents["order-cancellation"], WHERE_IS_1042)

    drafts = extraction_create(conversation=conversation, model_key=SCRIPTED)

    assert drafts.warnings == [] and len(drafts.cases) == 1


def test_it_shows_the_warning_in_the_api_answer(admin_client_api, one_topic):
    response = admin_client_api.post(
        "/api/extractions/", {"conversation": one_topic.pk, "extraction_model": SCRIPTED}, format="json"
    )

    assert response.status_code == 201, response.data
    (draft,) = response.data["cases"]
    assert draft["warnings"][0].startswith(NOTE_START.format(model=SCRIPTED, turns=2))


def test_it_shows_the_warning_on_the_page_the_button_leads_to(client, admin_user, one_topic):
    client.force_login(admin_user)

    response = client.post(f"/conversations/{one_topic.pk}/extract/", {"extraction_model": SCRIPTED}, follow=True)

    text = response.content.decode()
    assert response.redirect_chain[-1][0].startswith("/admin/cases/case/")
    assert f"Note: {NOTE_START.format(model=SCRIPTED, turns=2)}" in text


def test_it_prints_the_warning_from_the_command(one_topic):
    err = io.StringIO()

    call_command("extract_cases", str(one_topic.pk), "--model", SCRIPTED, stdout=io.StringIO(), stderr=err)

    assert f"warning: {NOTE_START.format(model=SCRIPTED, turns=2)}" in err.getvalue()
