"""Conversation → draft case document: every mapping rule, on conversations scripted models made."""

from __future__ import annotations

import json

import pytest

from agenthost.functions import FunctionResult, register_function
from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message
from agenthost.services import conversation_send, conversation_start
from agenthost.transcripts import transcript_load
from recording.drafts import NothingToRecord, draft_document
from recording.services import recording_create
from runs.engine.case_session import CaseSession, registry
from tests.recording.conftest import CANCEL_1043, EMAIL, ROUTED_1042, SEEDED_STATE, THREE_TOPICS, WHERE_IS_1042

pytestmark = pytest.mark.django_db

GENERATED_TYPES = {"toolCalled", "stateEquals"}


@register_function(name="recording_test_escalate", description="Escalate to a person; ends the turn.")
def _escalate(context):
    return FunctionResult(content="Escalated; a person will answer.", stop=True)


def draft(conversation, **options):
    options.setdefault("name", "draft")
    options.setdefault("source", "recorded")
    options.setdefault("suite_agent", conversation.agent.name)
    return draft_document(transcript_load(conversation=conversation), **options)


def all_assertions(document):
    return [*document["assertions"], *(item for turn in document["turns"] for item in turn["assertions"])]


def tool_results(conversation, name):
    return list(
        Message.objects.filter(conversation=conversation, role="tool_result", function_name=name)
        .order_by("seq")
        .values_list("content", flat=True)
    )


@pytest.fixture
def repeated(scripted_model, scripted_desk, talk):
    """Turn 0 looks up two orders, turn 1 cancels one, turn 2 hands over to a person (state, but no mocked tool)."""
    scripted_model.play(
        Answer(tool_calls=[Call("track_order", {"order_id": "1"}), Call("track_order", {"order_id": "2"})]),
        "Order 1 has shipped, order 2 was delivered.",
        Answer(tool_calls=[Call("void_order", {"order_id": "1"})]),
        "Order 1 is cancelled.",
        Answer(tool_calls=[Call("human_intervention_needed", {"reason": "asked for a person"})]),
    )
    return talk(
        scripted_desk, "Check orders 1 and 2", "Cancel order 1", "I want a person", initial_state=dict(SEEDED_STATE)
    )


def test_it_opens_a_turn_per_user_message_with_no_assertion_on_what_the_agent_said(three_topics):
    document = draft(three_topics)

    assert [turn["user_message"] for turn in document["turns"]] == list(THREE_TOPICS)
    assert document["history"] == []
    assert {item["type"] for item in all_assertions(document)} <= GENERATED_TYPES
    assert all("text" not in item["params"] and "criterion" not in item["params"] for item in all_assertions(document))


def test_it_turns_each_real_tool_result_into_a_mock_with_the_result_verbatim(three_topics):
    document = draft(three_topics)

    mocks = document["mocks"]
    assert [mock["function_name"] for mock in mocks] == [
        "track_order", "track_order", "track_order", "void_order", "util-email-handle_email_sender",
        "track_order",
    ]
    lookups = [mock for mock in mocks if mock["function_name"] == "track_order"]
    assert [mock["result"] for mock in lookups] == tool_results(three_topics, "track_order")
    cancel = mocks[3]
    assert cancel["arguments"] == {"order_id": "1043"}, "the optional free-text reason is left out"
    assert cancel["call_index"] == 0
    assert cancel["result"] == '{"order_id": "1043", "cancelled": true, "refund": "full"}'
    email = mocks[4]
    assert email["arguments"] == {"to": "ana@example.com"} and email["call_index"] == 0
    assert email["result"] == tool_results(three_topics, "util-email-handle_email_sender")[0]


