"""POST /api/recordings/ and /api/extractions/: staff only, 201 with the drafts, 400 naming the input at fault."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from agenthost.llm.scripted import Fail
from cases.models import Case, Suite
from tests.recording.conftest import segments_answer

pytestmark = pytest.mark.django_db

ID = object()  # stands for the conversation's id in parametrized bodies
RECORDINGS = "/api/recordings/"
EXTRACTIONS = "/api/extractions/"


def test_it_mounts_both_endpoints_under_the_api():
    assert reverse("recording-api:recordings") == RECORDINGS
    assert reverse("recording-api:extractions") == EXTRACTIONS


def test_it_records_a_conversation_as_a_draft(admin_client_api, three_topics):
    response = admin_client_api.post(RECORDINGS, {"conversation": three_topics.pk}, format="json")

    assert response.status_code == 201, response.data
    case = Case.objects.get()
    assert response.data["suite"] == {"id": case.suite_id, "name": "Recorded: order-cancellation"}
    assert response.data["suite_created"] is True
    assert len(case.warnings) == 2 and all("left out" in note for note in case.warnings)
    assert response.data["cases"] == [
        {
            "id": case.pk,
            "name": f"Recorded from {three_topics}",
            "enabled": False,
            "source": "recorded",
            "source_conversation": three_topics.pk,
            "turns": 4,
            "mocks": 6,
            "assertions": case.assertions.count(),
            "warnings": case.warnings,
            "admin_url": f"/admin/cases/case/{case.pk}/change/",
        }
    ]


def test_it_takes_the_suite_by_id_or_name(admin_client_api, three_topics):
    Suite.objects.create(name="Other", agent=three_topics.agent)
    chosen = Suite.objects.create(name="Chosen", agent=three_topics.agent)

    by_id = admin_client_api.post(RECORDINGS, {"conversation": three_topics.pk, "suite": chosen.pk}, format="json")
    by_name = admin_client_api.post(RECORDINGS, {"conversation": three_topics.pk, "suite": "Chosen"}, format="json")

    assert by_id.status_code == by_name.status_code == 201
    assert by_id.data["suite"]["id"] == by_name.data["suite"]["id"] == chosen.pk


def test_it_extracts_one_draft_per_segment(admin_client_api, three_topics, scripted_model):
    scripted_model.play(segments_answer(("Order status", 0, 1), ("Cancel an order", 2, 2), ("", 3, 3)))

    response = admin_client_api.post(
        EXTRACTIONS, {"conversation": three_topics.pk, "extraction_model": scripted_model.key}, format="json"
    )

    assert response.status_code == 201, response.data
    assert [case["name"] for case in response.data["cases"]] == ["Order status", "Cancel an order", "Turns 3–3"]
    assert {case["source"] for case in response.data["cases"]} == {"extracted"}
    assert not any(case["enabled"] for case in response.data["cases"])
    assert response.data["segments"][2] == {"name": "Turns 3–3", "firstTurn": 3, "lastTurn": 3}


def test_it_rejects_a_bad_segmentation_with_400_and_stores_nothing(admin_client_api, three_topics, scripted_model):
    scripted_model.play("Sure! Turns 0-1 are about status, the rest about cancelling.")

    response = admin_client_api.post(
        EXTRACTIONS, {"conversation": three_topics.pk, "extraction_model": scripted_model.key}, format="json"
    )

    assert response.status_code == 400
    assert response.data == {
        "errors": [{"field": "extraction_model", "message": "AI extraction failed: the answer contains no JSON"}]
    }
    assert not Case.objects.exists() and not Suite.objects.exists()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        (
            "Order\x00status",
            "the name of segment 0 contains NUL (\\u0000) or a lone surrogate, which no case name may hold",
        ),
        ("x" * 201, "the name of segment 0 is 201 characters long; a case name has at most 200"),
    ],
)
def test_it_rejects_a_segment_name_no_case_may_have_as_a_bad_model_answer(
    admin_client_api, three_topics, scripted_model, name, why
):
    # A NUL once came back as a 400 on `conversation`, without the prefix every other bad model answer has.
    scripted_model.play(segments_answer((name, 0, 1), ("Cancel an order", 2, 3)))

    response = admin_client_api.post(
        EXTRACTIONS, {"conversation": three_topics.pk, "extraction_model": scripted_model.key}, format="json"
    )

    assert response.status_code == 400
    assert response.data == {"errors": [{"field": "extraction_model", "message": f"AI extraction failed: {why}"}]}
    assert not Case.objects.exists() and not Suite.objects.exists()


def test_it_keeps_a_long_segment_name_whole(admin_client_api, three_topics, scripted_model):
    name = "Ask where order 1042 is and when the parcel with the winter jackets will arrive"
    scripted_model.play(segments_answer((name, 0, 1), ("Cancel an order", 2, 3)))

    response = admin_client_api.post(
        EXTRACTIONS, {"conversation": three_topics.pk, "extraction_model": scripted_model.key}, format="json"
    )

    assert response.status_code == 201, response.data
    assert [case["name"] for case in response.data["cases"]] == [name, "Cancel an order"] and len(name) > 60


def test_it_answers_502_when_the_extraction_model_fails(admin_client_api, three_topics, scripted_model):
    scripted_model.play(Fail(code="timeout", message="the model timed out"))

    response = admin_client_api.post(
        EXTRACTIONS, {"conversation": three_topics.pk, "extraction_model": scripted_model.key}, format="json"
    )

    assert response.status_code == 502
    assert response.data["errors"][0]["message"].startswith("AI extraction failed: the extraction model")


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "conversation", "This field is required."),
        ({"conversation": "abc"}, "conversation", "must be a conversation id (a whole number from 1)"),
        ({"conversation": 999999}, "conversation", "no conversation with id 999999"),
        ({"conversation": ID, "suite": "Nowhere"}, "suite", "no suite 'Nowhere' (give a suite id or name)"),
        ({"conversation": ID}, "extraction_model", "choose an extraction model (provider:model); configured: "),
        (
            {"conversation": ID, "extraction_model": "x:y"},
            "extraction_model",
            "choose an extraction model: model 'x:y' is not configured",
        ),
    ],
)
def test_it_names_the_input_at_fault(admin_client_api, three_topics, settings, body, field, message):
    settings.AGENTTEST_EXTRACTION_MODEL = ""
    body = {key: three_topics.pk if value is ID else value for key, value in body.items()}

    response = admin_client_api.post(EXTRACTIONS, body, format="json")

    assert response.status_code == 400
    (error,) = response.data["errors"]
    assert error["field"] == field and error["message"].startswith(message)


def test_it_names_the_body_when_it_is_not_an_object(admin_client_api):
    response = admin_client_api.post(RECORDINGS, [1], format="json")

    assert response.status_code == 400
    (error,) = response.data["errors"]
    assert error["field"] == "document" and "Expected a dictionary" in error["message"]


def test_it_asks_to_choose_a_suite_when_several_test_the_agent(admin_client_api, three_topics):
    Suite.objects.create(name="A", agent=three_topics.agent)
    Suite.objects.create(name="B", agent=three_topics.agent)

    response = admin_client_api.post(RECORDINGS, {"conversation": three_topics.pk}, format="json")

    assert response.status_code == 400
    assert response.data["errors"] == [
        {"field": "suite", "message": "choose a suite: 2 suites test agent order-cancellation ('A', 'B')"}
    ]


@pytest.mark.parametrize("url", [RECORDINGS, EXTRACTIONS])
def test_it_refuses_members_with_403(member_client, three_topics, url):
    response = member_client.post(url, {"conversation": three_topics.pk}, format="json")

    assert response.status_code == 403
    assert response.data["detail"] == "Only staff users may record conversations or extract cases."
    assert not Case.objects.exists()


@pytest.mark.parametrize("url", [RECORDINGS, EXTRACTIONS])
def test_it_refuses_anonymous_requests(api_client, three_topics, url):
    assert api_client.post(url, {"conversation": three_topics.pk}, format="json").status_code in (401, 403)
    assert not Case.objects.exists()


def test_it_throttles_recording_and_extraction_together(admin_client_api):
    rate = django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["recording"]
    allowed = int(rate.split("/")[0])
    for index in range(allowed):
        url = RECORDINGS if index % 2 else EXTRACTIONS
        assert admin_client_api.post(url, {"conversation": 999999}, format="json").status_code == 400

    assert admin_client_api.post(RECORDINGS, {"conversation": 999999}, format="json").status_code == 429
    assert admin_client_api.post(EXTRACTIONS, {"conversation": 999999}, format="json").status_code == 429


def test_it_documents_both_endpoints_in_the_schema(admin_client_api):
    schema = admin_client_api.get("/api/schema/?format=json").json()

    recordings = schema["paths"][RECORDINGS]["post"]
    assert "Recorded: <agent>" in recordings["description"] and "choose a suite" in recordings["description"]
    assert "AI extraction failed" in schema["paths"][EXTRACTIONS]["post"]["description"]
