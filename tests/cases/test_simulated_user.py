"""A case's simulated user, as the API, files and the JSON Schema take it: one shape (cases/schema.py), bounded, and
every bad input a 400 naming its field that stores nothing."""

from __future__ import annotations

import json

import pytest

from cases.files import case_file
from cases.models import Case
from cases.schema import schema_problems
from cases.services import case_content, case_create, case_to_document
from tests.cases.test_admin import change_form

pytestmark = pytest.mark.django_db

SIMULATED_USER = {
    "persona": "A customer in a hurry who answers in short sentences.",
    "goal": "Get order 1043 cancelled.",
    "facts": {"order number": "1043"},
    "max_turns": 6,
    "end_when": [{"type": "toolCalled", "params": {"function": "void_order"}}],
}


def simulated(case_document, **user):
    return case_document(
        turns=[],
        simulated_user={**SIMULATED_USER, **user},
        assertions=[
            {"type": "goalReached", "params": {}},
            {"type": "toolCalled", "params": {"function": "void_order"}},
        ],
    )


def post(client, suite, document):
    return client.post("/api/cases/", {"suite": suite.pk, **document}, format="json")


def test_it_stores_a_case_played_only_by_a_simulated_user(admin_client_api, judged_suite, case_document):
    response = post(admin_client_api, judged_suite, simulated(case_document))

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["turns"] == []
    assert body["simulated_user"] == {**SIMULATED_USER, "model": ""}
    # The file carries it, and the published schema of case files accepts what export writes.
    written = case_file(Case.objects.get(pk=body["id"]))
    assert written["simulated_user"] == SIMULATED_USER and "turns" not in written  # its defaults left out
    assert schema_problems("case", written) == []


@pytest.mark.parametrize(
    ("user", "field", "message"),
    [
        ({"persona": "x" * 1_000_000}, "simulated_user.persona", "must be at most 4000 characters"),
        ({"max_turns": 0}, "simulated_user.max_turns", "must be a whole number from 1 to 50"),
        ({"max_turns": 10**6}, "simulated_user.max_turns", "must be a whole number from 1 to 50"),
        ({"goal": " "}, "simulated_user.goal", "must be a non-empty string"),
        ({"model": "gpt-4o"}, "simulated_user.model", "must be provider:model"),
        ({"model": "openai:no-such-model"}, "simulated_user.model", "'openai:no-such-model' is not a configured model"),
        (
            {"assertions": [{"type": "outputContains", "params": {"text": "x"}}]},
            "simulated_user.assertions",
            "turn-level assertions do not apply to generated turns",
        ),
        (
            {"end_when": [{"type": "toolCalled", "params": {"function": "refund_order"}}]},
            "simulated_user.end_when[0].params.function",
            "'refund_order' is not a function the agent under test can call",
        ),
        (
            {"end_when": [{"type": "llmJudge", "params": {"criterion": "x"}}]},
            "simulated_user.end_when[0].type",
            "must be one of stateEquals, toolCalled",
        ),
    ],
)
def test_it_refuses_a_bad_simulated_user_naming_the_field(
    admin_client_api, judged_suite, case_document, user, field, message
):
    response = post(admin_client_api, judged_suite, simulated(case_document, **user))

    assert response.status_code == 400
    errors = {error["field"]: error["message"] for error in response.json()["errors"]}
    assert field in errors and errors[field].startswith(message), errors
    assert not Case.objects.exists()


def test_it_refuses_goal_reached_at_a_turn_and_without_a_goal_or_judge(admin_client_api, suite, case_document):
    document = case_document(assertions=[{"type": "goalReached", "params": {}}])
    document["turns"][1]["assertions"] = [{"type": "goalReached", "params": {}}]

    response = post(admin_client_api, suite, document)

    assert response.status_code == 400
    errors = [(error["field"], error["message"].split(":")[0]) for error in response.json()["errors"]]
    assert errors == [
        ("turns[1].assertions[0].type", "goalReached judges the whole conversation"),
        ("turns[1].assertions[0].type", "goalReached needs a judge model, and suite 'Support' has none"),
        ("assertions[0].type", "goalReached needs a judge model, and suite 'Support' has none"),
        ("assertions[0].params.goal", "is required for goalReached in a case without a simulated_user"),
    ]


def test_it_refuses_a_simulated_user_without_a_model_to_play_it(admin_client_api, suite, case_document):
    document = simulated(case_document)
    document["assertions"] = [{"type": "toolCalled", "params": {"function": "void_order"}}]

    response = post(admin_client_api, suite, document)

    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "field": "simulated_user.model",
            "message": "no model plays the user: name one here, or set a judge model on suite 'Support' (the default)",
        }
    ]


def test_it_keeps_the_content_hash_of_every_scripted_case(judged_suite, case_document):
    scripted = case_create(suite=judged_suite, document=case_document())
    played = case_create(suite=judged_suite, document=simulated(case_document, max_turns=3) | {"name": "Played"})

    assert "simulated_user" not in case_content(case_to_document(case=scripted))
    assert case_content(case_to_document(case=played))["simulated_user"]["max_turns"] == 3


def test_it_edits_the_simulated_user_in_the_admin_naming_a_bad_field(admin_client, make_case):
    case = make_case(enabled=False)
    url = f"/admin/cases/case/{case.pk}/change/"

    refused = admin_client.post(url, change_form(case, simulated_user=json.dumps({**SIMULATED_USER, "max_turns": 0})))
    saved = admin_client.post(url, change_form(case, simulated_user=json.dumps(SIMULATED_USER)))

    assert refused.status_code == 200
    assert "simulated_user.max_turns: must be a whole number from 1 to 50" in refused.content.decode()
    assert saved.status_code == 302
    case.refresh_from_db()
    assert case.simulated_user == {**SIMULATED_USER, "model": ""}
