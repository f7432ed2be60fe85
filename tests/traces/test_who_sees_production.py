"""Issue 35, finding 4: a draft made from a production trace (the customer's messages, tool results, and a description
naming service, conversation key and trace id) is staff-only until a person enables it, and once enabled it names no
service, conversation key or trace id to members — through the cases API, the run page and the result page alike.
The conversation is posted to the real receiver by pydantic-ai's own instrumentation."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from agenthost.models import Agent, Conversation
from cases.models import Case
from cases.selectors import HIDDEN_TRACE
from recording.services import recording_create
from runs.models import CaseResult, Run
from tests.runs.conftest import CAREFUL, make_run  # noqa: F401 (fixture: run rows as a finished run leaves them)
from tests.traces.test_conversations import FIND_ORDER
from tests.traces.test_retention import received

pytestmark = pytest.mark.django_db(transaction=True)

SERVICE = "shop-production-eu"


@pytest.fixture
def draft(client, staff_token) -> Case:
    Agent.objects.create(name="shop", provider="scripted", model="scripted", functions=[FIND_ORDER])
    conversation = received(client, staff_token, SERVICE, "Where is order 1042? Mail ana@example.com")
    [case] = recording_create(conversation=conversation).cases
    assert not case.enabled
    assert SERVICE not in case.name, "a draft's name, shown wherever its runs are, names no service"
    return case


def identifiers(case: Case) -> list[str]:
    conversation = Conversation.objects.get(pk=case.source_conversation_id)
    return [conversation.trace_service, conversation.trace_key, *conversation.trace_ids]


def shown(body: dict) -> str:
    return "\n".join([body["name"], body["description"], *(str(warning) for warning in body["warnings"])])


def signed_in(user) -> APIClient:
    api = APIClient()
    api.force_login(user)
    return api


@pytest.fixture
def users(admin_user, member, outsider) -> dict[str, APIClient]:
    return {"admin": signed_in(admin_user), "member": signed_in(member), "outsider": signed_in(outsider)}


def listed(api: APIClient) -> set[int]:
    response = api.get("/api/cases/", {"page_size": 100})
    assert response.status_code == 200
    return {case["id"] for case in response.json()["results"]}


def test_it_shows_a_draft_from_a_trace_to_staff_only_through_the_api(draft, users):
    names = identifiers(draft)
    assert SERVICE in names and all(name in draft.description + str(draft.warnings) for name in names[1:])

    assert draft.pk in listed(users["admin"])
    staff_view = users["admin"].get(f"/api/cases/{draft.pk}/")
    assert staff_view.status_code == 200
    assert all(name in shown(staff_view.json()) for name in names), "staff review the draft against its trace"
    for kind in ("member", "outsider"):
        assert draft.pk not in listed(users[kind]), kind
        assert draft.pk not in {case["id"] for case in users[kind].get(
            "/api/cases/", {"search": "Recorded", "enabled": "false"}
        ).json()["results"]}, kind
        assert users[kind].get(f"/api/cases/{draft.pk}/").status_code == 404, kind
    assert APIClient().get(f"/api/cases/{draft.pk}/").status_code in (401, 403)


def test_it_shows_an_enabled_case_from_a_trace_to_members_without_service_key_or_trace_id(draft, users):
    names = identifiers(draft)
    Case.objects.filter(pk=draft.pk).update(enabled=True)

    for kind in ("member", "outsider"):
        assert draft.pk in listed(users[kind]), kind
        body = users[kind].get(f"/api/cases/{draft.pk}/").json()
        listed_body = next(case for case in users[kind].get("/api/cases/", {"page_size": 100}).json()["results"]
                           if case["id"] == draft.pk)
        for text in (shown(body), shown(listed_body)):
            assert HIDDEN_TRACE in text, kind
            for name in names:
                assert name not in text, (kind, name)
        assert body["turns"] == users["admin"].get(f"/api/cases/{draft.pk}/").json()["turns"], "the case itself"
    assert all(name in shown(users["admin"].get(f"/api/cases/{draft.pk}/").json()) for name in names)


@pytest.mark.parametrize("enabled", [False, True])
def test_it_agrees_on_the_run_and_result_pages(draft, users, make_run, enabled):  # noqa: F811
    names = identifiers(draft)
    Case.objects.filter(suite=draft.suite).exclude(pk=draft.pk).delete()
    # Named as drafts were before their names left the service out: the pages hide it all the same.
    Case.objects.filter(pk=draft.pk).update(name=f"Recorded from Imported from {SERVICE}")
    # Run while enabled; a draft disabled again is back to staff only.
    run = make_run(draft.suite, models=(CAREFUL,), status=Run.Status.FAILED, results=((CAREFUL, "failed"),))
    Case.objects.filter(pk=draft.pk).update(enabled=enabled)
    result = CaseResult.objects.get(run=run)
    run_url = reverse("runs:detail", kwargs={"run_id": run.pk})
    result_url = reverse("runs:result", kwargs={"run_id": run.pk, "result_id": result.pk})

    assert CaseResult.objects.get(run=run).case_name.endswith(SERVICE)
    staff_result = users["admin"].get(result_url)
    assert staff_result.status_code == 200
    assert SERVICE in staff_result.content.decode()
    assert SERVICE in users["admin"].get(run_url).content.decode(), "the failing row says what its case is for"
    for kind in ("member", "outsider"):
        page = users[kind].get(run_url)
        assert page.status_code == 200, kind
        for name in names:
            assert name not in page.content.decode(), (kind, name)
        answer = users[kind].get(result_url)
        if enabled:
            assert answer.status_code == 200, kind
            text = answer.content.decode()
            assert HIDDEN_TRACE in text, kind
            for name in names:
                assert name not in text, (kind, name)
        else:
            assert answer.status_code == 404, kind
