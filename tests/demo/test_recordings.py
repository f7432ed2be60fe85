"""The demo's conversations recorded and replayed, as its README and issue 16 tell a user: recorded, every demo
conversation passes on the model that played it and on the other simulated model (which words its cancellation email
its own way); played on sim-hasty, each replays green there; and the README's two-message conversation extracts into
two drafts green on both models, refused — each problem named once — once the cancellation agent drops its tools."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core import mail
from django.core.cache import cache

from agenthost.models import Agent
from agenttest_demo.agents import demo_conversations_create
from cases.models import Case
from cases.services import case_enable
from recording.services import recording_create
from runs.models import Run
from runs.services import run_create, run_execute
from tests.extractions import assert_extraction_refused_once_the_tools_are_gone

pytestmark = pytest.mark.django_db(transaction=True)

CAREFUL, HASTY = "simulated:sim-careful", "simulated:sim-hasty"
EMAIL = "util-email-handle_email_sender"
README_STATUS = "Where is order #1042?"
README_CANCEL = "Please cancel order 1043, my email is ana@example.com"


@pytest.fixture(autouse=True)
def _fresh_throttle_history(db) -> Iterator[None]:
    # Throttle counts live in the cache, keyed by user id, and ids repeat across tests.
    cache.clear()
    yield
    cache.clear()


def run_enabled(suite, model_keys, cases):
    for case in cases:
        case_enable(case=case)
    return run_execute(run_id=run_create(suite=suite, model_keys=model_keys).pk)


def by_case(run):
    return {result.case_name: (result.status, result.reason) for result in run.results.all()}


def test_it_replays_every_demo_conversation_green_on_its_own_model(demo_agents, admin_user):
    conversations = [result.conversation for result in demo_conversations_create(owner=admin_user)]
    drafts = [recording_create(conversation=conversation) for conversation in conversations]
    suite = drafts[0].suite
    mail.outbox.clear()

    run = run_enabled(suite, [CAREFUL], [draft.cases[0] for draft in drafts])

    assert by_case(run) == {f"Recorded from {conversation}": ("passed", "") for conversation in conversations}
    assert run.status == Run.Status.PASSED
    assert mail.outbox == [], "the recorded confirmation email is answered by its mock, never sent again"


def test_it_runs_the_recorded_demo_cases_green_on_both_simulated_models(demo_agents, admin_user):
    """Issue 16's Done-when: recorded from sim-careful, every demo conversation's case passes on both simulated models.
    sim-hasty makes the same calls there, as the demo agents' instructions ask, but words its cancellation email its
    own way; the mock recorded from sim-careful's email still answers it."""
    conversations = [result.conversation for result in demo_conversations_create(owner=admin_user)]
    cases = [recording_create(conversation=conversation).cases[0] for conversation in conversations]
    mail.outbox.clear()

    run = run_enabled(cases[0].suite, [CAREFUL, HASTY], cases)

    results = {(result.case_name, result.model): result for result in run.results.all()}
    assert {(name, model, result.status, result.reason) for (name, model), result in results.items()} == {
        (f"Recorded from {conversation}", model, "passed", "")
        for conversation in conversations for model in (CAREFUL, HASTY)
    }
    assert run.status == Run.Status.PASSED
    emails = {
        model: next(call for call in results[("Recorded from Cancel order 1043", model)].tool_calls
                    if call["name"] == EMAIL)
        for model in (CAREFUL, HASTY)
    }
    careful_email, hasty_email = (emails[model]["arguments"] for model in (CAREFUL, HASTY))
    assert careful_email["to"] == hasty_email["to"] == "ana@example.com"
    assert careful_email["body"] != hasty_email["body"], "the two models word the confirmation differently"
    assert {emails[model]["outcome"] for model in (CAREFUL, HASTY)} == {"mocked"}
    assert mail.outbox == []


def test_it_replays_every_demo_conversation_played_on_sim_hasty_green_on_sim_hasty(demo_agents, admin_user):
    Agent.objects.filter(name__in=demo_agents).update(model="sim-hasty")
    conversations = [result.conversation for result in demo_conversations_create(owner=admin_user)]
    cases = [recording_create(conversation=conversation).cases[0] for conversation in conversations]

    run = run_enabled(cases[0].suite, [HASTY], cases)

    assert {(result.case_name, result.status, result.reason) for result in run.results.all()} == {
        (f"Recorded from {conversation}", "passed", "") for conversation in conversations
    }


def test_it_extracts_the_readmes_two_message_conversation_into_two_drafts_green_on_both_models(
    demo_agents, talk, admin_client_api
):
    # The README's conversation: order-lookup answers the status, then cannot cancel, hands back to the router, which
    # routes to order-cancellation.
    conversation = talk(demo_agents["order-router"], README_STATUS, README_CANCEL)
    extract = {"conversation": conversation.pk, "extraction_model": CAREFUL}

    response = admin_client_api.post("/api/extractions/", extract, format="json")

    assert response.status_code == 201, response.json()
    status, cancel = Case.objects.filter(pk__in=[item["id"] for item in response.json()["cases"]]).order_by("pk")
    assert [list(case.turns.values_list("user_message", flat=True)) for case in (status, cancel)] == [
        [README_STATUS], [README_CANCEL]
    ]
    # Where a test of the cancellation starts: the router, with the status turn as history.
    assert cancel.entry_agent is None and cancel.suite.agent.name == "order-router"
    assert list(cancel.history.values_list("role", "content")) == [
        ("user", README_STATUS), ("assistant", conversation.messages.filter(role="assistant").exclude(content="")
                                  .order_by("seq").first().content),
    ]
    assert list(cancel.mocks.values_list("function_name", flat=True)) == [
        "lookup_order", "cancel_order", "util-email-handle_email_sender"
    ]
    mail.outbox.clear()
    for case in (status, cancel):
        case_enable(case=case)
    run = run_execute(run_id=run_create(suite=status.suite, model_keys=[CAREFUL, HASTY]).pk)
    assert sorted(run.results.values_list("case_name", "model", "status", "reason")) == sorted(
        (case.name, model, "passed", "") for case in (status, cancel) for model in (CAREFUL, HASTY)
    )
    assert mail.outbox == []

    # Once the cancellation agent no longer offers those tools, the draft breaks the case rules: each problem is
    # named once, and what the agents can call is listed once, after them.
    assert_extraction_refused_once_the_tools_are_gone(
        admin_client_api,
        extract,
        agent=demo_agents["order-cancellation"],
        keep="lookup_order",
        callable_functions=(
            "human_intervention_needed, lookup_order, response_to_user, route_to_agent, "
            "util-instruct-execute_template, util-routing-fallback_to_router"
        ),
    )
