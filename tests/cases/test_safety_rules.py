"""Suites and cases refuse what cannot be safe or true, through every door (API, admin, import, services):

- extra-allowed functions must be declared free of outside effects and callable by the suite's agents;
- force-blocked names are stripped like mock names and must name a function the suite's agents can call;
- mocks and toolCalled/toolNotCalled must name a function the case's agents (entry agent and sub-agents) can call;
- an enabled case with turns and no assertions is flagged, since it verifies nothing;
- non-finite numbers and over-deep JSON are a 400 / form error naming the field, never a false name clash.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost.functions import register_function
from agenthost.models import Agent
from agenthost.seams import CONTROL_FLOW_FUNCTIONS, FunctionContext
from cases.models import Case, Mock, Suite
from cases.services import case_create, suite_create, suite_update
from cases.validation.parts import NO_ASSERTIONS_WARNING
from cases.validation.problems import CaseValidationError, SuiteValidationError
from cases.validation.suites import validate_suite
from common.inputs import MAX_JSON_DEPTH
from tests.cases.conftest import SUPPORT_FUNCTIONS
from tests.cases.test_admin import change_form, change_url, changelist_action
from tests.properties import SUPPRESSED_WITH_FIXTURES

pytestmark = pytest.mark.django_db

EMAIL = "util-email-handle_email_sender"
TWILIO = "util-twilio-text_message"
UNSAID = "h5-test-says_nothing_about_effects"
MOCK_IT = "mock it in the cases instead of allowing it"


@register_function(name=UNSAID, description="A plugin tool that does not say whether it has outside effects.")
def _says_nothing(context: FunctionContext) -> str:
    return "done"


def errors(response) -> dict[str, str]:
    assert response.status_code == 400, response.content
    return {error["field"]: error["message"] for error in response.json()["errors"]}


def suite_body(**fields: Any) -> dict[str, Any]:
    return {"name": "Guarded", "agent": "support", **fields}


@pytest.fixture
def router(db, scripted_model) -> Agent:
    """A router that declares nothing, a sub-agent that looks orders up, and its own sub-agent with a static tool."""
    refunds = Agent.objects.create(
        name="refunds", instruction="Refunds.", provider="scripted", model="scripted",
        functions=[{"name": "issue_refund", "output": '{"refunded": true}'}, {"name": "crm_note"}],
    )
    desk = Agent.objects.create(
        name="desk", instruction="Orders.", provider="scripted", model="scripted",
        functions=[{"name": "track_order"}],
    )
    desk.sub_agents.set([refunds])
    router = Agent.objects.create(name="router", instruction="Route.", provider="scripted", model="scripted")
    router.sub_agents.set([desk])
    return router


# --- Item 2: extra-allowed functions ------------------------------------------------------------------------------


def test_it_refuses_to_extra_allow_a_side_effecting_function_through_the_api(admin_client_api, agent):
    response = admin_client_api.post(
        "/api/suites/", suite_body(extra_allowed_functions=["track_order", EMAIL, TWILIO]), format="json"
    )

    problems = errors(response)
    assert problems["extra_allowed_functions[1]"] == f"{EMAIL} has effects outside agenttest; {MOCK_IT}"
    assert "extra_allowed_functions[0]" not in problems
    # Not declared by the agent at all: refused for that, with what it can call.
    assert "'util-twilio-text_message' is not a function" in problems["extra_allowed_functions[2]"]
    assert not Suite.objects.filter(name="Guarded").exists()


def test_it_refuses_a_patch_that_extra_allows_a_side_effecting_function(admin_client_api, suite):
    response = admin_client_api.patch(
        f"/api/suites/{suite.pk}/", {"extra_allowed_functions": ["void_order"]}, format="json"
    )

    assert errors(response) == {"extra_allowed_functions[0]": f"void_order has effects outside agenttest; {MOCK_IT}"}
    suite.refresh_from_db()
    assert suite.extra_allowed_functions == []


def test_it_counts_a_function_that_does_not_say_as_side_effecting(agent):
    agent.functions = [*agent.functions, {"name": UNSAID}]
    agent.save()

    with pytest.raises(SuiteValidationError) as raised:
        suite_create(data=suite_body(extra_allowed_functions=[UNSAID]))

    [problem] = raised.value.problems
    assert problem.field == "extra_allowed_functions[0]"
    assert problem.message == (
        f"{UNSAID} does not declare whether it has effects outside agenttest, so it counts as having them; {MOCK_IT}"
    )


def test_it_allows_effect_free_and_static_functions_of_any_agent_a_case_can_reach(router):
    suite = suite_create(data={
        "name": "Routed", "agent": "router",
        "extra_allowed_functions": [" track_order", "issue_refund ", "human_intervention_needed"],
    })

    assert suite.extra_allowed_functions == ["track_order", "issue_refund", "human_intervention_needed"]
    # Declared without a static output and implemented nowhere: nothing says it is free of effects.
    with pytest.raises(SuiteValidationError) as raised:
        suite_update(suite=suite, data={"extra_allowed_functions": ["crm_note"]})
    assert str(raised.value) == (
        "extra_allowed_functions[0]: crm_note has no implementation declared free of effects outside agenttest; "
        f"{MOCK_IT}"
    )


def test_it_refuses_to_extra_allow_a_side_effecting_function_in_the_admin(admin_client, agent):
    data = {
        "name": "Guarded", "agent": agent.pk, "judge_model": "", "case_timeout_seconds": 120, "enabled": "on",
        "extra_allowed_functions": json.dumps([EMAIL]), "force_blocked_functions": "[]",
    }

    response = admin_client.post("/admin/cases/suite/add/", data)

    assert response.status_code == 200
    assert f"{EMAIL} has effects outside agenttest; {MOCK_IT}" in response.content.decode()
    assert not Suite.objects.filter(name="Guarded").exists()


def import_file(tmp_path, document: Any, *, raw: str | None = None) -> str:
    path = tmp_path / "import.json"
    path.write_text(raw if raw is not None else json.dumps(document))
    return str(path)


def failed_import(path: str) -> tuple[CommandError, str]:
    stderr = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("cases", "import", path, stderr=stderr)
    return raised.value, stderr.getvalue()


def test_it_refuses_to_import_a_suite_that_extra_allows_a_side_effecting_function(tmp_path, agent, case_document):
    path = import_file(tmp_path, {"suite": suite_body(extra_allowed_functions=[EMAIL]), "cases": [case_document()]})

    error, stderr = failed_import(path)

    assert "nothing was imported" in str(error)
    assert f"suite.extra_allowed_functions[0]: {EMAIL} has effects outside agenttest; {MOCK_IT}" in stderr
    assert not Suite.objects.filter(name="Guarded").exists() and not Case.objects.exists()


# --- Item 5: force-blocked functions ------------------------------------------------------------------------------


def test_it_stores_force_blocked_names_stripped_as_mock_names_are(admin_client_api, agent):
    response = admin_client_api.post(
        "/api/suites/", suite_body(force_blocked_functions=[" human_intervention_needed", "void_order\t"]),
        format="json",
    )

    assert response.status_code == 201, response.content
    assert response.json()["force_blocked_functions"] == ["human_intervention_needed", "void_order"]
    assert Suite.objects.get(name="Guarded").force_blocked_functions == ["human_intervention_needed", "void_order"]


def test_it_refuses_a_force_blocked_name_in_the_wrong_case_and_suggests_the_right_one(admin_client_api, agent):
    response = admin_client_api.post(
        "/api/suites/", suite_body(force_blocked_functions=["UTIL-INSTRUCT-EXECUTE_TEMPLATE", "track_ordr"]),
        format="json",
    )

    problems = errors(response)
    assert "did you mean 'util-instruct-execute_template'?" in problems["force_blocked_functions[0]"]
    assert "did you mean 'track_order'?" in problems["force_blocked_functions[1]"]
    # The whole list, so whoever fixes it need not go looking.
    callable_list = problems["force_blocked_functions[0]"].split("(agents: support): ")[1].split(", ")
    assert set(callable_list) == {*SUPPORT_FUNCTIONS, *CONTROL_FLOW_FUNCTIONS}
    assert not Suite.objects.filter(name="Guarded").exists()


def test_it_accepts_force_blocking_a_function_only_a_case_entry_agent_can_call(suite, router, billing_agent):
    # issue_refund belongs to a sub-agent of a sub-agent of router; the suite's own agent, support, routes nowhere.
    with pytest.raises(SuiteValidationError):
        suite_update(suite=suite, data={"force_blocked_functions": ["issue_refund"]})

    case_create(suite=suite, document={
        "name": "Enters through the router", "entry_agent": "router",
        "turns": [{"user_message": "Refund order 1", "assertions": [{"type": "toolCalled",
                                                                     "params": {"function": "issue_refund"}}]}],
    })
    suite = suite_update(suite=suite, data={"force_blocked_functions": ["issue_refund"]})

    assert suite.force_blocked_functions == ["issue_refund"]


def test_it_strips_force_blocked_names_saved_in_the_admin(admin_client, suite):
    data = {
        "name": suite.name, "agent": suite.agent_id, "judge_model": "", "case_timeout_seconds": 120, "enabled": "on",
        "extra_allowed_functions": '[" track_order "]', "force_blocked_functions": '[" void_order"]',
    }

    response = admin_client.post(f"/admin/cases/suite/{suite.pk}/change/", data)

    assert response.status_code == 302
    suite.refresh_from_db()
    assert (suite.extra_allowed_functions, suite.force_blocked_functions) == (["track_order"], ["void_order"])


def test_it_refuses_a_force_blocked_name_no_agent_can_call_in_the_admin(admin_client, suite):
    data = {
        "name": suite.name, "agent": suite.agent_id, "judge_model": "", "case_timeout_seconds": 120, "enabled": "on",
        "extra_allowed_functions": "[]", "force_blocked_functions": '["Void_Order"]',
    }

    response = admin_client.post(f"/admin/cases/suite/{suite.pk}/change/", data)

    assert response.status_code == 200
    assert "did you mean &#x27;void_order&#x27;?" in response.content.decode()
    suite.refresh_from_db()
    assert suite.force_blocked_functions == []


@settings(max_examples=60, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(
    name=st.sampled_from(sorted({*SUPPORT_FUNCTIONS, *CONTROL_FLOW_FUNCTIONS})),
    before=st.sampled_from(["", " ", "\t", "  \n"]),
    after=st.sampled_from(["", " ", "\t", "\n "]),
    upper=st.booleans(),
)
def test_it_accepts_exactly_the_callable_names_whatever_whitespace_surrounds_them(agent, name, before, after, upper):
    typed = before + (name.upper() if upper else name) + after

    problems = validate_suite(suite_body(force_blocked_functions=[typed]))

    if upper:
        [problem] = problems
        assert problem.field == "force_blocked_functions[0]"
        assert f"did you mean {name!r}?" in problem.message
    else:
        assert problems == []


# --- Item 16: mocks and tool assertions name callable functions ---------------------------------------------------


def test_it_refuses_mocks_and_tool_assertions_of_functions_the_agent_cannot_call(admin_client_api, suite,
                                                                                 case_document):
    document = case_document(
        mocks=[{"function_name": TWILIO, "result": "sent"}, {"function_name": " track_order ", "result": "{}"}],
        assertions=[{"type": "toolNotCalled", "params": {"function": "util-db-sql_select"}}],
    )
    document["turns"][0]["assertions"][0] = {"type": "toolCalled", "params": {"function": "Track_Order"}}

    problems = errors(admin_client_api.post("/api/cases/", {"suite": suite.pk, **document}, format="json"))

    assert set(problems) == {
        "mocks[0].function_name", "assertions[0].params.function", "turns[0].assertions[0].params.function",
    }
    assert problems["mocks[0].function_name"].startswith(
        f"'{TWILIO}' is not a function the agent under test can call; callable functions (agents: support): "
    )
    assert "track_order" in problems["mocks[0].function_name"].split("(agents: support): ")[1]
    assert "did you mean 'track_order'?" in problems["turns[0].assertions[0].params.function"]
    assert not Case.objects.exists()


def test_it_accepts_the_functions_of_every_sub_agent_the_entry_agent_can_route_to(router, case_document):
    suite = Suite.objects.create(name="Routed", agent=router)
    document = case_document(
        mocks=[{"function_name": "track_order", "result": "{}"}, {"function_name": "crm_note", "result": "ok"}],
        assertions=[{"type": "toolCalled", "params": {"function": "issue_refund"}}],
    )

    case = case_create(suite=suite, document=document)

    assert sorted(case.mocks.values_list("function_name", flat=True)) == ["crm_note", "track_order"]


def test_it_checks_a_case_against_its_own_entry_agent(suite, billing_agent, case_document):
    # "support" declares void_order; "billing", where this case starts, does not.
    document = case_document(mocks=[{"function_name": "void_order", "result": "cancelled"}])
    case_create(suite=suite, document={**document, "name": "Through support"})

    with pytest.raises(CaseValidationError) as raised:
        case_create(suite=suite, document={**document, "name": "Through billing", "entry_agent": "billing"})

    assert [problem.field for problem in raised.value.problems] == ["mocks[0].function_name"]
    assert "(agents: billing)" in raised.value.problems[0].message


def test_it_refuses_an_uncallable_mock_and_tool_assertion_in_the_admin_inlines(admin_client, make_case):
    case = make_case()
    data = change_form(case)
    mocks = data["mocks-TOTAL_FORMS"]
    data.update({
        "mocks-TOTAL_FORMS": mocks + 1, f"mocks-{mocks}-position": 5, f"mocks-{mocks}-function_name": TWILIO,
        f"mocks-{mocks}-result": "sent", f"mocks-{mocks}-state_writes": "{}",
    })
    index = data["assertions-TOTAL_FORMS"]
    data.update({
        "assertions-TOTAL_FORMS": index + 1, f"assertions-{index}-position": 9, f"assertions-{index}-type":
        "toolNotCalled", f"assertions-{index}-params": json.dumps({"function": "util-twilio-outbound_phone_call"}),
    })

    response = admin_client.post(change_url(case), data)

    assert response.status_code == 200
    page = response.content.decode()
    assert f"&#x27;{TWILIO}&#x27; is not a function the agent under test can call" in page
    assert "&#x27;util-twilio-outbound_phone_call&#x27; is not a function" in page
    assert not Mock.objects.filter(function_name=TWILIO).exists()
    assert case.assertions.count() == 3


def test_it_refuses_to_import_a_case_that_mocks_a_function_the_agent_cannot_call(tmp_path, suite, case_document):
    document = case_document(name="Texts", mocks=[{"function_name": TWILIO, "result": "sent"}])
    path = import_file(tmp_path, {"suite": {"name": suite.name}, "cases": [case_document(name="Fine"), document]})

    error, stderr = failed_import(path)

    assert "nothing was imported" in str(error)
    assert f"case 'Texts', cases[1].mocks[0].function_name: '{TWILIO}' is not a function" in stderr
    assert not Case.objects.exists()


# --- Item 11: a case that verifies nothing is flagged ------------------------------------------------------------


def bare(case_document, **fields: Any) -> dict[str, Any]:
    """A case with a turn and no assertion at all."""
    return case_document(turns=[{"user_message": "Hello", "assertions": []}], assertions=[], **fields)


def test_it_warns_in_the_api_when_an_enabled_case_has_no_assertions(admin_client_api, suite, case_document):
    created = admin_client_api.post("/api/cases/", {"suite": suite.pk, **bare(case_document)}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["warnings"] == [NO_ASSERTIONS_WARNING]
    case_url = f"/api/cases/{created.json()['id']}/"

    # Sent back as fetched, the warning is not stored as a reviewer's note.
    replaced = admin_client_api.put(case_url, created.json(), format="json")
    assert replaced.json()["warnings"] == [NO_ASSERTIONS_WARNING]
    assert Case.objects.get(pk=created.json()["id"]).warnings == []

    admin_client_api.post(f"{case_url}disable/")
    patched = admin_client_api.patch(case_url, {"description": "draft"}, format="json")
    assert patched.json()["warnings"] == []
    enabled = admin_client_api.post(f"{case_url}enable/")
    assert (enabled.status_code, enabled.json()["warnings"]) == (200, [NO_ASSERTIONS_WARNING])


def test_it_does_not_warn_about_a_case_with_an_assertion(admin_client_api, suite, case_document):
    created = admin_client_api.post("/api/cases/", {"suite": suite.pk, **case_document()}, format="json")

    assert (created.status_code, created.json()["warnings"]) == (201, [])


def test_it_warns_in_the_admin_when_a_case_with_no_assertions_is_saved_enabled(admin_client, suite, case_document):
    case = case_create(suite=suite, document=bare(case_document, name="Says hello"))

    response = admin_client.post(change_url(case), change_form(case), follow=True)

    warnings = [str(item) for item in get_messages(response.wsgi_request) if item.level_tag == "warning"]
    assert warnings == [f"'Says hello' is enabled, but {NO_ASSERTIONS_WARNING}."]
    assert Case.objects.get(pk=case.pk).enabled


def test_it_warns_when_the_enable_action_enables_cases_with_no_assertions(admin_client, suite, case_document):
    bare_one = case_create(suite=suite, document=bare(case_document, name="Bare one", enabled=False))
    bare_two = case_create(suite=suite, document=bare(case_document, name="Bare two", enabled=False))
    checked = case_create(suite=suite, document=case_document(name="Checked", enabled=False))

    response = changelist_action(admin_client, "enable_selected", [bare_one, bare_two, checked])

    texts = {item.level_tag: str(item) for item in get_messages(response.wsgi_request)}
    assert texts["success"] == "Enabled 3 case(s)."
    assert "'Bare one', 'Bare two'" in texts["warning"] and "verify nothing" in texts["warning"]
    assert "Checked" not in texts["warning"]


# --- Item 13: non-finite numbers and deep JSON --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"initial_state": {"total": float("inf")}}, "initial_state.total"),
        ({"initial_state": {"items": [1, float("nan")]}}, "initial_state.items[1]"),
        ({"mocks": [{"function_name": "track_order", "state_writes": {"total": float("-inf")}}]},
         "mocks[0].state_writes.total"),
        ({"mocks": [{"function_name": "track_order", "arguments": {"n": float("inf")}}]}, "mocks[0].arguments.n"),
        ({"assertions": [{"type": "stateEquals", "params": {"key": "total", "value": float("inf")}}]},
         "assertions[0].params.value"),
        # As JSON text, the way the admin and hand-edited files write it.
        ({"initial_state": '{"total": 1e999}'}, "initial_state.total"),
        ({"initial_state": '{"total": NaN}'}, "initial_state.total"),
    ],
)
def test_it_refuses_non_finite_numbers_naming_the_field_not_a_name_clash(suite, case_document, overrides, field):
    with pytest.raises(CaseValidationError) as raised:
        case_create(suite=suite, document=case_document(**overrides))

    [problem] = raised.value.problems
    assert (problem.field, problem.message) == (field, "must hold only finite numbers: NaN and Infinity (or 1e999) "
                                                      "are not JSON")
    assert not Case.objects.exists()


def test_it_answers_400_for_infinity_in_a_case_body(admin_client_api, suite, case_document):
    body = json.dumps({"suite": suite.pk, **case_document()}).replace('"customer": "Ada"', '"customer": 1e999')

    response = admin_client_api.generic("POST", "/api/cases/", body, content_type="application/json")

    problems = errors(response)
    assert list(problems) == ["initial_state.customer"]
    assert "already has a case named" not in json.dumps(problems)
    assert not Case.objects.exists()


def test_it_refuses_non_finite_and_too_deep_json_in_the_admin_text_fields(admin_client, make_case):
    case = make_case()
    deep = "[" * (MAX_JSON_DEPTH * 20) + "]" * (MAX_JSON_DEPTH * 20)

    response = admin_client.post(change_url(case), {
        **change_form(case, initial_state='{"total": 1e999}'), "mocks-0-state_writes": deep,
    })

    assert response.status_code == 200
    page = response.content.decode()
    assert "numbers must be finite" in page
    assert f"Nested more than {MAX_JSON_DEPTH} levels deep" in page
    case.refresh_from_db()
    assert case.initial_state == {"customer": "Ada"}


@pytest.mark.parametrize("number", ["Infinity", "NaN", "1e999"])
def test_it_refuses_to_import_a_file_with_non_finite_numbers(tmp_path, suite, case_document, number):
    text = json.dumps({"suite": {"name": suite.name}, "cases": [case_document(initial_state={"total": 0})]})
    path = import_file(tmp_path, None, raw=text.replace('"total": 0', f'"total": {number}'))

    error, stderr = failed_import(path)

    assert "nothing was imported" in str(error)
    assert "cases[0].initial_state.total: must hold only finite numbers" in stderr
    assert "already has a case named" not in stderr
    assert not Case.objects.exists()


def test_it_refuses_to_import_a_file_nested_too_deep_without_crashing(tmp_path, suite):
    path = import_file(tmp_path, None, raw='{"suite": {}, "cases": ' + "[" * 5000 + "]" * 5000 + "}")

    error, _ = failed_import(path)

    assert f"nests JSON more than {MAX_JSON_DEPTH} levels deep; nothing was imported" in str(error)


def test_it_refuses_a_document_nested_too_deep_through_the_services(suite, case_document):
    nested: Any = "bottom"
    for _ in range(MAX_JSON_DEPTH * 20):
        nested = [nested]

    with pytest.raises(CaseValidationError) as raised:
        case_create(suite=suite, document=case_document(initial_state={"deep": nested}))

    [problem] = raised.value.problems
    assert problem.field.startswith("initial_state.deep[0]") and "nests more than 64 levels deep" in problem.message
    assert not Case.objects.exists()


def test_it_reports_a_real_name_clash_as_one(suite, make_case, case_document):
    make_case(name="Taken")

    with pytest.raises(CaseValidationError) as raised:
        case_create(suite=suite, document=case_document(name="Taken"))

    assert str(raised.value) == "name: suite 'Support' already has a case named 'Taken'"

