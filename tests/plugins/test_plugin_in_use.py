"""A plugin's tools and provider kind work wherever built-in ones do: an agent declares them by name, chat executes
them for real, a test run mocks or blocks them, a suite may extra-allow only the read-only one, a recording turns
their real results into mocks — and the plugin's model kind, named in the providers file, answers chat and runs."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start
from agenttest.checks import check_agenttest_settings
from cases.models import Case
from runs.models import CaseResult, Run
from tests.plugins.conftest import GREETING, LOOK_AND_NOTE, LOOKUP, RULES_MODEL, RULES_PROVIDER, SEND

pytestmark = pytest.mark.django_db
MOCK_IT = "mock it in the cases instead of allowing it"
T7 = {"ticket_id": "T-7", "status": "waiting", "owner": "agent7"}


def sent_notes(outbox) -> list[dict]:
    return [json.loads(line) for line in outbox.read_text().splitlines()] if outbox.exists() else []


def test_it_executes_both_plugin_tools_in_a_chat_on_the_plugins_model(member, member_client, ticket_agent, outbox):
    started = member_client.post("/api/conversations/", {"agent": ticket_agent.name}, format="json")
    assert started.status_code == 201, started.data
    conversation_id = started.data["id"]

    response = member_client.post(
        f"/api/conversations/{conversation_id}/messages/", {"text": LOOK_AND_NOTE}, format="json"
    )

    assert response.status_code == 200, response.data
    calls = response.data["tool_calls"]
    assert [(call["name"], call["outcome"]) for call in calls] == [(LOOKUP, "executed"), (SEND, "executed")]
    assert json.loads(calls[0]["result"]) == T7
    assert sent_notes(outbox) == [
        {"ticket_id": "T-7", "text": "Customer asks about T-7", "conversation": conversation_id}
    ]
    assert response.data["output"].startswith(GREETING)
    assert response.data["models"] == [RULES_MODEL]


def test_it_offers_a_declaring_agent_the_typed_schemas_and_runs_the_plugins_load_hook(sample_plugin, scripted_model):
    agent = Agent.objects.create(
        name="scripted-tickets", instruction="Tickets.", provider=scripted_model.provider_name,
        model=scripted_model.model, functions=[{"name": LOOKUP}, {"name": SEND}],
    )
    scripted_model.play("Hello.")

    conversation_send(conversation=conversation_start(agent=agent), text="Hi")

    # The plugin's agent-load hook ran too: the instruction carries its hint.
    assert scripted_model.requests[0].messages[0]["content"] == f"Tickets.\n{sample_plugin.TICKET_HINT}"
    offered = {tool["function"]["name"]: tool["function"] for tool in scripted_model.requests[0].tools}
    assert offered[LOOKUP] == {
        "name": LOOKUP,
        "description": "Look a support ticket up: its status and who owns it.",
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "ticket_id": {"type": "string", "pattern": "^T-\\d+$", "description": "The ticket id, e.g. T-7."},
                "include_history": {"type": "boolean", "default": False},
            },
            "required": ["ticket_id"],
        },
    }
    assert offered[SEND]["parameters"]["properties"] == {
        "ticket_id": {"type": "string", "description": "The ticket id, e.g. T-7."},
        "text": {"type": "string", "description": "What the note says to the ticket's owner."},
    }


def test_it_refuses_to_extra_allow_the_sending_plugin_tool_and_allows_the_read_only_one(
    admin_client_api, ticket_agent
):
    refused = admin_client_api.post(
        "/api/suites/", {"name": "Tickets", "agent": "tickets", "extra_allowed_functions": [SEND]}, format="json"
    )
    allowed = admin_client_api.post(
        "/api/suites/", {"name": "Tickets", "agent": "tickets", "extra_allowed_functions": [LOOKUP]}, format="json"
    )

    assert refused.status_code == 400
    assert {error["field"]: error["message"] for error in refused.json()["errors"]} == {
        "extra_allowed_functions[0]": f"{SEND} has effects outside agenttest; {MOCK_IT}"
    }
    assert allowed.status_code == 201, allowed.json()
    assert allowed.json()["extra_allowed_functions"] == [LOOKUP]


def test_it_records_the_real_results_of_plugin_tools_as_mocks(admin_client_api, ticket_agent, outbox):
    conversation = conversation_start(agent=ticket_agent)
    conversation_send(conversation=conversation, text=LOOK_AND_NOTE)

    response = admin_client_api.post("/api/recordings/", {"conversation": conversation.pk}, format="json")

    assert response.status_code == 201, response.data
    case = Case.objects.get(pk=response.data["cases"][0]["id"])
    mocks = [(mock.function_name, mock.arguments, json.loads(mock.result)) for mock in case.mocks.order_by("position")]
    assert mocks == [
        (LOOKUP, {"ticket_id": "T-7"}, T7),
        # The note's text is the model's wording: the mock matches on the ticket alone and the draft says so.
        (SEND, {"ticket_id": "T-7"}, {"sent": True, "ticket_id": "T-7"}),
    ]
    assert any("text" in warning for warning in case.warnings)


def test_it_names_the_kind_a_chat_needs_when_no_plugin_registered_it(member, member_client, settings):
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "ghost": {**RULES_PROVIDER, "kind": "ghost-llm", "models": [{"name": "g"}]},
    }
    agent = Agent.objects.create(name="ghostly", instruction="Boo.", provider="ghost", model="g")
    conversation = conversation_start(agent=agent, owner=member)

    response = member_client.post(f"/api/conversations/{conversation.pk}/messages/", {"text": "Hi"}, format="json")

    assert response.status_code == 502
    assert "provider 'ghost' has kind 'ghost-llm', which is not registered (known: " in response.data["detail"]
    assert "a plugin's kind is known once the plugin is loaded" in response.data["detail"]
    errors = [message.msg for message in check_agenttest_settings() if message.id == "agenttest.E001"]
    assert any("provider 'ghost': field 'kind' must be one of " in error for error in errors), errors


def test_it_lets_the_plugins_kind_check_its_own_option(settings, sample_plugin):
    settings.AGENTTEST_PROVIDERS = {"rules": {**RULES_PROVIDER, "greeting": "", "tone": "warm"}}

    errors = [message.msg for message in check_agenttest_settings() if message.id == "agenttest.E001"]

    assert errors == [
        "model providers: provider 'rules': unknown field 'tone' (allowed for kind 'sample-rules': api_key_env, "
        "base_url, greeting, kind, max_concurrency, max_retries, models, timeout)",
        "model providers: provider 'rules': field 'greeting' must be a non-empty string, got ''",
    ]


# A run: the harness's interception applies to plugin tools as to built-in ones.


def run_suite(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("run_suite", *args, stdout=out, stderr=err, no_color=True)
    except SystemExit as exc:
        return int(exc.code), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def case_document(name: str, mocks: list[dict]) -> dict:
    return {
        "name": name,
        "turns": [{"user_message": LOOK_AND_NOTE, "assertions": [
            {"type": "toolCalled", "params": {"function": LOOKUP, "arguments": {"ticket_id": "T-7"}}},
        ]}],
        "mocks": mocks,
    }


@pytest.mark.django_db(transaction=True)
def test_it_mocks_plugin_tools_in_a_run_and_blocks_the_unmocked_one(admin_client_api, ticket_agent, outbox):
    suite = admin_client_api.post("/api/suites/", {"name": "Tickets", "agent": "tickets"}, format="json").json()
    lookup_mock = {"function_name": LOOKUP, "result": '{"ticket_id": "T-7", "status": "closed"}'}
    send_mock = {"function_name": SEND, "result": '{"sent": true}'}
    documents = (case_document("both mocked", [lookup_mock, send_mock]), case_document("note unmocked", [lookup_mock]))
    for document in documents:
        created = admin_client_api.post("/api/cases/", {"suite": suite["id"], **document}, format="json")
        assert created.status_code == 201, created.json()

    code, out, err = run_suite("Tickets", "--models", RULES_MODEL, "--inline")

    run = Run.objects.get()
    results = {result.case_name: result for result in CaseResult.objects.filter(run=run)}
    both, unmocked = results["both mocked"], results["note unmocked"]
    assert [(call["name"], call["outcome"]) for call in both.tool_calls] == [(LOOKUP, "mocked"), (SEND, "mocked")]
    assert both.status == CaseResult.Status.PASSED, both.reason
    assert [(call["name"], call["outcome"]) for call in unmocked.tool_calls] == [(LOOKUP, "mocked"), (SEND, "blocked")]
    assert unmocked.status == CaseResult.Status.FAILED
    assert sent_notes(outbox) == [], "neither the mocked nor the blocked note was sent"
    # The plugin's kind answered the run: the reply is its greeting over the mocked result.
    assert both.transcript[-1]["content"].startswith(GREETING)
    assert (code, err) == (1, "")
    assert {both.model, unmocked.model} == {RULES_MODEL}


@pytest.mark.django_db(transaction=True)
def test_it_errors_a_run_on_a_kind_no_plugin_registered_naming_it(settings, admin_client_api, ticket_agent):
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "ghost": {**RULES_PROVIDER, "kind": "ghost-llm", "models": [{"name": "g"}]},
    }
    suite = admin_client_api.post("/api/suites/", {"name": "Tickets", "agent": "tickets"}, format="json").json()
    document = case_document("looks up", [{"function_name": LOOKUP, "result": "{}"}])
    assert admin_client_api.post("/api/cases/", {"suite": suite["id"], **document}, format="json").status_code == 201

    code, out, err = run_suite("Tickets", "--models", "ghost:g", "--inline")

    [result] = CaseResult.objects.all()
    assert result.status == CaseResult.Status.ERROR
    assert "provider 'ghost' has kind 'ghost-llm', which is not registered" in result.reason
    assert code == 2