def test_it_keeps_the_identifying_arguments_of_a_function_recorded_more_than_once(repeated):
    document = draft(repeated)

    lookups = [mock for mock in document["mocks"] if mock["function_name"] == "track_order"]
    assert [(mock["arguments"], mock["call_index"]) for mock in lookups] == [({"order_id": "1"}, 0),
                                                                              ({"order_id": "2"}, 1)]
    assert [mock["result"] for mock in lookups] == tool_results(repeated, "track_order")
    (cancel,) = [mock for mock in document["mocks"] if mock["function_name"] == "void_order"]
    assert (cancel["arguments"], cancel["call_index"]) == ({"order_id": "1"}, 0), "a single call keeps its arguments"


def test_it_keeps_the_order_id_of_each_look_up_across_turns_and_agents(order_agents, agent_model, talk):
    # The README's conversation: order 1042 looked up, then 1043 looked up and cancelled. The lookup agent hands the
    # second turn back to the router, which hands it to the cancellation agent.
    agent_model.play(
        *ROUTED_1042,
        Answer(tool_calls=[Call("util-routing-fallback_to_router", {"reason": "a cancellation"})]),
        Answer(tool_calls=[Call("route_to_agent", {"agent_name": "order-cancellation"})]),
        Answer(tool_calls=[
            Call("track_order", {"order_id": "1043"}),
            Call("void_order", {"order_id": "1043"}),
            Call(EMAIL, {"to": "ana@example.com", "subject": "Order 1043 is cancelled", "body": "It is cancelled."}),
        ]),
        "Order 1043 is now cancelled.",
    )
    conversation = talk(
        order_agents["order-router"], "Where is order #1042?", "Please cancel order 1043, my email is ana@example.com"
    )

    [case] = recording_create(conversation=conversation).cases

    lookups = case.mocks.filter(function_name="track_order").order_by("call_index")
    assert [(mock.arguments, mock.call_index) for mock in lookups] == [({"order_id": "1042"}, 0),
                                                                         ({"order_id": "1043"}, 1)]
    assert [json.loads(mock.result)["order_id"] for mock in lookups] == ["1042", "1043"]


def test_it_warns_naming_the_mocks_of_repeated_calls_nothing_identifies(scripted_model, scripted_desk, talk):
    worded = ["the one I ordered on Monday", "the blue one from last week"]
    scripted_model.play(
        Answer(tool_calls=[Call("track_order", {"order_id": text}) for text in worded]), "Both have shipped.",
    )
    conversation = talk(scripted_desk, "Where are my two orders?")

    document = draft(conversation)

    assert [mock["arguments"] for mock in document["mocks"]] == [{}, {}]
    notes = [note for note in document["warnings"] if "identifies its call" in note]
    assert [note.split(" keeps")[0] for note in notes] == [
        "turn 0: mocks[0] (track_order, call #0)", "turn 0: mocks[1] (track_order, call #1)",
    ]
    assert all("order_id (free text)" in note for note in notes)


def test_it_asserts_each_mocked_call_with_its_recorded_arguments_in_its_turn(repeated):
    document = draft(repeated)

    turn_0, turn_1, turn_2 = (turn["assertions"] for turn in document["turns"])
    assert turn_0 == [
        {"type": "toolCalled", "params": {"function": "track_order", "arguments": {"order_id": "1"}}, "fatal": False},
        {"type": "toolCalled", "params": {"function": "track_order", "arguments": {"order_id": "2"}}, "fatal": False},
    ]
    assert turn_1 == [
        {"type": "toolCalled", "params": {"function": "void_order", "arguments": {"order_id": "1"}}, "fatal": False}
    ]
    assert turn_2 == [], "human_intervention_needed runs for real under test: no mock, so no generated assertion"


def test_it_puts_each_state_change_on_the_mock_of_the_call_that_made_it(repeated, three_topics):
    first, second = (mock for mock in draft(repeated)["mocks"] if mock["function_name"] == "track_order")
    assert first["state_writes"] == {"order_id": "1", "order_status": "shipped"}
    assert second["state_writes"] == {"order_id": "2", "order_status": "delivered"}

    # Turn 2 of the three topics wrote order_status twice, processing (lookup) then cancelled (cancel); the
    # confirmation email wrote nothing, so its mock carries nothing (it used to carry the cancellation's state).
    turn_2 = draft(three_topics)["mocks"][2:5]
    names = [mock["function_name"] for mock in turn_2]
    assert names == ["track_order", "void_order", "util-email-handle_email_sender"]
    assert [mock["state_writes"] for mock in turn_2] == [
        {"order_id": "1043", "order_status": "processing"},
        {"order_id": "1043", "order_status": "cancelled"},
        {},
    ]


