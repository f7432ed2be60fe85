"""Reviewing cases in the admin: pages render, forms name the field they refuse, and the enable action checks first."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.messages import get_messages

from agenthost.models import Conversation
from agenthost.testing.fixtures import scripted_provider_config
from cases.models import Case, Suite, Turn
from cases.services import case_content_hash, case_to_document

pytestmark = pytest.mark.django_db


def change_url(case: Case) -> str:
    return f"/admin/cases/case/{case.pk}/change/"


def inline_rows(prefix: str, rows: list[dict[str, Any]], initial: int) -> dict[str, Any]:
    data = {
        f"{prefix}-TOTAL_FORMS": len(rows), f"{prefix}-INITIAL_FORMS": initial,
        f"{prefix}-MIN_NUM_FORMS": 0, f"{prefix}-MAX_NUM_FORMS": 1000,
    }
    for index, row in enumerate(rows):
        data.update({f"{prefix}-{index}-{key}": value for key, value in row.items() if value is not None})
    return data


def change_form(case: Case, **fields: Any) -> dict[str, Any]:
    """The POST of the case's change page as it is, with the case's own fields replaced by `fields`."""
    data = {
        "name": case.name, "suite": case.suite_id, "description": case.description, "type": case.type,
        "entry_agent": case.entry_agent_id or "", "priority": case.priority, "tags": ", ".join(case.tags),
        "initial_state": json.dumps(case.initial_state), "unmocked_policy": case.unmocked_policy,
        "source": case.source, "source_conversation": case.source_conversation_id or "",
    }
    if case.enabled:
        data["enabled"] = "on"
    data.update(fields)
    history = [
        {"id": item.pk, "case": case.pk, "position": item.position, "role": item.role, "content": item.content}
        for item in case.history.all()
    ]
    turns = [
        {"id": item.pk, "case": case.pk, "position": item.position, "user_message": item.user_message}
        for item in case.turns.all()
    ]
    mocks = [
        {
            "id": item.pk, "case": case.pk, "position": item.position, "function_name": item.function_name,
            "arguments": json.dumps(item.arguments) if item.arguments is not None else "",
            "call_index": item.call_index, "result": item.result, "stop": "on" if item.stop else None,
            "state_writes": json.dumps(item.state_writes),
        }
        for item in case.mocks.all()
    ]
    assertions = [
        {
            "id": item.pk, "case": case.pk, "position": item.position, "turn": item.turn_id or "",
            "type": item.type, "params": json.dumps(item.params), "fatal": "on" if item.fatal else None,
        }
        for item in case.assertions.all()
    ]
    for prefix, rows in (("history", history), ("turns", turns), ("mocks", mocks), ("assertions", assertions)):
        data.update(inline_rows(prefix, rows, initial=len(rows)))
    return data


def with_assertion(data: dict[str, Any], index: int, **changes: Any) -> dict[str, Any]:
    return {**data, **{f"assertions-{index}-{key}": value for key, value in changes.items()}}


def assertion_index(case: Case, kind: str) -> int:
    return [item.type for item in case.assertions.all()].index(kind)


def test_it_renders_the_changelists_and_the_add_pages(admin_client, make_case):
    make_case()

    for url in ("/admin/cases/case/", "/admin/cases/suite/", "/admin/cases/case/add/", "/admin/cases/suite/add/"):
        assert admin_client.get(url).status_code == 200, url


def test_it_renders_a_case_with_its_parts_readably(admin_client, suite, make_case):
    conversation = Conversation.objects.create(agent=suite.agent, title="Refund chat")
    case = make_case(source="recorded", source_conversation=conversation.pk, warnings=["Check the refund amount."])

    response = admin_client.get(change_url(case))

    assert response.status_code == 200
    page = response.content.decode()
    assert f'href="/admin/agenthost/conversation/{conversation.pk}/change/"' in page
    assert "Check the refund amount." in page
    # Short JSON in an edit box is one line, so a form of many small boxes stays short.
    arguments = re.search(r'<textarea name="mocks-0-arguments"[^>]*>\s*(.*?)</textarea>', page, re.S)
    assert arguments is not None and arguments.group(1) == "{&quot;order_id&quot;: &quot;1042&quot;}"


def test_it_offers_only_the_case_own_turns_for_an_assertion(admin_client, make_case):
    case = make_case()
    make_case(name="Another")

    response = admin_client.get(change_url(case))

    formsets = response.context["inline_admin_formsets"]
    [assertions] = [item for item in formsets if item.opts.model.__name__ == "Assertion"]
    offered = set(assertions.formset.form.base_fields["turn"].queryset)
    assert offered == set(Turn.objects.filter(case=case))


def test_it_saves_a_valid_edit(admin_client, make_case):
    case = make_case()
    index = assertion_index(case, "outputRegex")

    response = admin_client.post(
        change_url(case), with_assertion(change_form(case, priority=7), index, params='{"pattern": "delivered"}')
    )

    assert response.status_code == 302
    before = case.content_hash
    case.refresh_from_db()
    assert case.priority == 7
    assert case.assertions.get(type="outputRegex").params == {"pattern": "delivered"}
    # Results keep the hash of the case they ran: an edit in the inlines changes it, as one through the API does.
    assert case.content_hash == case_content_hash(case_to_document(case=case)) != before


@pytest.mark.parametrize(
    ("kind", "params", "shown"),
    [
        ("outputRegex", '{"pattern": "(unclosed"}', "params.pattern: does not compile"),
        ("toolCalled", "{}", "params.function: is required for toolCalled"),
        ("toolCalled", '{"function": "track_order", "args": {}}', "params.args: is not a parameter of toolCalled"),
        ("toolCalled", '{"function": ', "Not valid JSON"),
    ],
)
def test_it_shows_a_form_error_naming_the_field_and_saves_nothing(admin_client, make_case, kind, params, shown):
    case = make_case()
    before = case.assertions.get(type=kind).params

    response = admin_client.post(
        change_url(case), with_assertion(change_form(case), assertion_index(case, kind), params=params)
    )

    assert response.status_code == 200
    assert shown in response.content.decode()
    assert case.assertions.get(type=kind).params == before


def test_it_refuses_a_policy_other_than_block_in_the_case_form(admin_client, make_case):
    case = make_case()

    response = admin_client.post(change_url(case), change_form(case, unmocked_policy="execute"))

    assert response.status_code == 200
    assert Case.objects.get(pk=case.pk).unmocked_policy == "block"


def test_it_saves_an_enabled_case_that_fails_whole_case_rules_as_disabled(admin_client, make_case):
    case = make_case()

    response = admin_client.post(change_url(case), change_form(case, type="routing"), follow=True)

    case.refresh_from_db()
    assert (case.type, case.enabled) == ("routing", False)
    [message] = [str(item) for item in get_messages(response.wsgi_request) if item.level_tag == "warning"]
    assert "saved disabled" in message and "exactly one turn" in message


def changelist_action(admin_client, action: str, cases: list[Case]):
    return admin_client.post(
        "/admin/cases/case/", {"action": action, "_selected_action": [case.pk for case in cases]}, follow=True
    )


def test_it_enables_the_valid_cases_and_names_the_invalid_ones(admin_client, judged_suite, make_case):
    valid = make_case(judged_suite, name="Valid draft", enabled=False)
    judged = make_case(
        judged_suite, name="Judged draft", enabled=False,
        assertions=[{"type": "llmJudge", "params": {"criterion": "Kind"}}],
    )
    Suite.objects.filter(pk=judged_suite.pk).update(judge_model="")

    response = changelist_action(admin_client, "enable_selected", [valid, judged])

    valid.refresh_from_db()
    judged.refresh_from_db()
    assert (valid.enabled, judged.enabled) == (True, False)
    texts = {item.level_tag: str(item) for item in get_messages(response.wsgi_request)}
    assert texts["success"] == "Enabled 1 case(s)."
    assert "'Judged draft' (assertions[0].type: llmJudge needs a judge model" in texts["error"]
    assert "Valid draft" not in texts["error"]


def test_it_disables_the_selected_cases(admin_client, make_case):
    cases = [make_case(name="one"), make_case(name="two")]

    changelist_action(admin_client, "disable_selected", cases)

    assert not Case.objects.filter(enabled=True).exists()


def test_it_names_the_configured_models_when_a_suite_judge_model_is_unknown(admin_client, suite, settings):
    # Two models, and only these, so the list the page names is known.
    settings.AGENTTEST_PROVIDERS = {"scripted": scripted_provider_config(), "spare": scripted_provider_config()}
    data = {
        "name": suite.name, "agent": suite.agent_id, "judge_model": "scripted:brilliant",
        "extra_allowed_functions": "[]", "force_blocked_functions": "[]", "case_timeout_seconds": 120,
        "enabled": "on",
    }

    response = admin_client.post(f"/admin/cases/suite/{suite.pk}/change/", data)

    assert response.status_code == 200
    assert "configured: scripted:scripted, spare:scripted" in response.content.decode()
    suite.refresh_from_db()
    assert suite.judge_model == ""
