"""A simulated user's result page (issue 37, item 7 of the findings): it shows whom the user model played — persona,
goal and the facts it could reveal — and counts the turns it wrote from 1 (a conversation the user model opened at
the first turn used to read "Simulated turns 0", as if there were none), at 1366 and at 800 px wide."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from agenthost.llm.scripted import Answer, Call
from cases.models import Suite
from cases.services import case_create
from runs.models import CaseResult
from runs.services import run_create, run_execute
from tests.browser.conftest import SCRIPTED
from tests.browser.pages import ADMIN, WIDTHS, assert_fits
from tests.order_tools import TRACK_ORDER, VOID_ORDER

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ASKED = "The order number is given only when asked"
PLAYED = {
    "persona": 'Ana, a customer who wants an order cancelled. She opens with "I\'d like to cancel my order, please." '
               "and gives the order number only when the assistant asks for it.",
    "goal": "Get order 1043 cancelled.",
    "facts": {"order number": "1043"},
    "max_turns": 4,
}


def move(status: str, message: str = "", reason: str = "") -> str:
    """The user model's answer: its next move."""
    return json.dumps({"status": status, "message": message, "reason": reason})


def test_it_shows_the_persona_goal_and_facts_and_counts_turns_from_one(sign_in, order_desk, scripted_model, admin_user):
    # The suite's judge plays the user: it opens (turn 0), gives the number when asked (turn 1), and is done once the
    # agent has cancelled the order.
    suite = Suite.objects.create(name="Simulated users", agent=order_desk["order-cancellation"], judge_model=SCRIPTED)
    case_create(suite=suite, document={
        "name": ASKED, "turns": [], "simulated_user": PLAYED,
        "assertions": [{"type": "toolCalled", "params": {"function": VOID_ORDER, "arguments": {"order_id": "1043"}}}],
        "mocks": [
            {"function_name": TRACK_ORDER, "result": json.dumps({"order_id": "1043", "status": "processing"})},
            {"function_name": VOID_ORDER, "result": json.dumps({"order_id": "1043", "cancelled": True})},
        ],
    })
    scripted_model.play(
        move("still_going", "I'd like to cancel my order, please."),
        "Could you tell me the order number?",
        move("still_going", "It's 1043."),
        Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1043"})]),
        Answer(tool_calls=[Call(VOID_ORDER, {"order_id": "1043"})]),
        "Order 1043 is now cancelled.",
        move("done", "Thank you!", "the assistant cancelled order 1043"),
    )
    run = run_execute(run_id=run_create(suite=suite, model_keys=[SCRIPTED]).pk)
    result = CaseResult.objects.get(run=run)
    assert result.simulation["turns"] == [0, 1]
    _, page = sign_in(*ADMIN)

    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"/runs/{run.pk}/results/{result.pk}/")
        box = page.locator(".simulated-user")
        expect(box.locator('[data-field="persona"]')).to_contain_text(PLAYED["persona"])
        expect(box.locator('[data-field="goal"]')).to_contain_text(PLAYED["goal"])
        for key, value in PLAYED["facts"].items():
            expect(box.locator('[data-field="facts"]')).to_contain_text(key)
            expect(box.locator('[data-field="facts"]')).to_contain_text(value)
        expect(box.locator('[data-field="simulated-turns"]')).to_have_text("1, 2")
        assert_fits(page, f"the simulated user's result page at {width}")
