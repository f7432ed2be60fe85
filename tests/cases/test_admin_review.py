"""Issue 25, item 6, without a browser: the review panel's Enable and Disable (a staff-only, CSRF-checked POST through
case_enable and case_disable) and the assertion's typed fields (cases/admin_params.py) saving what they say."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.test import Client

from cases.models import Assertion, Case
from tests.cases.test_admin import assertion_index, change_form, change_url

pytestmark = pytest.mark.django_db


def enable_url(case: Case) -> str:
    return f"/admin/cases/case/{case.pk}/enable/"


def disable_url(case: Case) -> str:
    return f"/admin/cases/case/{case.pk}/disable/"


def said(response) -> list[tuple[str, str]]:
    return [(message.level_tag, message.message) for message in get_messages(response.wsgi_request)]


def enabled(case: Case) -> bool:
    case.refresh_from_db()
    return case.enabled


@pytest.fixture
def draft(make_case) -> Case:
    return make_case(enabled=False, source="recorded")


@pytest.fixture
def viewer(django_user_model):
    """Staff who may look at cases but not change them."""
    user = django_user_model.objects.create_user("vera", "vera@example.com", "vera-password-123", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_case"))
    return user


def test_it_enables_a_draft_and_says_so(admin_client, draft):
    response = admin_client.post(enable_url(draft))

    assert response.status_code == 302
    assert response["Location"] == change_url(draft)
    assert enabled(draft)
    assert said(response) == [("success", f"Enabled {draft.name!r}: runs of suite 'Support' include it.")]


def test_it_disables_an_enabled_case_and_says_so(admin_client, make_case):
    case = make_case()

    response = admin_client.post(disable_url(case))

    assert response.status_code == 302
    assert not enabled(case)
    assert said(response) == [("success", f"Disabled {case.name!r}: runs leave it out until it is enabled again.")]


def test_it_refuses_to_enable_a_case_that_fails_validation_and_says_why(admin_client, draft):
    draft.turns.all().delete()

    response = admin_client.post(enable_url(draft))

    assert response.status_code == 302
    assert not enabled(draft)
    [(level, message)] = said(response)
    assert level == "error"
    assert message.startswith(f"{draft.name!r} is still disabled: it cannot be enabled until this is fixed: turns")
    assert "at least one turn with a user message is required" in message


def test_it_warns_when_an_enabled_case_checks_nothing(admin_client, draft):
    draft.assertions.all().delete()

    response = admin_client.post(enable_url(draft))

    assert enabled(draft)
    levels = [level for level, _ in said(response)]
    assert levels == ["success", "warning"]


def test_it_enables_only_on_a_post(admin_client, draft):
    assert admin_client.get(enable_url(draft)).status_code == 405
    assert admin_client.get(disable_url(draft)).status_code == 405
    assert not enabled(draft)


@pytest.mark.parametrize("user", ["member", "outsider"])
def test_it_sends_a_signed_in_non_staff_user_to_the_admin_login(request, draft, user):
    client = Client()
    client.force_login(request.getfixturevalue(user))

    response = client.post(enable_url(draft))

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert not enabled(draft)


def test_it_sends_an_anonymous_visitor_to_the_admin_login(client, draft):
    response = client.post(enable_url(draft))

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert not enabled(draft)


def test_it_forbids_staff_who_may_only_view_cases(viewer, draft, make_case):
    client = Client()
    client.force_login(viewer)
    case = make_case(name="Enabled one")

    assert client.post(enable_url(draft)).status_code == 403
    assert client.post(disable_url(case)).status_code == 403
    assert not enabled(draft)
    assert enabled(case)
    # Nor is the button offered to them.
    assert b'form="case-switch-form"' not in client.get(change_url(draft)).content


def test_it_refuses_a_post_without_the_csrf_token(admin_user, draft):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    assert client.post(enable_url(draft)).status_code == 403
    assert not enabled(draft)


def test_it_offers_the_button_that_posts_with_the_token(admin_client, draft):
    page = admin_client.get(change_url(draft)).content.decode()

    assert f'<form id="case-switch-form" method="post" action="{enable_url(draft)}">' in page
    assert 'name="csrfmiddlewaretoken"' in page.split('id="case-switch-form"')[1].split("</form>")[0]
    assert '<button type="submit" form="case-switch-form" class="button default">Enable</button>' in page


@pytest.mark.parametrize("object_id", ["999999", "abc", "٣"])
def test_it_answers_a_missing_case_with_the_admins_not_found_redirect(admin_client, object_id):
    response = admin_client.post(f"/admin/cases/case/{object_id}/enable/")

    assert response.status_code == 302
    assert response["Location"] == "/admin/"
    assert Case.objects.filter(enabled=True).count() == 0


# --- Typed fields -------------------------------------------------------------------------------------------------


def assertion_form(response, pk: int):
    [formset] = [item.formset for item in response.context["inline_admin_formsets"] if item.opts.model is Assertion]
    [form] = [form for form in formset.forms if form.instance.pk == pk]
    return form


def typed(data: dict[str, Any], index: int, kind: str, **params: Any) -> dict[str, Any]:
    """The POST of the page as a browser sends it: the assertion's typed fields, its JSON box left as it was."""
    prefix = f"assertions-{index}-"
    data = {key: value for key, value in data.items() if not key.startswith(f"{prefix}param_")}
    data.update({f"{prefix}type": kind, f"{prefix}params_typed": "1"})
    data.update({f"{prefix}param_{name}": value for name, value in params.items() if value is not False})
    return data