def test_it_drops_the_state_changes_of_a_turn_without_a_mock_and_warns(repeated):
    document = draft(repeated)

    assert all("human_intervention_needed" not in mock["state_writes"] for mock in document["mocks"])
    (warning,) = document["warnings"]
    assert warning.startswith("turn 2: its state changes (human_intervention_needed) were dropped")
    assert "no mocked tool call" in warning and "came from human_intervention_needed" in warning
    keys = [item["params"]["key"] for item in document["assertions"] if item["type"] == "stateEquals"]
    assert "human_intervention_needed" not in keys


def test_it_makes_state_without_a_causing_message_initial_state(repeated):
    document = draft(repeated)

    assert document["initial_state"] == SEEDED_STATE


def test_it_asserts_each_written_key_with_its_last_value_at_case_level(repeated, three_topics):
    assert draft(repeated)["assertions"] == [
        {"type": "stateEquals", "params": {"key": "order_id", "value": "1"}, "fatal": False},
        {"type": "stateEquals", "params": {"key": "order_status", "value": "cancelled"}, "fatal": False},
    ]
    keys = {item["params"]["key"]: item["params"]["value"] for item in draft(three_topics)["assertions"]}
    assert keys == {"order_id": "1047", "order_status": "delivered"}, "seeded customer_email is not asserted"


def test_it_never_mocks_the_control_flow_functions(order_agents, agent_model, talk):
    agent_model.play(*ROUTED_1042)
    conversation = talk(order_agents["order-router"], WHERE_IS_1042)
    assert Message.objects.filter(conversation=conversation, function_name="route_to_agent").exists()

    document = draft(conversation)

    assert [mock["function_name"] for mock in document["mocks"]] == ["track_order"]
    assert document["entry_agent"] is None
    assert document["warnings"] == []


def test_it_replays_a_missing_function_as_a_stop_and_leaves_out_what_the_host_answered_itself(
    scripted_model, scripted_desk, talk
):
    scripted_model.play(
        Answer(tool_calls=[Call("store_hours")]),
        "We open at 9.",
        Answer(tool_calls=[Call("ghost_tool", {"x": 1}), Call("track_order", {"order_id": "5"})]),
        Answer(tool_calls=[Call("track_order", "{not json")]),
        "Sorry, something went wrong.",
    )
    conversation = talk(scripted_desk, "When do you open?", "Use the ghost", "Look it up")

    document = draft(conversation)

    hours, ghost = document["mocks"]
    assert hours == {
        "function_name": "store_hours", "arguments": {}, "call_index": 0, "result": '{"open": "9-17"}',
        "stop": False, "state_writes": {},
    }
    assert ghost["function_name"] == "ghost_tool" and ghost["stop"] is True
    assert ghost["result"] == "Can't find function implementation of ghost_tool"
    assert document["turns"][0]["assertions"] == [
        {"type": "toolCalled", "params": {"function": "store_hours"}, "fatal": False}
    ]
    assert any(w.startswith("turn 1: ghost_tool had no implementation") for w in document["warnings"])
    assert any(w.startswith("turn 2: the model's arguments for track_order were not a JSON object")
               for w in document["warnings"])


def test_it_marks_a_tool_result_that_ended_the_turn_as_a_stop(scripted_model, talk):
    agent = Agent.objects.create(
        name="escalator", instruction="Help.", provider="scripted", model="scripted",
        functions=[{"name": "recording_test_escalate"}, {"name": "track_order"}],
    )
    scripted_model.play(
        Answer(tool_calls=[Call("track_order", {"order_id": "4"})]),
        Answer(tool_calls=[Call("recording_test_escalate")]),
    )
    conversation = talk(agent, "Escalate order 4")

    lookup, stop = draft(conversation)["mocks"]

    assert lookup["stop"] is False
    assert stop["stop"] is True and stop["result"] == "Escalated; a person will answer."
    assert (lookup["state_writes"], stop["state_writes"]) == ({"order_id": "4", "order_status": "shipped"}, {})


