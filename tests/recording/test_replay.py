"""A recording that cannot replay its own source is a defect: every draft here is enabled and run, through the real run
service and the mock seam, against the model that produced its conversation — and must pass."""

from __future__ import annotations

import pytest
from django.core import mail

from agenthost.llm.scripted import Answer, Call
from agenttest_demo.agents import demo_conversations_create
from cases.models import Suite
from cases.services import case_enable
from recording.services import extraction_create, recording_create
from runs.models import Run
from runs.services import RunError, run_create, run_execute
from tests.recording.conftest import CAREFUL, segments_answer

pytestmark = pytest.mark.django_db(transaction=True)


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


def test_it_replays_a_multi_turn_recording_and_each_extracted_case_green(three_topics, scripted_model):
    recorded = recording_create(conversation=three_topics)
    scripted_model.play(segments_answer(("Order status", 0, 1), ("Cancel an order", 2, 2), ("Delivered order", 3, 3)))
    extracted = extraction_create(conversation=three_topics, model_key=scripted_model.key)

    run, results = run_enabled(recorded.suite, CAREFUL, [*recorded.cases, *extracted.cases])

    assert results == {
        f"Recorded from {three_topics}": ("passed", ""),
        "Order status": ("passed", ""),
        "Cancel an order": ("passed", ""),
        "Delivered order": ("passed", ""),
    }


def answer_by_user_message(answers):
    """A scripted model that answers each user message with its tool calls, then (after the results) its text — so
    the recording and every replay, in whatever order a run takes the cases, get the same answers."""

    def respond(request):
        user_message = [message for message in request.messages if message["role"] == "user"][-1]["content"]
        calls, text = answers[user_message]
        return text if request.messages[-1]["role"] == "tool" else Answer(tool_calls=calls)

    return respond


def test_it_replays_repeated_calls_a_stop_and_dropped_state_green(scripted_model, scripted_desk, desk_suite, talk):
    scripted_model.respond_with(
        answer_by_user_message(
            {
                "Check orders 1 and 2": (
                    [Call("lookup_order", {"order_id": "1"}), Call("lookup_order", {"order_id": "2"})],
                    "Order 1 has shipped, order 2 was delivered.",
                ),
                "Cancel order 1": ([Call("ghost_tool", {"x": 1}), Call("cancel_order", {"order_id": "1"})], ""),
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
        {"trigger": "conversation_started", "function": "lookup_order", "arguments": {"order_id": "7"}}
    ]
    scripted_desk.save()
    conversation_script = answer_by_user_message(
        {
            "Cancel it": ([Call("cancel_order", {"order_id": "7"})], "Order 7 was already delivered."),
            "And order 3?": ([Call("lookup_order", {"order_id": "3"})], "Order 3 is being processed."),
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


def test_it_keeps_drafts_out_of_runs_until_they_are_enabled(three_topics):
    drafts = recording_create(conversation=three_topics)

    with pytest.raises(RunError, match="selects no enabled case"):
        run_create(suite=drafts.suite, model_keys=[CAREFUL])
    assert Suite.objects.get(pk=drafts.suite.pk).cases.filter(enabled=True).count() == 0
