"""Red-team findings against the host (items 1, 6, 7, 9, the host part of 11 and the rules check): a model's bad
tool-call arguments, an instruction that fails to render, a turn that outlives its claim, a router calling its
sub-agent's tools in the same response, and ids read as Unicode digits — each answered clearly, never a 500, and
what a turn did is always kept."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from django.core import mail
from django.db import connection
from django.utils import timezone
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agenthost.calls import MAX_NAME_CHARS, MAX_RAW_ARGUMENTS_CHARS, parse_arguments
from agenthost.functions import FunctionContext, register_function
from agenthost.llm.registry import get_model
from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Conversation, Message
from agenthost.services import conversation_invoke_function, conversation_send, conversation_start
from agenthost.turns import ConcurrentTurn, InvalidInput, TurnClaimLost
from common.inputs import MAX_JSON_DEPTH
from tests.bad_input import token_client
from tests.properties import SUPPRESSED_WITH_FIXTURES

pytestmark = pytest.mark.django_db(transaction=True)

LOOKUP = "test-redteam-lookup"
SLOW = "test-redteam-slow"
ODD = "test-redteam-odd_result"
TAKEOVER = "test-redteam-takeover"
EMAIL = "util-email-handle_email_sender"
MAIL = {"to": "ana@example.com", "subject": "Cancelled", "body": "Your order is cancelled."}
_ran: list[str] = []
_slow_started = threading.Event()
_slow_release = threading.Event()


@register_function(
    name=LOOKUP,
    description="Looks an order up; records that it really ran.",
    outside_effects=False,
    parameters={"type": "object", "properties": {"order_id": {}}},
)
def _lookup(context: FunctionContext, order_id: object = None) -> str:
    _ran.append(LOOKUP)
    return "found"


@register_function(name=SLOW, description="Runs until the test lets it finish.", outside_effects=False)
def _slow(context: FunctionContext) -> str:
    _ran.append(SLOW)
    _slow_started.set()
    assert _slow_release.wait(timeout=30)
    return "slow done"


@register_function(name=ODD, description="Answers text no database can store.", outside_effects=False)
def _odd(context: FunctionContext) -> str:
    return "result \udfff with \x00 in it"


@register_function(name=TAKEOVER, description="Another turn takes the conversation over.", outside_effects=False)
def _takeover(context: FunctionContext) -> str:
    # A turn re-checks its claim only once half of it is used up (before that no other turn can have taken it):
    # the tests run with a 1 s claim, so the takeover happens past that half.
    time.sleep(0.6)
    later = timezone.now() + timedelta(minutes=1)
    Conversation.objects.filter(pk=context.conversation_id).update(turn_claimed_until=later)
    return "taken over"


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    _ran.clear()
    _slow_started.clear()
    _slow_release.clear()
    yield
    _slow_release.set()


def _agent(scripted_model, name: str = "desk", **fields) -> Agent:
    functions = [{"name": name} for name in (LOOKUP, SLOW, ODD, TAKEOVER)]
    values = {"instruction": "Help.", "functions": functions, **fields}
    return Agent.objects.create(name=name, provider=scripted_model.provider_name, model=scripted_model.model, **values)


@pytest.fixture
def api(live_server, admin_user) -> Iterator[httpx.Client]:
    with token_client(live_server.url, admin_user) as client:
        yield client


def _stored(conversation_id: int) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("seq"))


# --- Item 1: the model's tool-call arguments are checked before anything runs or is stored ---------------------

DEEP = "{\"order_id\": " + "[" * 3000 + "]" * 3000 + "}"
BAD_ARGUMENTS = [
    pytest.param('{"order_id": NaN}', "numbers must be finite", id="nan"),
    pytest.param('{"order_id": 1e999}', "numbers must be finite", id="overflowing-float"),
    pytest.param('{"order_id": -Infinity}', "numbers must be finite", id="infinity"),
    pytest.param(DEEP, f"nested more than {MAX_JSON_DEPTH} levels deep", id="3000-deep"),
    pytest.param('{"order_id": "\\ud800"}', "lone surrogate", id="lone-surrogate"),
    pytest.param('{"order_\\udfff": 1}', "lone surrogate", id="lone-surrogate-key"),
    pytest.param('{"order_id": "a\\u0000b"}', "NUL", id="nul"),
    pytest.param('{"order_id": ' + "1" * 5001 + "}", "integers must be between", id="5001-digit-int"),
    pytest.param('{"order_id": ' + "9" * 30 + "}", "integers must be between", id="int-beyond-64-bits"),
    pytest.param('["order_id"]', "must be a JSON object", id="not-an-object"),
    pytest.param('{"order_id": ', "not valid JSON", id="truncated"),
    pytest.param('{"order_id": "' + "x" * MAX_RAW_ARGUMENTS_CHARS + '"}', "characters long", id="absurdly-long"),
]


@pytest.mark.parametrize(("raw", "problem"), BAD_ARGUMENTS)
def test_it_answers_bad_tool_arguments_invalid_and_runs_nothing_over_http(api, scripted_model, raw, problem):
    agent = _agent(scripted_model)
    conversation = conversation_start(agent=agent)
    scripted_model.play(Answer(tool_calls=[Call(LOOKUP, raw)]), Answer("done"))

    response = api.post(f"/api/conversations/{conversation.pk}/messages/", json={"text": "where is my order?"})

    assert response.status_code == 200, response.text
    body = response.json()
    [call] = body["tool_calls"]
    assert call["outcome"] == "invalid" and call["error"] is True
    assert call["result"].startswith(f"Invalid arguments for {LOOKUP}: ")
    assert problem in call["result"]
    assert body["output"] == "done"
    assert _ran == [], "nothing ran on arguments that were refused"
    # The whole turn is stored, its raw arguments made storable, and every read of it works.
    stored_call = next(m for m in _stored(conversation.pk) if m.role == Message.Role.TOOL_CALL)
    assert stored_call.arguments == {}
    assert len(stored_call.raw_arguments) <= MAX_RAW_ARGUMENTS_CHARS + 100
    stored_call.raw_arguments.encode("utf-8")
    assert "\x00" not in stored_call.raw_arguments
    listed = api.get(f"/api/conversations/{conversation.pk}/messages/", params={"page_size": 100})
    assert listed.status_code == 200
    roles = [m["role"] for m in listed.json()["results"]]
    assert roles == ["user", "assistant", "tool_call", "tool_result", "assistant"]
    assert Conversation.objects.get(pk=conversation.pk).turn_claimed_until is None


def test_it_answers_an_overlong_function_name_unavailable_and_stores_it_cut_to_its_column(api, scripted_model):
    agent = _agent(scripted_model)
    conversation = conversation_start(agent=agent)
    long_name = LOOKUP + "x" * 300
    scripted_model.play(Answer(tool_calls=[Call(long_name, {"order_id": 1})]), Answer("done"))

    response = api.post(f"/api/conversations/{conversation.pk}/messages/", json={"text": "hi"})

    assert response.status_code == 200, response.text
    [call] = response.json()["tool_calls"]
    # Refused on the full name: its first 200 characters are not what the agent declares either.
    assert call["outcome"] == "unavailable" and call["name"] == long_name
    assert _ran == []
    stored = [m for m in _stored(conversation.pk) if m.function_name]
    assert [len(m.function_name) for m in stored] == [MAX_NAME_CHARS, MAX_NAME_CHARS]
    assert all(long_name.startswith(m.function_name) for m in stored)


def test_it_stores_a_model_answer_and_a_tool_result_that_hold_lone_surrogates_or_nul(api, scripted_model):
    agent = _agent(scripted_model)
    conversation = conversation_start(agent=agent)
    scripted_model.play(Answer("thinking \ud800", tool_calls=[Call(ODD, {})]), Answer("done \udc00 \x00"))

    response = api.post(f"/api/conversations/{conversation.pk}/messages/", json={"text": "hi"})

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["output"] == "done \ufffd \ufffd"
    assert body["tool_calls"][0]["result"] == "result \ufffd with \ufffd in it"
    contents = [m.content for m in _stored(conversation.pk)]
    assert contents[1:] == ["thinking \ufffd", "", "result \ufffd with \ufffd in it", "done \ufffd \ufffd"]
    assert api.get(f"/api/conversations/{conversation.pk}/messages/").status_code == 200


def test_it_records_a_call_named_with_a_lone_surrogate_as_unavailable(api, scripted_model):
    agent = _agent(scripted_model)
    conversation = conversation_start(agent=agent)
    scripted_model.play(Answer(tool_calls=[Call(LOOKUP + "\ud800", {"order_id": 1})]), Answer("done"))

    response = api.post(f"/api/conversations/{conversation.pk}/messages/", json={"text": "hi"})

    assert response.status_code == 200, response.text
    [call] = response.json()["tool_calls"]
    assert (call["name"], call["outcome"]) == (LOOKUP + "\ufffd", "unavailable")
    assert _ran == []


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10,
)


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(
    raw=st.one_of(
        st.text(max_size=200),
        _json_like.map(lambda value: json.dumps({"v": value})),
        st.integers(min_value=1, max_value=200).map(lambda depth: '{"v": ' + "[" * depth + "]" * depth + "}"),
    )
)
def test_it_parses_any_arguments_text_without_raising_and_only_into_storable_objects(raw):
    arguments, problem = parse_arguments(raw)
    if problem is None:
        assert isinstance(arguments, dict)
        # What a tool may be given can always be stored: finite, not too deep, valid Unicode, no NUL.
        text = json.dumps(arguments, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
        assert "\\u0000" not in text
    else:
        assert arguments == {} and isinstance(problem, str)


def test_it_gives_a_case_with_bad_tool_arguments_its_real_outcome_never_a_crash(scripted_model):
    from runs.engine.case_runner import execute_case
    from runs.engine.plans import AssertionPlan, CasePlan, SuitePlan, TurnPlan

    agent = _agent(scripted_model, functions=[{"name": LOOKUP}])
    scripted_model.play(Answer(tool_calls=[Call(LOOKUP, '{"order_id": NaN}')]), Answer("done"))
    case = CasePlan(
        id=1, name="bad arguments", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan("where is my order?")], assertions=[AssertionPlan("outputNotContains", {"text": "?"})],
        mocks=[],
    )
    suite = SuitePlan(extra_allowed=frozenset(), force_blocked=frozenset(), judge_model="", timeout_seconds=20.0)

    execution = execute_case(plan=case, model=get_model(scripted_model.key), suite=suite)

    # The model was told its arguments were invalid and answered; the case is judged on that, not crashed.
    assert execution.status == "passed", execution.reason
    outcomes = [
        (m.function_name, m.outcome)
        for m in _stored(execution.conversation_id)
        if m.role == Message.Role.TOOL_RESULT
    ]
    assert outcomes == [(LOOKUP, "invalid")]
    assert _ran == []


# --- Item 6: an instruction that cannot render is refused at save, and a clear turn error otherwise ------------

FORBIDDEN = [
    '{% include "/etc/passwd" %}',
    '{% extends "base.html" %}',
    "{% load static %}",
    "{% ssi /etc/passwd %}",
    "Help. {% debug %}",
    "{% if x %}{% include x %}{% endif %}",
]


@pytest.mark.parametrize("instruction", FORBIDDEN)
def test_it_refuses_an_instruction_that_includes_extends_loads_or_debugs(api, scripted_model, instruction):
    body = {"name": "leaky", "instruction": instruction, "provider": "scripted", "model": "scripted"}

    response = api.post("/api/agents/", json=body)

    assert response.status_code == 400, response.text
    [problem] = response.json()["instruction"]
    assert "instructions render with the conversation state only" in problem
    assert not Agent.objects.filter(name="leaky").exists()


def test_it_refuses_a_forbidden_instruction_in_the_admin_form(client, admin_user, scripted_model):
    client.force_login(admin_user)
    response = client.post(
        "/admin/agenthost/agent/add/",
        {
            "name": "leaky", "instruction": '{% include "/etc/passwd" %}', "provider": "scripted",
            "model": "scripted", "temperature": "0", "functions": "[]", "rules": "[]",
        },
    )
    assert response.status_code == 200
    assert "instructions render with the conversation state only" in response.content.decode()
    assert not Agent.objects.filter(name="leaky").exists()


@pytest.mark.parametrize(
    ("instruction", "fragment"),
    [
        ('{% include "/etc/passwd" %}', "uses {% include %}"),
        ("{% debug %}", "uses {% debug %}"),
        ("Ratio {% widthratio 1 2 customer %}", "failed to render"),
        ('Go to {% url "no-such-view" %}', "failed to render"),
    ],
)
def test_it_answers_400_naming_the_instruction_when_a_stored_one_cannot_render(api, scripted_model, instruction,
                                                                            fragment):
    # Saved before the check (or straight into the database): every send was a 500 TemplateDoesNotExist.
    agent = _agent(scripted_model, instruction=instruction)
    conversation = conversation_start(agent=agent, initial_state={"customer": "Ana"})
    scripted_model.play(Answer("never asked"))

    response = api.post(f"/api/conversations/{conversation.pk}/messages/", json={"text": "hi"})

    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "invalid_input"
    assert body["detail"].startswith("the instruction of agent 'desk' is not a valid template: it ")
    assert fragment in body["detail"]
    assert scripted_model.requests == [], "the model is never asked with a broken instruction"
    assert Conversation.objects.get(pk=conversation.pk).turn_claimed_until is None


def test_it_renders_templates_for_the_model_without_debug_or_include(scripted_model):
    agent = _agent(scripted_model)
    conversation = conversation_start(agent=agent, initial_state={"name": "Ana"})

    shown = conversation_invoke_function(
        conversation=conversation, name="util-instruct-execute_template", arguments={"template": "{% debug %}"}
    )
    greeted = conversation_invoke_function(
        conversation=conversation, name="util-instruct-execute_template", arguments={"template": "Hi {{ name }}"}
    )

    assert shown.error and "uses {% debug %}" in shown.content and "sys" not in shown.content
    assert greeted.content == "Hi Ana"


# --- Item 7: the turn claim is renewed each step; a turn that lost it stops, and is still written ---------------


def _in_thread(target) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = target()
        except Exception as exc:
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_it_renews_the_claim_each_step_so_a_long_turn_keeps_its_conversation(scripted_model, settings):
    settings.AGENTTEST_REQUEST_TIMEOUT = 1
    agent = _agent(scripted_model)
    conversation = conversation_start(agent=agent)
    steps_done = threading.Event()

    def model(request):
        # Three steps of 0.6 s: the turn runs 1.8 s, past the 1 s a claim lasts without renewal.
        time.sleep(0.6)
        tool_results = sum(1 for m in request.messages if m["role"] == "tool")
        if tool_results < 2:
            return Answer(tool_calls=[Call(LOOKUP, {"order_id": tool_results})])
        steps_done.set()
        return Answer("done")

    scripted_model.respond_with(model)
    first, outcome = _in_thread(
        lambda: conversation_send(conversation=Conversation.objects.get(pk=conversation.pk), text="first")
    )
    try:
        time.sleep(1.4)
        assert not steps_done.is_set()
        with pytest.raises(ConcurrentTurn, match="another turn is in progress"):
            conversation_send(conversation=Conversation.objects.get(pk=conversation.pk), text="second")
    finally:
        first.join(timeout=30)

    assert "error" not in outcome, outcome
    assert outcome["value"].output == "done"
    assert _ran == [LOOKUP, LOOKUP]
    assert Conversation.objects.get(pk=conversation.pk).turn_claimed_until is None


def test_it_stops_a_turn_that_lost_its_claim_and_keeps_what_it_did_after_the_other_turn(scripted_model, settings):
    settings.AGENTTEST_REQUEST_TIMEOUT = 1
    agent = _agent(scripted_model)
    conversation = conversation_start(agent=agent)

    def model(request):
        user_text = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        if user_text == "first":
            # The first turn's only step: a slow tool, then a second call in the same response.
            return Answer(tool_calls=[Call(SLOW, {}), Call(LOOKUP, {"order_id": 1})])
        return Answer("second done")

    scripted_model.respond_with(model)
    first, outcome = _in_thread(
        lambda: conversation_send(conversation=Conversation.objects.get(pk=conversation.pk), text="first")
    )
    try:
        assert _slow_started.wait(timeout=30)
        time.sleep(1.3)  # the first turn's claim has expired while its tool runs
        second = conversation_send(conversation=Conversation.objects.get(pk=conversation.pk), text="second")
    finally:
        _slow_release.set()
        first.join(timeout=30)

    assert second.output == "second done"
    error = outcome.get("error")
    assert isinstance(error, TurnClaimLost), outcome
    assert error.code == "turn_claim_lost" and "another turn took the conversation over" in str(error)
    # It ran its slow tool and nothing after: the second call of that response was not started, no model step more.
    assert _ran == [SLOW]
    assert [(c.name, c.outcome) for c in error.partial.tool_calls] == [(SLOW, "executed")]
    first_requests = [r for r in scripted_model.requests if r.messages[-1].get("content") == "first"]
    assert len(first_requests) == 1
    # Both turns are written, in seq order without gaps: the second turn's, then the first's as the next turn.
    stored = _stored(conversation.pk)
    assert [m.seq for m in stored] == list(range(len(stored)))
    assert [(m.turn, m.role, m.content or m.function_name) for m in stored] == [
        (0, "user", "second"),
        (0, "assistant", "second done"),
        (1, "user", "first"),
        (1, "assistant", ""),
        (1, "tool_call", SLOW),
        (1, "tool_result", "slow done"),
        (1, "tool_call", LOOKUP),
        (1, "tool_result", "[not executed: this turn lost its claim on the conversation to another turn]"),
    ]
    stored_conversation = Conversation.objects.get(pk=conversation.pk)
    assert (stored_conversation.turn_count, stored_conversation.message_count) == (2, len(stored))
    assert stored_conversation.turn_claimed_until is None
    # And the conversation goes on.
    scripted_model.play(Answer("third done"))
    assert conversation_send(conversation=conversation, text="third").output == "third done"


def test_it_answers_409_with_what_the_turn_did_when_it_lost_its_claim(scripted_model, settings, admin_client_api):
    settings.AGENTTEST_REQUEST_TIMEOUT = 1
    agent = _agent(scripted_model)
    conversation = conversation_start(agent=agent)

    # The claim is taken over while this turn's tool runs, before its next model step.
    scripted_model.play(Answer(tool_calls=[Call(TAKEOVER, {})]), Answer("never asked"))

    response = admin_client_api.post(f"/api/conversations/{conversation.pk}/messages/", {"text": "hi"}, format="json")

    assert response.status_code == 409, response.data
    assert response.data["code"] == "turn_claim_lost"
    assert [c["name"] for c in response.data["partial"]["tool_calls"]] == [TAKEOVER]
    assert len(scripted_model.requests) == 1, "no model step after the claim was lost"
    roles = [m.role for m in _stored(conversation.pk)]
    assert roles == ["user", "assistant", "tool_call", "tool_result"]
    # The other turn's claim is left alone.
    assert Conversation.objects.get(pk=conversation.pk).turn_claimed_until > timezone.now()


# --- Item 9: every call of one response is checked against the agent that produced it -------------------------


def test_it_refuses_a_sub_agents_tool_called_in_the_same_response_as_the_route(api, scripted_model):
    mailer = _agent(scripted_model, name="mailer", functions=[{"name": EMAIL}])
    router = _agent(scripted_model, name="router", functions=[])
    router.sub_agents.set([mailer])
    conversation = conversation_start(agent=router)
    scripted_model.play(
        Answer(tool_calls=[Call("route_to_agent", {"agent_name": "mailer"}), Call(EMAIL, MAIL)]),
        Answer("Routed, nothing sent."),
    )

    response = api.post(f"/api/conversations/{conversation.pk}/messages/", json={"text": "cancel and mail me"})

    assert response.status_code == 200, response.text
    body = response.json()
    assert [(c["name"], c["outcome"], c["agent"]) for c in body["tool_calls"]] == [
        ("route_to_agent", "executed", "router"),
        (EMAIL, "unavailable", "router"),
    ]
    assert mail.outbox == []
    assert body["agent_chain"] == ["router", "mailer"]
    # The route took effect for the next step: that request was the mailer's, offered its tools.
    last = scripted_model.requests[-1]
    assert last.metadata["agent"] == "mailer" and EMAIL in [t["function"]["name"] for t in last.tools]


def test_it_lets_the_routed_to_agent_call_its_tools_from_the_next_step(scripted_model):
    mailer = _agent(scripted_model, name="mailer", functions=[{"name": EMAIL}])
    router = _agent(scripted_model, name="router", functions=[])
    router.sub_agents.set([mailer])
    conversation = conversation_start(agent=router)
    scripted_model.play(
        Answer(tool_calls=[Call("route_to_agent", {"agent_name": "mailer"})]),
        Answer(tool_calls=[Call(EMAIL, MAIL)]),
        Answer("Sent."),
    )

    result = conversation_send(conversation=conversation, text="cancel and mail me")

    assert [(c.name, c.outcome, c.agent) for c in result.tool_calls] == [
        ("route_to_agent", "executed", "router"),
        (EMAIL, "executed", "mailer"),
    ]
    assert len(mail.outbox) == 1


def test_it_routes_at_most_once_per_response(scripted_model):
    desk = _agent(scripted_model, name="desk", functions=[])
    billing = _agent(scripted_model, name="billing", functions=[])
    router = _agent(scripted_model, name="router", functions=[])
    router.sub_agents.set([desk, billing])
    conversation = conversation_start(agent=router)
    scripted_model.play(
        Answer(
            tool_calls=[
                Call("route_to_agent", {"agent_name": "desk"}),
                Call("route_to_agent", {"agent_name": "billing"}),
            ]
        ),
        Answer("desk here"),
    )

    result = conversation_send(conversation=conversation, text="hi")

    assert result.agent_chain == ["router", "desk"]
    assert result.tool_calls[1].error and "already handed the turn to desk" in result.tool_calls[1].result
    assert scripted_model.requests[-1].metadata["agent"] == "desk"


# --- Item 11 (host): ?at= takes ASCII digits only -------------------------------------------------------------


@pytest.mark.parametrize("at", ["٣", "³", "３", "1.5", "-1", "1e3", " ", "9" * 5001])
def test_it_refuses_a_state_seq_that_is_not_ascii_digits(api, scripted_model, at):
    conversation = conversation_start(agent=_agent(scripted_model), initial_state={"k": "v"})

    response = api.get(f"/api/conversations/{conversation.pk}/state/", params={"at": at})

    assert response.status_code == 400, response.text
    assert "at" in response.json()


@pytest.mark.parametrize("at", ["0", "3", " 3 ", "0003"])
def test_it_reads_the_state_at_an_ascii_seq(api, scripted_model, at):
    conversation = conversation_start(agent=_agent(scripted_model), initial_state={"k": "v"})

    response = api.get(f"/api/conversations/{conversation.pk}/state/", params={"at": at})

    assert response.status_code == 200, response.text
    assert response.json()["at"] == int(at)


@hypothesis_settings(max_examples=200, deadline=None)
@given(digits=st.text(st.characters(categories=["Nd"]), min_size=1, max_size=5).filter(lambda t: not t.isascii()))
def test_it_never_reads_unicode_digits_as_a_state_seq(digits):
    from agenthost.api import ConversationStateApi

    filters = ConversationStateApi.FilterSerializer(data={"at": digits})
    assert not filters.is_valid()
    assert "at" in filters.errors


# --- Minor: a rule naming a function the agent cannot call is refused at save -----------------------------------


def test_it_refuses_a_rule_naming_a_function_the_agent_cannot_call(api, scripted_model):
    body = {
        "name": "ruled", "instruction": "Help.", "provider": "scripted", "model": "scripted",
        "functions": [{"name": LOOKUP}],
        "rules": [
            {"trigger": "conversation_started", "function": f"{LOOKUP.upper()} "},
            {"trigger": "conversation_started", "function": "human_intervention_needed", "arguments": {"reason": "x"}},
            {"trigger": "state_changed", "key": "email", "function": EMAIL},
        ],
    }

    response = api.post("/api/agents/", json=body)

    assert response.status_code == 400, response.text
    [problem] = response.json()["rules"]
    assert problem.startswith(f"rules[2].function: '{EMAIL}' is not a function this agent can call; it can call: ")
    assert LOOKUP in problem and "route_to_agent" in problem
    assert not Agent.objects.filter(name="ruled").exists()

    body["rules"] = body["rules"][:2]
    assert api.post("/api/agents/", json=body).status_code == 201


def test_it_refuses_a_patch_removing_the_function_a_rule_calls(api, scripted_model):
    body = {
        "name": "ruled", "instruction": "Help.", "provider": "scripted", "model": "scripted",
        "functions": [{"name": LOOKUP}],
        "rules": [{"trigger": "conversation_started", "function": LOOKUP}],
    }
    agent_id = api.post("/api/agents/", json=body).json()["id"]

    response = api.patch(f"/api/agents/{agent_id}/", json={"functions": []})

    assert response.status_code == 400, response.text
    assert f"rules[0].function: '{LOOKUP}' is not a function this agent can call" in response.json()["rules"][0]
    assert Agent.objects.get(pk=agent_id).functions == [{"name": LOOKUP}]


def test_it_refuses_invalid_input_from_the_service_for_a_broken_instruction(scripted_model):
    agent = _agent(scripted_model, instruction="{% debug %}")
    conversation = conversation_start(agent=agent)

    with pytest.raises(InvalidInput) as raised:
        conversation_send(conversation=conversation, text="hi")

    assert raised.value.partial is not None and raised.value.partial.tool_calls == []
    assert [m.role for m in _stored(conversation.pk)] == ["user"]
