"""Simulated users (issue 24): a model plays the user after the scripted turns, sees only what a user would, ends
when it is done (or gives up, or an end condition holds), and a broken user model ends the case with a clear Error,
never a hang. Both models here are the scripted provider, told apart by what each request is for."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest
from django.core.management import CommandError, call_command

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from cases.models import Assertion, Case, Mock, Suite, Turn
from cases.services import case_enable
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPTED = "scripted:scripted"
PERSONA = "Dana, a busy customer with a secret codename BLUEHERON, who answers in short sentences."
GOAL = "Get order 1043 cancelled."


def move(status: str, message: str = "", reason: str = "") -> Answer:
    return Answer(json.dumps({"status": status, "message": message, "reason": reason}))


class Conversation:
    """Answers each request by what it is for: the simulated user's moves, the agent's answers, the judge's
    verdicts, in order; and keeps every request, by purpose."""

    def __init__(self, *, user: list, agent: list, judge: list | None = None) -> None:
        self.user, self.agent, self.judge = list(user), list(agent), list(judge or [])
        self.requests: dict[str, list] = {"user": [], "agent": [], "judge": []}

    def __call__(self, request):
        purpose = request.metadata.get("purpose", "agent")
        self.requests[purpose].append(request)
        queue = getattr(self, purpose)
        return queue.pop(0) if queue else Answer("(nothing more scripted)")


@pytest.fixture
def suite(scripted_model) -> Suite:
    agent = Agent.objects.create(
        name="desk",
        instruction="You cancel orders. Ask for the order number when you need it.",
        provider="scripted",
        model="scripted",
        functions=[{"name": "void_order"}],
    )
    return Suite.objects.create(name="desk", agent=agent, judge_model=SCRIPTED, case_timeout_seconds=20)


def make_case(
    suite: Suite,
    *,
    turns: tuple[str, ...] = ("Hi",),
    assertions: tuple[tuple[str, dict], ...] = (("goalReached", {}),),
    **user: object,
) -> Case:
    case = Case.objects.create(
        suite=suite,
        name="cancels",
        simulated_user={
            "persona": PERSONA,
            "goal": GOAL,
            "facts": {"order number": "1043"},
            "max_turns": 5,
            "model": "",
            "end_when": [],
            **user,
        },
    )
    for position, text in enumerate(turns):
        Turn.objects.create(case=case, position=position, user_message=text)
    Mock.objects.create(
        case=case,
        position=0,
        function_name="void_order",
        result='{"order_id": "1043", "cancelled": true, "internal_note": "refund via ledger 77"}',
    )
    for position, (kind, params) in enumerate(assertions):
        Assertion.objects.create(case=case, position=position, type=kind, params=params)
    return case


def run(suite: Suite, respond: Callable, scripted_model, mode: str = Run.Mode.LIVE) -> CaseResult:
    scripted_model.respond_with(respond)
    done = run_execute(run_id=run_create(suite=suite, model_keys=[SCRIPTED], mode=mode).pk)
    return CaseResult.objects.get(run=done)


def test_it_plays_the_user_until_it_is_done_and_judges_the_goal(suite, scripted_model):
    make_case(
        suite,
        assertions=(
            ("goalReached", {}),
            ("toolCalled", {"function": "void_order", "arguments": {"order_id": "1043"}}),
        ),
    )
    talk = Conversation(
        user=[
            move("still_going", "I want to cancel my order."),
            move("still_going", "It's 1043."),
            move("done", "Thanks!", "the order is cancelled"),
        ],
        agent=[
            Answer("Hello! How can I help?"),
            Answer("Sure. What is the order number?"),
            Answer(tool_calls=[Call("void_order", {"order_id": "1043"})]),
            Answer("Order 1043 is cancelled."),
        ],
        judge=[Answer('{"reached": true, "reason": "order 1043 was cancelled"}')],
    )

    result = run(suite, talk, scripted_model)

    assert result.status == "passed", result.reason
    simulation = result.simulation
    assert (simulation["turns"], simulation["user_model"]) == ([1, 2], SCRIPTED)
    assert simulation["stop"]["by"] == "user" and simulation["stop"]["status"] == "done"
    assert simulation["stop"]["text"] == "the simulated user said it was done after turn 2: the order is cancelled"
    users = [(m["content"], m.get("simulated", False)) for m in result.transcript if m["role"] == "user"]
    assert users == [("Hi", False), ("I want to cancel my order.", True), ("It's 1043.", True)]
    goal = next(item for item in result.assertions if item["type"] == "goalReached")
    assert goal["status"] == "passed"
    assert goal["message"] == "the judge found the goal reached: order 1043 was cancelled"
    # The user model's tokens count with the judge's, at its price; the record keeps its share.
    assert simulation["usage"]["input_tokens"] > 0 and result.judge_input_tokens > simulation["usage"]["input_tokens"]

    # The agent never sees the persona, the goal or the facts.
    for request in talk.requests["agent"]:
        sent = json.dumps(request.messages)
        assert "BLUEHERON" not in sent and GOAL not in sent and "order number: 1043" not in sent
    # The user model sees what a user would: never a tool call, a tool result or the state.
    assert len(talk.requests["user"]) == 3
    for request in talk.requests["user"]:
        assert {message["role"] for message in request.messages} <= {"system", "user", "assistant"}
        assert not any(message.get("tool_calls") for message in request.messages)
        assert "ledger 77" not in json.dumps(request.messages) and not request.tools
    last = talk.requests["user"][-1].messages
    assert "BLUEHERON" in last[0]["content"] and "order number: 1043" in last[0]["content"]
    assert [(m["role"], m["content"]) for m in last[2:]] == [
        ("assistant", "Hi"),
        ("user", "Hello! How can I help?"),
        ("assistant", "I want to cancel my order."),
        ("user", "Sure. What is the order number?"),
        ("assistant", "It's 1043."),
        ("user", "Order 1043 is cancelled."),
    ]
    # The goal judge reads the whole transcript, the tool call included.
    judged = talk.requests["judge"][0].messages[1]["content"]
    assert GOAL in judged and 'Assistant called void_order({"order_id": "1043"})' in judged


def test_it_ends_at_an_end_condition_without_asking_the_user_again(suite, scripted_model):
    make_case(
        suite,
        turns=(),
        assertions=(("toolCalled", {"function": "void_order"}),),
        end_when=[{"type": "toolCalled", "params": {"function": "void_order"}}],
    )
    talk = Conversation(
        user=[move("still_going", "Cancel order 1043 please.")],
        agent=[Answer(tool_calls=[Call("void_order", {"order_id": "1043"})]), Answer("Done.")],
    )

    result = run(suite, talk, scripted_model)

    assert result.status == "passed", result.reason
    assert len(talk.requests["user"]) == 1
    assert result.simulation["stop"]["text"] == (
        'the end condition toolCalled {"function": "void_order"} held after turn 0'
    )


def test_it_ends_a_user_that_never_says_done_at_the_turn_limit_as_error(suite, scripted_model):
    make_case(suite, max_turns=3)
    talk = Conversation(
        user=[move("still_going", "Hello?")] * 10,
        agent=[Answer("Hi.")] * 10,
        judge=[Answer('{"reached": false, "reason": "nothing happened"}')],
    )

    result = run(suite, talk, scripted_model)

    assert result.status == "error"
    assert result.reason.startswith(
        "the turn limit (3) ended the conversation: the simulated user never said it was done or gave up"
    )
    assert len(talk.requests["user"]) == 3 and result.simulation["turns"] == [1, 2, 3]
    # The assertions were still evaluated: the page shows how far it got.
    assert result.assertions[0]["status"] == "failed"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            Answer(tool_calls=[Call("void_order", {"order_id": "1043"})]),
            "the simulated user's model (turn 1) answered with tool calls (void_order) instead of a move",
        ),
        (Answer(""), "the simulated user's model (turn 1) answered nothing (an empty answer)"),
        (Answer("Sure, I'd like to cancel."), "the simulated user's model (turn 1) answered without the JSON move"),
        (move("still_going", "  "), "the simulated user's model (turn 1) said it is still going but wrote no message"),
    ],
)
def test_it_ends_an_unusable_user_model_answer_with_an_error_naming_it(suite, scripted_model, answer, said):
    make_case(suite)
    talk = Conversation(user=[answer], agent=[Answer("Hello!")])

    result = run(suite, talk, scripted_model)

    assert result.status == "error"
    assert result.reason.startswith(said), result.reason
    assert result.simulation["stop"]["by"] == "error"
    # Nothing was sent on its behalf: the agent answered the scripted turn only.
    assert len(talk.requests["agent"]) == 1


def cancelling_talk() -> Conversation:
    return Conversation(
        user=[
            move("still_going", "I want to cancel my order."),
            move("still_going", "It's 1043."),
            move("done", "", "the order is cancelled"),
        ],
        agent=[
            Answer("Hello! How can I help?"),
            Answer("Sure. What is the order number?"),
            Answer(tool_calls=[Call("void_order", {"order_id": "1043"})]),
            Answer("Order 1043 is cancelled."),
        ],
        judge=[Answer('{"reached": true, "reason": "order 1043 was cancelled"}')],
    )


def test_it_freezes_a_simulated_result_into_a_disabled_draft_that_passes_as_a_scripted_case(
    suite, scripted_model, admin_client_api
):
    make_case(suite, assertions=(("goalReached", {}), ("toolCalled", {"function": "void_order"})))
    result = run(suite, cancelling_talk(), scripted_model)

    response = admin_client_api.post(f"/api/runs/{result.run_id}/results/{result.pk}/freeze/", format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["enabled"], body["turns"], body["suite"]) == (False, 3, suite.pk)
    frozen = Case.objects.get(pk=body["id"])
    assert frozen.name == f"cancels (frozen from result #{result.pk})" and frozen.simulated_user is None
    assert [turn.user_message for turn in frozen.turns.all()] == ["Hi", "I want to cancel my order.", "It's 1043."]
    assert frozen.assertions.get(type="goalReached").params == {"goal": GOAL}
    assert frozen.warnings[0].startswith(
        f"frozen from result #{result.pk}: the simulated user's 2 line(s) are now fixed as turns 1–2"
    )

    case_enable(case=frozen)
    Case.objects.filter(name="cancels").update(enabled=False)
    talk = cancelling_talk()
    again = run(suite, talk, scripted_model)

    assert (again.case_id, again.status, again.simulation) == (frozen.pk, "passed", {}), again.reason
    assert talk.requests["user"] == []


def test_it_freezes_from_the_result_page_and_the_cli_and_refuses_a_scripted_result(
    suite, scripted_model, admin_user, client
):
    make_case(suite)
    result = run(suite, cancelling_talk(), scripted_model)
    client.force_login(admin_user)

    page = client.get(f"/runs/{result.run_id}/results/{result.pk}/")
    assert b"The simulated user said it was done after turn 2: the order is cancelled" in page.content
    assert b'<span class="badge" title="Written by the simulated user\'s model">simulated</span>' in page.content
    assert b"Reached</span>" in page.content and b"Freeze into a scripted case" in page.content
    response = client.post(f"/runs/{result.run_id}/results/{result.pk}/freeze/")
    frozen = Case.objects.get(name=f"cancels (frozen from result #{result.pk})")
    assert response.status_code == 302 and response.url == f"/admin/cases/case/{frozen.pk}/change/"

    out, err = io.StringIO(), io.StringIO()
    call_command("freeze_result", str(result.pk), stdout=out, stderr=err)
    second = Case.objects.get(pk=int(out.getvalue()))
    assert second.name == f"cancels (frozen from result #{result.pk}) 2" and not second.enabled
    assert "disabled draft" in err.getvalue()

    scripted = CaseResult.objects.create(
        run=result.run, case=frozen, case_name="x", model=SCRIPTED, trial=1, status="passed"
    )
    with pytest.raises(CommandError, match=f"result #{scripted.pk} has no line of a simulated user to freeze"):
        call_command("freeze_result", str(scripted.pk), stdout=io.StringIO(), stderr=io.StringIO())
