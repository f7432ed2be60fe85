"""Issue 16, item 5: a recorded case survives a rephrasing. Its mocks and toolCalled assertions match the arguments
that identify a call — never the free text a model words anew each time — and each state change rides on the mock
of the call that made it. Every draft is run through the real run service and the mock seam. And what a recording
still catches: a model that loses the order of an earlier turn, or skips the calls an edited instruction no longer
asks for — two models of the order agents' scripted provider, careful and hasty, told apart by request.model."""

from __future__ import annotations

import json
import re

import pytest
from django.core import mail
from hypothesis import given
from hypothesis import strategies as st

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.transcripts import TranscriptCall
from cases.models import Suite
from cases.services import case_enable
from recording.drafts import IDENTIFYING_TEXT_MAX_LENGTH, identifying_arguments
from recording.services import recording_create
from runs.services import run_create, run_execute
from tests.recording.conftest import CANCEL_1043, EMAIL, ORDER_ANSWERS, answer_by_user_message

pytestmark = pytest.mark.django_db(transaction=True)

# Two more models of the order agents' scripted provider (the careful_and_hasty fixture).
CAREFUL, HASTY = "agents:careful", "agents:hasty"
CANCEL_MESSAGE = "Cancel order 77 please"


def run_enabled(suite, model_keys, cases):
    for case in cases:
        case_enable(case=case)
    return run_execute(run_id=run_create(suite=suite, model_keys=model_keys).pk)


def outcomes(result):
    return {(item["type"], str(item["expected"])): item["status"] for item in result.assertions}


def failed_assertions(result):
    return sorted(item["message"] for item in result.assertions if item["status"] != "passed")


@pytest.fixture
def mailing_desk(db, scripted_model):
    agent = Agent.objects.create(
        name="mailing-desk", instruction="Help.", provider="scripted", model="scripted",
        functions=[{"name": "track_order"}, {"name": "void_order"}, {"name": EMAIL}],
    )
    return agent, Suite.objects.create(name="Mailing desk", agent=agent, case_timeout_seconds=30)


def cancel_then_email(reason, subject, body, order_id="77", to="ana@example.com"):
    """A model that cancels and confirms by email, in the words given."""

    def respond(request):
        results = [message for message in request.messages if message["role"] == "tool"]
        if not results:
            return Answer(tool_calls=[Call("void_order", {"order_id": order_id, "reason": reason})])
        if len(results) == 1:
            return Answer(tool_calls=[Call(EMAIL, {"to": to, "subject": subject, "body": body})])
        return "Done: the order is cancelled and you have a confirmation."

    return respond


def test_it_leaves_free_text_out_of_a_recorded_mock_and_its_assertion_and_says_so(
    scripted_model, mailing_desk, talk
):
    agent, suite = mailing_desk
    scripted_model.respond_with(
        cancel_then_email("I changed my mind about it", "Order 77 is cancelled", "Hello,\n\nOrder 77 is cancelled.")
    )
    conversation = talk(agent, CANCEL_MESSAGE)

    case = recording_create(conversation=conversation, suite=suite).cases[0]

    mocks = {mock.function_name: mock for mock in case.mocks.all()}
    assert mocks["void_order"].arguments == {"order_id": "77"}
    assert mocks[EMAIL].arguments == {"to": "ana@example.com"}
    called = [item.params for item in case.assertions.filter(type="toolCalled")]
    assert called == [
        {"function": "void_order", "arguments": {"order_id": "77"}},
        {"function": EMAIL, "arguments": {"to": "ana@example.com"}},
    ]
    assert not any("Hello" in str(params) or "changed my mind" in str(params) for params in called)
    assert (
        "turn 0: the mock and the toolCalled assertion of void_order match on order_id only; left out: reason "
        "(optional), so a reworded call still matches"
    ) in case.warnings
    assert any(
        note.startswith(f"turn 0: the mock and the toolCalled assertion of {EMAIL} match on to only")
        and "body (free text), subject (free text)" in note
        for note in case.warnings
    )


def test_it_replays_a_recording_green_when_the_model_words_the_free_text_differently(
    scripted_model, mailing_desk, talk
):
    agent, suite = mailing_desk
    scripted_model.respond_with(
        cancel_then_email("I changed my mind about it", "Order 77 is cancelled", "Hello,\n\nOrder 77 is cancelled.")
    )
    case = recording_create(conversation=talk(agent, CANCEL_MESSAGE), suite=suite).cases[0]
    mail.outbox.clear()

    scripted_model.respond_with(
        cancel_then_email("no longer needed", "Your cancellation", "Dear customer, we cancelled order 77. Regards")
    )
    run = run_enabled(suite, [scripted_model.key], [case])

    (result,) = run.results.all()
    assert (result.status, result.reason) == ("passed", "")
    assert [call["outcome"] for call in result.tool_calls] == ["mocked", "mocked"]
    assert mail.outbox == [], "the reworded email is answered by its mock, never sent"