def test_it_mocks_start_up_rule_calls_and_keeps_their_state(scripted_model, scripted_desk, talk):
    # Rules name functions case-insensitively; the recorded call carries the canonical name.
    scripted_desk.rules = [
        {"trigger": "conversation_started", "function": "TRACK_ORDER", "arguments": {"order_id": "7"}}
    ]
    scripted_desk.save()
    scripted_model.play(
        Answer(tool_calls=[Call("void_order", {"order_id": "7"})]),
        "Order 7 was already delivered.",
        Answer(tool_calls=[Call("track_order", {"order_id": "3"})]),
        "Order 3 is being processed.",
    )
    conversation = talk(scripted_desk, "Cancel it", "And order 3?", initial_state=dict(SEEDED_STATE))

    whole = draft(conversation)

    start, cancel, lookup = whole["mocks"]
    assert (start["function_name"], start["call_index"], start["arguments"]) == ("track_order", 0, {"order_id": "7"})
    assert start["state_writes"] == {"order_id": "7", "order_status": "delivered"}
    assert (lookup["call_index"], lookup["state_writes"]) == (1, {"order_id": "3", "order_status": "processing"})
    assert whole["initial_state"] == SEEDED_STATE
    assert {"type": "toolCalled", "params": {"function": "track_order", "arguments": {"order_id": "7"}},
            "fatal": False} in whole["assertions"]

    later = draft(conversation, first_turn=1)

    start, lookup = later["mocks"]
    assert start["state_writes"] == {}, "the state it wrote is already in the initial state"
    assert lookup["call_index"] == 1, "the start-up call comes first again when the case replays"
    assert later["initial_state"] == {**SEEDED_STATE, "order_id": "7", "order_status": "delivered"}
    assert [item["type"] for item in later["assertions"]] == ["stateEquals", "stateEquals"]


@pytest.mark.parametrize(
    "history",
    [
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, how can I help?"}],
        [{"role": "assistant", "content": "Welcome to order support."}],
        [{"role": "user", "content": "I have a question."}],
    ],
)
def test_it_keeps_pre_written_history_as_history(scripted_model, scripted_desk, talk, history):
    scripted_model.play(Answer(tool_calls=[Call("void_order", {"order_id": "1"})]), "Cancelled.")
    conversation = talk(scripted_desk, "Cancel order 1", history=history)

    document = draft(conversation)

    assert document["history"] == history
    assert [turn["user_message"] for turn in document["turns"]] == ["Cancel order 1"]
    assert [mock["function_name"] for mock in document["mocks"]] == ["void_order"]


def test_it_slices_turns_and_carries_the_earlier_state_in(three_topics):
    document = draft(three_topics, first_turn=2, last_turn=2)

    assert [turn["user_message"] for turn in document["turns"]] == [CANCEL_1043]
    assert document["initial_state"] == {**SEEDED_STATE, "order_id": "1042", "order_status": "delivered"}
    lookup = document["mocks"][0]
    assert (lookup["arguments"], lookup["call_index"]) == ({"order_id": "1043"}, 0), "indexes count within the slice"
    assert {item["params"]["key"]: item["params"]["value"] for item in document["assertions"]} == {
        "order_id": "1043", "order_status": "cancelled"
    }
    assert document["description"].endswith("turn 2.")