def test_it_saves_the_params_the_typed_fields_say(admin_client, make_case, judged_suite):
    case = make_case(judged_suite)
    index = assertion_index(case, "outputRegex")
    data = typed(change_form(case), index, "llmJudge", criterion="Polite and says the order shipped", min_score="5")

    response = admin_client.post(change_url(case), data)

    assert response.status_code == 302
    saved = case.assertions.get(type="llmJudge")
    assert saved.params == {"criterion": "Polite and says the order shipped", "min_score": 5}


def test_it_reads_json_lists_and_checkboxes_from_their_fields(admin_client, make_case):
    case = make_case()
    index = assertion_index(case, "stateEquals")
    data = typed(change_form(case), index, "stateEquals", key="refund", value='{"amount": 12.5, "full": false}')
    other = assertion_index(case, "outputRegex")
    data = typed(data, other, "agentChain", agents="router, billing ,", mode="ordered")

    response = admin_client.post(change_url(case), data)

    assert response.status_code == 302
    assert case.assertions.get(type="stateEquals").params == {"key": "refund", "value": {"amount": 12.5, "full": False}}
    assert case.assertions.get(type="agentChain").params == {"agents": ["router", "billing"], "mode": "ordered"}


def test_it_keeps_a_stored_default_an_unchanged_field_still_says(admin_client, make_case):
    case = make_case()
    assertion = case.assertions.get(type="toolCalled")
    assertion.params = {"function": "track_order", "arguments": {}}
    assertion.save()
    index = assertion_index(case, "toolCalled")
    data = typed(change_form(case), index, "toolCalled", function="track_order", arguments="{}")

    admin_client.post(change_url(case), data)

    assert case.assertions.get(type="toolCalled").params == {"function": "track_order", "arguments": {}}


@pytest.mark.parametrize(
    ("params", "field", "shown"),
    [
        ({"criterion": "Polite", "min_score": "9"}, "param_min_score", "must be a whole number from 1 to 5"),
        ({"criterion": "Polite", "min_score": "many"}, "param_min_score", "Enter a whole number."),
        ({"criterion": "", "min_score": "4"}, "param_criterion", "is required for llmJudge"),
    ],
)
def test_it_shows_a_bad_typed_value_on_its_field_and_saves_nothing(
    admin_client, make_case, judged_suite, params, field, shown
):
    case = make_case(judged_suite)
    index = assertion_index(case, "outputRegex")
    before = case.assertions.get(type="outputRegex").params

    response = admin_client.post(change_url(case), typed(change_form(case), index, "llmJudge", **params))

    assert response.status_code == 200
    form = assertion_form(response, case.assertions.get(type="outputRegex").pk)
    assert shown in " ".join(form.errors[field])
    assert case.assertions.get(type="outputRegex").params == before
    assert not case.assertions.filter(type="llmJudge").exists()


def test_it_names_the_json_field_whose_text_does_not_parse(admin_client, make_case):
    case = make_case()
    index = assertion_index(case, "stateEquals")

    response = admin_client.post(
        change_url(case), typed(change_form(case), index, "stateEquals", key="refund", value="cancelled")
    )

    assert response.status_code == 200
    page = response.content.decode()
    assert "Not valid JSON" in page and "Text goes in double quotes" in page
    assert case.assertions.get(type="stateEquals").params == {"key": "refund_requested", "value": True}


def test_it_saves_the_json_box_when_asked_to(admin_client, make_case):
    case = make_case()
    index = assertion_index(case, "outputRegex")
    data = typed(change_form(case), index, "outputRegex", pattern="ignored")
    data.update({f"assertions-{index}-params_as_json": "on", f"assertions-{index}-params": '{"pattern": "delivered"}'})

    admin_client.post(change_url(case), data)

    assert case.assertions.get(type="outputRegex").params == {"pattern": "delivered"}


def test_it_opens_params_the_fields_cannot_show_as_json(admin_client, make_case):
    case = make_case()
    assertion = case.assertions.get(type="outputRegex")
    assertion.params = {"pattern": 42}
    assertion.save()

    response = admin_client.get(change_url(case))

    form = assertion_form(response, assertion.pk)
    assert form["params_as_json"].value() is True
    assert not form.typed()


def test_it_takes_tags_as_comma_separated_text(admin_client, make_case):
    case = make_case()

    page = admin_client.get(change_url(case)).content.decode()
    assert 'value="refunds, smoke"' in page

    admin_client.post(change_url(case), change_form(case, tags=" smoke, billing ,, late orders "))
    case.refresh_from_db()
    assert case.tags == ["smoke", "billing", "late orders"]


@pytest.mark.parametrize("value", ['"\\ud800"', '{"\\udc00": 1}', "1" * 5000])
def test_it_refuses_unstorable_json_in_a_typed_field_and_changes_nothing(admin_client, make_case, value):
    case = make_case()
    index = assertion_index(case, "stateEquals")

    response = admin_client.post(
        change_url(case), typed(change_form(case), index, "stateEquals", key="refund", value=value)
    )

    assert response.status_code == 200
    form = assertion_form(response, case.assertions.get(type="stateEquals").pk)
    assert form.errors["param_value"]
    assert case.assertions.get(type="stateEquals").params == {"key": "refund_requested", "value": True}