@pytest.mark.parametrize(
    ("changed", "blocked"),
    [({"order_id": "78"}, "void_order"), ({"to": "someone.else@example.com"}, EMAIL)],
)
def test_it_still_fails_a_replay_whose_identifying_argument_changed(
    scripted_model, mailing_desk, talk, changed, blocked
):
    agent, suite = mailing_desk
    scripted_model.respond_with(cancel_then_email("changed my mind", "Cancelled", "Cancelled."))
    case = recording_create(conversation=talk(agent, CANCEL_MESSAGE), suite=suite).cases[0]

    scripted_model.respond_with(cancel_then_email("changed my mind", "Cancelled", "Cancelled.", **changed))
    run = run_enabled(suite, [scripted_model.key], [case])

    (result,) = run.results.all()
    assert result.status == "failed"
    assert [(call["name"], call["outcome"]) for call in result.tool_calls if call["outcome"] != "mocked"] == [
        (blocked, "blocked")
    ], "a call for another order or another recipient is not the recorded call: it is blocked, never run"


def test_it_puts_the_cancellations_state_on_the_cancel_mock_not_the_email_mock(order_agents, agent_model, talk):
    """The reproduction: recording the demo's conversation "Cancel order 1043" (look up, cancel, email) put
    order_status=cancelled on the email mock, so a model that cancels without emailing failed stateEquals as well."""
    agent_model.respond_with(answer_by_user_message(ORDER_ANSWERS))
    conversation = talk(order_agents["order-cancellation"], CANCEL_1043)

    case = recording_create(conversation=conversation).cases[0]

    writes = {mock.function_name: mock.state_writes for mock in case.mocks.all()}
    assert writes == {
        "track_order": {"order_id": "1043", "order_status": "processing"},
        "void_order": {"order_id": "1043", "order_status": "cancelled"},
        EMAIL: {},
    }


@pytest.fixture
def careful_and_hasty(agent_model, settings):
    """agent_model's provider with two more models, CAREFUL and HASTY, playing one responder that tells them apart by
    request.model; the order agents' own model (agent_model.key) answers as the careful one."""
    provider = settings.AGENTTEST_PROVIDERS[agent_model.provider_name]
    both = [{"name": name, "input_price": 0.0, "output_price": 0.0, "label": name} for name in ("careful", "hasty")]
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        agent_model.provider_name: {**provider, "models": [*provider["models"], *both]},
    }
    return agent_model


def resolving_the_order(request):
    """An order agent asked to look an order up, or to cancel it (looking it up first). CAREFUL, and the agents' own
    model, take the order a message names or, for "cancel it", the order of an earlier turn; HASTY reads only the
    message it answers, looks up the order it names (none, for "cancel it") and, with no order found, gives up."""
    messages = request.chat_messages()
    last_user = max(index for index, message in enumerate(messages) if message["role"] == "user")
    said = [message["content"] for message in messages[: last_user + 1] if message["role"] == "user"]
    read = said[-1:] if request.model == "hasty" else said[::-1]
    order = next((number for text in read for number in re.findall(r"\d{4}", text)), "")
    this_turn = messages[last_user + 1 :]
    called = [call["function"]["name"] for message in this_turn if message["role"] == "assistant"
              for call in message.get("tool_calls") or []]
    results = [message["content"] for message in this_turn if message["role"] == "tool"]
    cancel = "cancel" in said[-1].lower()
    if "track_order" not in called:
        return Answer(tool_calls=[Call("track_order", {"order_id": order})])
    if not results[0].startswith("{"):
        return "I could not find that order."
    if cancel and "void_order" not in called:
        return Answer(tool_calls=[Call("void_order", {"order_id": order})])
    return f"Order {order} is {'cancelled' if cancel else json.loads(results[0])['status']}."