def test_it_starts_a_later_slice_with_the_entry_agent_and_the_earlier_turns_as_history(
    order_agents, agent_model, talk
):
    # Turn 1 began with order-lookup, where turn 0 had routed the conversation; a test of it starts at the router.
    agent_model.play(*ROUTED_1042, Answer(tool_calls=[Call("track_order", {"order_id": "1047"})]), "Item-47.")
    conversation = talk(order_agents["order-router"], WHERE_IS_1042, "What items are in order 1047?")
    answer = transcript_load(conversation=conversation).turns[0].answer

    document = draft(conversation, first_turn=1)

    assert document["entry_agent"] is None and answer
    assert document["history"] == [{"role": "user", "content": WHERE_IS_1042}, {"role": "assistant", "content": answer}]
    assert [mock["arguments"] for mock in document["mocks"]] == [{"order_id": "1047"}]
    assert document["warnings"] == [
        "turn 0 is this case's history (what the user said and the answers given); the case starts with "
        "order-router, as the conversation did, and only the calls of its own turns are mocked and asserted"
    ]


def test_it_names_the_entry_agent_when_the_suite_tests_another_one(order_agents, agent_model, talk):
    agent_model.play(*ROUTED_1042)
    conversation = talk(order_agents["order-router"], WHERE_IS_1042)

    assert draft(conversation, suite_agent="order-lookup")["entry_agent"] == "order-router"


def test_it_warns_when_nothing_could_be_asserted(scripted_model, scripted_desk, talk):
    scripted_model.play("Hello!")
    document = draft(talk(scripted_desk, "Hi"))

    assert document["assertions"] == [] and document["turns"][0]["assertions"] == []
    assert document["warnings"] == [
        "no assertions were generated (no turn called a mocked tool or changed the state): as it stands the case "
        "only checks that the conversation completes; add an assertion"
    ]


def test_it_refuses_a_conversation_without_turns_or_a_slice_outside_it(order_agents, talk, three_topics):
    with pytest.raises(NothingToRecord, match="no turns"):
        draft(talk(order_agents["order-router"]))
    with pytest.raises(NothingToRecord, match="turns 3–4 are not in the conversation"):
        draft(three_topics, first_turn=3, last_turn=4)


def test_it_is_a_disabled_draft_that_points_to_its_source(three_topics):
    document = draft(three_topics, name="Recorded from it", source="extracted")

    assert document["enabled"] is False
    assert (document["name"], document["source"]) == ("Recorded from it", "extracted")
    assert document["source_conversation"] == three_topics.pk


def test_it_warns_about_a_call_that_a_test_run_blocked(scripted_model, scripted_desk):
    scripted_model.play(Answer(tool_calls=[Call("void_order", {"order_id": "1"})]))
    conversation = conversation_start(
        agent=scripted_desk, on_created=lambda created: registry.add(created.pk, CaseSession(mocks=[]))
    )
    try:
        conversation_send(conversation=conversation, text="Cancel order 1")
    finally:
        registry.remove(conversation.pk)

    document = draft(conversation)

    (mock,) = document["mocks"]
    assert mock["result"] == "[agenttest] blocked unmocked tool: void_order" and mock["stop"] is True
    assert document["warnings"] == [
        "turn 0: void_order was blocked by a test run when the conversation ran; its mock replays the block "
        "message, which no real run of the tool would answer"
    ]


def test_it_gives_no_mock_to_a_call_the_host_refused_as_undeclared(scripted_model, scripted_desk, talk):
    # The model named a real side-effecting function the desk never declared: the host refused it without running
    # it, so a replay refuses it too — a mock for it would be refused at save (the agent cannot call it).
    scripted_model.play(
        Answer(
            tool_calls=[
                Call("util-email-handle_email_sender", {"to": "a@example.com", "subject": "s", "body": "b"}),
                Call("track_order", {"order_id": "1042"}),
            ]
        ),
        "Order 1042 has shipped.",
    )
    conversation = talk(scripted_desk, "Where is order 1042?")
    assert Message.objects.get(
        conversation=conversation, role="tool_result", function_name="util-email-handle_email_sender"
    ).outcome == "unavailable"

    document = draft(conversation)

    assert [mock["function_name"] for mock in document["mocks"]] == ["track_order"]
    assert any("does not declare" in warning for warning in document["warnings"])
