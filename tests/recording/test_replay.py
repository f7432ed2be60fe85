"""A recording that cannot replay its own source is a defect: every draft here is enabled and run, through the real run
service and the mock seam, against the model that produced its conversation — and must pass."""

from __future__ import annotations

import pytest
from django.core import mail

from agenthost.llm.scripted import Call
from agenttest_demo.agents import demo_conversations_create
from cases.models import Case, Suite
from cases.services import case_enable
from recording.services import extraction_create, recording_create
from runs.models import Run
from runs.services import RunError, run_create, run_execute
from tests.recording.conftest import answer_by_user_message, segments_answer

pytestmark = pytest.mark.django_db(transaction=True)

# The demo's models (agenttest_demo), for the two tests of the demo's own conversations: what its README shows.
CAREFUL, HASTY = "simulated:sim-careful", "simulated:sim-hasty"


def run_enabled(suite, model_key, cases):
    for case in cases:
        case_enable(case=case)
    run = run_execute(run_id=run_create(suite=suite, model_keys=[model_key]).pk)
    return run, {result.case_name: (result.status, result.reason) for result in run.results.all()}


def test_it_replays_every_demo_conversation_green_on_its_own_model(demo_agents, admin_user):
    conversations = [result.conversation for result in demo_conversations_create(owner=admin_user)]
    drafts = [recording_create(conversation=conversation) for conversation in conversations]
    suite = drafts[0].suite
    mail.outbox.clear()

    run, results = run_enabled(suite, CAREFUL, [draft.cases[0] for draft in drafts])

    assert results == {f"Recorded from {conversation}": ("passed", "") for conversation in conversations}
    assert run.status == Run.Status.PASSED
    assert mail.outbox == [], "the recorded confirmation email is answered by its mock, never sent again"


def test_it_replays_a_multi_turn_recording_and_each_extracted_case_green(three_topics, agent_model, scripted_model):
    recorded = recording_create(conversation=three_topics)
    scripted_model.play(segments_answer(("Order status", 0, 1), ("Cancel an order", 2, 2), ("Delivered order", 3, 3)))
    extracted = extraction_create(conversation=three_topics, model_key=scripted_model.key)

    run, results = run_enabled(recorded.suite, agent_model.key, [*recorded.cases, *extracted.cases])

    assert results == {
        f"Recorded from {three_topics}": ("passed", ""),
        "Order status": ("passed", ""),
        "Cancel an order": ("passed", ""),
        "Delivered order": ("passed", ""),
    }


README_STATUS = "Where is order #1042?"
README_CANCEL = "Please cancel order 1043, my email is ana@example.com"


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
    agent = demo_agents["order-cancellation"]
    agent.functions = [item for item in agent.functions if item["name"] == "lookup_order"]
    agent.save()
    refused = admin_client_api.post("/api/extractions/", extract, format="json")
    assert refused.status_code == 400
    [error] = refused.json()["errors"]
    fields = [
        "turns[0].assertions[1].params.function", "turns[0].assertions[2].params.function",
        "mocks[1].function_name", "mocks[2].function_name",
    ]
    assert [error["message"].count(f"{field}: ") for field in fields] == [1, 1, 1, 1]
    assert error["message"].count("callable functions") == 1 and error["message"].count("order-lookup") == 1
    assert error["message"].endswith(
        "callable functions (agents: order-router, order-cancellation, order-lookup): human_intervention_needed, "
        "lookup_order, response_to_user, route_to_agent, util-instruct-execute_template, "
        "util-routing-fallback_to_router"
    )


def test_it_replays_repeated_calls_a_stop_and_dropped_state_green(scripted_model, scripted_desk, desk_suite, talk):
    scripted_model.respond_with(
        answer_by_user_message(
            {
                "Check orders 1 and 2": (
                    [Call("track_order", {"order_id": "1"}), Call("track_order", {"order_id": "2"})],
                    "Order 1 has shipped, order 2 was delivered.",
                ),
                "Cancel order 1": ([Call("ghost_tool", {"x": 1}), Call("void_order", {"order_id": "1"})], ""),
                "I want a person": ([Call("human_intervention_needed", {"reason": "asked for a person"})], ""),
            }
        )
    )
    conversation = talk(scripted_desk, "Check orders 1 and 2", "Cancel order 1", "I want a person")
    case = recording_create(conversation=conversation, suite=desk_suite).cases[0]
    assert case.warnings and case.mocks.filter(stop=True).count() == 1

    run, results = run_enabled(desk_suite, scripted_model.key, [case])

    assert results == {case.name: ("passed", "")}


def test_it_replays_start_up_rule_calls_green_whole_and_sliced(scripted_model, scripted_desk, desk_suite, talk):
    scripted_desk.rules = [
        {"trigger": "conversation_started", "function": "track_order", "arguments": {"order_id": "7"}}
    ]
    scripted_desk.save()
    conversation_script = answer_by_user_message(
        {
            "Cancel it": ([Call("void_order", {"order_id": "7"})], "Order 7 was already delivered."),
            "And order 3?": ([Call("track_order", {"order_id": "3"})], "Order 3 is being processed."),
        }
    )
    scripted_model.respond_with(conversation_script)
    conversation = talk(scripted_desk, "Cancel it", "And order 3?")
    whole = recording_create(conversation=conversation, suite=desk_suite).cases[0]
    scripted_model.play(segments_answer(("Cancel", 0, 0), ("Look up", 1, 1)))
    _, sliced = extraction_create(conversation=conversation, suite=desk_suite, model_key=scripted_model.key).cases
    assert sliced.initial_state == {"order_id": "7", "order_status": "delivered"}

    scripted_model.respond_with(conversation_script)
    run, results = run_enabled(desk_suite, scripted_model.key, [whole, sliced])

    assert results == {whole.name: ("passed", ""), "Look up": ("passed", "")}


def test_it_keeps_drafts_out_of_runs_until_they_are_enabled(three_topics, agent_model):
    drafts = recording_create(conversation=three_topics)

    with pytest.raises(RunError, match="selects no enabled case"):
        run_create(suite=drafts.suite, model_keys=[agent_model.key])
    assert Suite.objects.get(pk=drafts.suite.pk).cases.filter(enabled=True).count() == 0
