"""A recording that cannot replay its own source is a defect: every draft here is enabled and run, through the real run
service and the mock seam, against the model that produced its conversation — and must pass. A draft that breaks the
case rules (its agent no longer offers a recorded tool) is refused, each problem named once."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from agenthost.llm.scripted import Answer, Call
from cases.models import Case, Suite
from cases.services import case_enable
from recording.services import extraction_create, recording_create
from runs.models import Run
from runs.services import RunError, run_create, run_execute
from tests.extractions import assert_extraction_refused_once_the_tools_are_gone
from tests.recording.conftest import EMAIL, answer_by_user_message, segments_answer

pytestmark = pytest.mark.django_db(transaction=True)


def run_enabled(suite, model_key, cases):
    for case in cases:
        case_enable(case=case)
    run = run_execute(run_id=run_create(suite=suite, model_keys=[model_key]).pk)
    return run, {result.case_name: (result.status, result.reason) for result in run.results.all()}


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


ROUTED_STATUS = "Where is order #1042?"
ROUTED_CANCEL = "Please cancel order 1043, my email is ana@example.com"


def routed_order_support(request):
    """The order agents (order_agents) on one routed conversation: the router hands a cancellation to order-cancellation
    and anything else to order-lookup; order-lookup hands a cancellation back to the router and looks other orders
    up; order-cancellation looks the order up, cancels it and confirms by email. Each answers from the request alone,
    so the conversation and every replay of a slice of it get the same answers."""
    messages = request.chat_messages()
    last_user = max(index for index, message in enumerate(messages) if message["role"] == "user")
    text = messages[last_user]["content"]
    order = re.findall(r"\d{4}", text)[0]
    cancel = "cancel" in text.lower()
    called = [call["function"]["name"] for message in messages[last_user + 1 :] if message["role"] == "assistant"
              for call in message.get("tool_calls") or []]
    offered = {tool["function"]["name"] for tool in request.tools}
    if "route_to_agent" in offered:
        to = "order-cancellation" if cancel else "order-lookup"
        return Answer(tool_calls=[Call("route_to_agent", {"agent_name": to})])
    if cancel and "void_order" not in offered:
        return Answer(tool_calls=[Call("util-routing-fallback_to_router", {"reason": "a cancellation"})])
    if "track_order" not in called:
        calls = [Call("track_order", {"order_id": order})]
        if cancel:
            calls += [Call("void_order", {"order_id": order}),
                      Call(EMAIL, {"to": "ana@example.com", "subject": f"Order {order} is cancelled", "body": "Done."})]
        return Answer(tool_calls=calls)
    return f"Order {order} is cancelled." if cancel else f"Order {order} is delivered."


def test_it_extracts_a_routed_two_message_conversation_into_two_drafts_green_and_names_each_broken_rule_once(
    order_agents, agent_model, scripted_model, talk, admin_client_api
):
    # order-lookup answers the status, then cannot cancel, hands back to the router, which routes to
    # order-cancellation.
    agent_model.respond_with(routed_order_support)
    conversation = talk(order_agents["order-router"], ROUTED_STATUS, ROUTED_CANCEL)
    scripted_model.respond_with(lambda request: segments_answer(("Order status", 0, 0), ("Cancel an order", 1, 1)))
    extract = {"conversation": conversation.pk, "extraction_model": scripted_model.key}

    response = admin_client_api.post("/api/extractions/", extract, format="json")

    assert response.status_code == 201, response.json()
    status, cancel = Case.objects.filter(pk__in=[item["id"] for item in response.json()["cases"]]).order_by("pk")
    assert [list(case.turns.values_list("user_message", flat=True)) for case in (status, cancel)] == [
        [ROUTED_STATUS], [ROUTED_CANCEL]
    ]
    # Where a test of the cancellation starts: the router, with the status turn as history.
    assert cancel.entry_agent is None and cancel.suite.agent.name == "order-router"
    assert list(cancel.history.values_list("role", "content")) == [
        ("user", ROUTED_STATUS), ("assistant", "Order 1042 is delivered."),
    ]
    assert list(cancel.mocks.values_list("function_name", flat=True)) == ["track_order", "void_order", EMAIL]
    mail.outbox.clear()
    run, results = run_enabled(status.suite, agent_model.key, [status, cancel])
    assert results == {status.name: ("passed", ""), cancel.name: ("passed", "")}
    assert run.status == Run.Status.PASSED
    assert mail.outbox == [], "the recorded confirmation email is answered by its mock, never sent again"

    # Once the cancellation agent no longer offers those tools, the draft breaks the case rules: each problem is
    # named once, and what the agents can call is listed once, after them.
    assert_extraction_refused_once_the_tools_are_gone(
        admin_client_api,
        extract,
        agent=order_agents["order-cancellation"],
        keep="track_order",
        callable_functions=(
            "human_intervention_needed, response_to_user, route_to_agent, track_order, "
            "util-instruct-execute_template, util-routing-fallback_to_router"
        ),
    )
    assert Case.objects.count() == 2, "the refused extraction stores nothing"


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