def test_it_fails_a_recorded_two_turn_case_on_a_model_that_loses_the_order_of_the_first_turn(
    order_agents, careful_and_hasty, talk
):
    """What recording still catches: "cancel it" refers to the order of the first turn; CAREFUL resolves it, HASTY
    looks up no order number — and since each recorded look-up keeps the order it was for (issue 36), that look-up is
    blocked rather than answered with order 1043's data, and the recorded cancellation never comes."""
    careful_and_hasty.respond_with(resolving_the_order)
    conversation = talk(order_agents["order-cancellation"], "Where is order 1043?", "Please cancel it")
    case = recording_create(conversation=conversation).cases[0]

    run = run_enabled(case.suite, [CAREFUL, HASTY], [case])

    results = {result.model: result for result in run.results.all()}
    assert (results[CAREFUL].status, results[CAREFUL].reason) == ("passed", "")
    assert results[HASTY].status == "failed"
    assert "void_order was not called; calls made: track_order" in failed_assertions(results[HASTY])
    lookups = [(call["arguments"].get("order_id"), call["outcome"]) for call in results[HASTY].tool_calls
               if call["name"] == "track_order"]
    assert lookups[0] == ("1043", "mocked")
    assert lookups[-1][0] != "1043" and lookups[-1][1] == "blocked", "the look-up for no order is never answered"
    assert not [call for call in results[HASTY].tool_calls if call["name"] == "void_order"]


ASKS_TO_LOOK_FIRST = (
    "You cancel orders. Look the order up first. After a cancellation, email the customer a confirmation."
)


def careful_or_as_told(request):
    """The cancellation of order 1043 (ORDER_ANSWERS): CAREFUL, and the agents' own model, look the order up, cancel
    it and confirm by email whatever the instruction says; HASTY looks it up and emails only when its instruction asks
    for that."""
    calls, text = ORDER_ANSWERS[CANCEL_1043]
    if request.messages[-1]["role"] == "tool":
        return text
    if request.model == "hasty":
        instruction = request.messages[0]["content"]
        asked = {"void_order", *(["track_order"] if "Look the order up first" in instruction else []),
                 *([EMAIL] if "email the customer" in instruction else [])}
        calls = [call for call in calls if call.name in asked]
    return Answer(tool_calls=calls)


def test_it_fails_the_recorded_cancellation_on_a_model_that_skips_calls_once_the_instruction_stops_asking_for_them(
    order_agents, careful_and_hasty, talk
):
    """An instruction edit caught by a recorded case: HASTY looks the order up and emails only because the
    cancellation agent's instruction says so. Drop those sentences and the recording made before the edit fails there
    — on the calls it skips — while CAREFUL, which checks on its own, still passes."""
    careful_and_hasty.respond_with(careful_or_as_told)
    cancellation = order_agents["order-cancellation"]
    cancellation.instruction = ASKS_TO_LOOK_FIRST
    cancellation.save(update_fields=["instruction"])
    case = recording_create(conversation=talk(cancellation, CANCEL_1043)).cases[0]
    cancellation.instruction = "You cancel orders."
    cancellation.save(update_fields=["instruction"])

    run = run_enabled(case.suite, [CAREFUL, HASTY], [case])

    results = {result.model: result for result in run.results.all()}
    assert (results[CAREFUL].status, results[CAREFUL].reason) == ("passed", "")
    assert failed_assertions(results[HASTY]) == [
        "track_order was not called; calls made: void_order",
        f"{EMAIL} was not called; calls made: void_order",
    ]


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=120)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@given(
    arguments=st.dictionaries(st.text(min_size=1, max_size=12), values, max_size=6),
    required=st.none() | st.lists(st.text(min_size=1, max_size=12), max_size=6),
)
def test_it_keeps_only_required_short_scalars_and_accounts_for_every_argument(arguments, required):
    parameters = None if required is None else {"type": "object", "properties": {}, "required": required}
    call = TranscriptCall(
        name="f", arguments=arguments, raw_arguments="", agent="a", trigger="model", tool_call_id="1", seq=0,
        parameters=parameters,
    )

    kept, left_out = identifying_arguments(call)

    assert set(kept) | {key for key, _ in left_out} == set(arguments)
    assert not set(kept) & {key for key, _ in left_out}
    for key, value in kept.items():
        assert value == arguments[key]
        assert required is None or key in required
        assert not isinstance(value, list | dict)
        if isinstance(value, str):
            assert len(value) <= IDENTIFYING_TEXT_MAX_LENGTH and not any(ch.isspace() for ch in value)
    for key, why in left_out:
        assert why in ("optional", "free text", "a list", "an object")
        assert (why == "optional") == (required is not None and key not in required)


def test_it_keeps_an_enum_value_even_when_it_has_spaces():
    call = TranscriptCall(
        name="f", arguments={"plan": "Pro annual", "note": "please hurry"}, raw_arguments="", agent="a",
        trigger="model", tool_call_id="1", seq=0,
        parameters={
            "properties": {"plan": {"enum": ["Pro annual", "Basic"]}, "note": {}}, "required": ["plan", "note"],
        },
    )

    assert identifying_arguments(call) == ({"plan": "Pro annual"}, [("note", "free text")])
