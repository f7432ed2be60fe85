"""The demo suite for the order-support demo agents: cases that use mocks (one of them stateful, over a table of
orders), meet a blocked tool and exercise every assertion type. On the simulated models most pass on `sim-careful`;
`sim-hasty` loses the order a follow-up refers to and answers in one line, so the comparison shows a real
difference."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from agenttest.plugin import Suite, case_create, suite_create

DEMO_SUITE = "Order support demo"
SIMULATED_USERS_SUITE = "Simulated users demo"
ROUTER = "order-router"


def _order(order_id: str, status: str, email: str = "") -> str:
    return json.dumps(
        {"order_id": order_id, "status": status, "items": ["ceramic mug"], "customer_email": email or
         f"customer{order_id}@example.com"}
    )


def _mock(function: str, result: Any, **extra: Any) -> dict[str, Any]:
    return {
        "function_name": function, "result": result if isinstance(result, str) else json.dumps(result),
        "arguments": extra.pop("arguments", None), "call_index": extra.pop("call_index", None),
        "stop": extra.pop("stop", False), "state_writes": extra.pop("state_writes", {}),
    }


def _check(kind: str, fatal: bool = False, **params: Any) -> dict[str, Any]:
    return {"type": kind, "params": params, "fatal": fatal}


DEMO_CASES: list[dict[str, Any]] = [
    {
        "name": "Order status is looked up",
        "description": "The router hands a status question to order-lookup, which looks the order up.",
        "tags": ["lookup"],
        "turns": [{
            "user_message": "Where is my order #1042?",
            "assertions": [
                _check("toolCalled", function="lookup_order", arguments={"order_id": "1042"}),
                _check("outputContains", text="1042"),
                _check("outputRegex", pattern=r"\b(shipped|on its way)\b"),
                _check("routedToAgent", agent="order-lookup"),
            ],
        }],
        "assertions": [_check("stateEquals", key="order_status", value="shipped"),
                       _check("toolNotCalled", function="cancel_order")],
        "mocks": [_mock("lookup_order", _order("1042", "shipped"), state_writes={"order_status": "shipped"})],
    },
    {
        "name": "Cancellation checks the order and confirms by email",
        "description": "Look up first, cancel, then email the customer, as the cancellation agent's instruction says.",
        "tags": ["cancel"],
        "turns": [{
            "user_message": "Please cancel order 1043, my email is ana@example.com",
            "assertions": [
                _check("toolCalled", function="lookup_order", arguments={"order_id": "1043"}),
                _check("toolCalled", function="cancel_order", arguments={"order_id": "1043"}),
                _check("toolCalled", function="util-email-handle_email_sender", arguments={"to": "ana@example.com"}),
                _check("agentChain", agents=[ROUTER, "order-cancellation"], mode="ordered"),
            ],
        }],
        "assertions": [_check("stateEquals", key="order_status", value="cancelled")],
        "mocks": [
            _mock("lookup_order", _order("1043", "processing", "ana@example.com")),
            _mock("cancel_order", {"order_id": "1043", "cancelled": True, "refund": "full"},
                  state_writes={"order_status": "cancelled"}),
            _mock("util-email-handle_email_sender", {"sent": True, "to": ["ana@example.com"]}),
        ],
    },
    {
        "name": "A delivered order is not cancelled",
        "description": "The agent must look first and refuse.",
        "tags": ["cancel"],
        "initial_state": {"customer_email": "bo@example.com"},
        "turns": [{
            "user_message": "Can you cancel order 1047?",
            "assertions": [_check("toolNotCalled", function="cancel_order"),
                           _check("outputContains", text="delivered")],
        }],
        "mocks": [
            _mock("lookup_order", _order("1047", "delivered", "bo@example.com"),
                  state_writes={"order_status": "delivered"}),
            _mock("cancel_order", {"order_id": "1047", "cancelled": False, "error": "the order was already delivered"}),
        ],
    },
    {
        "name": "An unmocked email is blocked, never sent",
        "description": "The demo's example of a missing mock: it fails on every run, on purpose. The email tool "
                       "has no mock, so the harness blocks it and the case fails with the call named.",
        "tags": ["blocked"],
        "turns": [{"user_message": "Please cancel order 1044, my email is kim@example.com",
                   "assertions": [_check("toolCalled", function="cancel_order")]}],
        "mocks": [
            _mock("lookup_order", _order("1044", "processing", "kim@example.com")),
            _mock("cancel_order", {"order_id": "1044", "cancelled": True}),
        ],
    },
    {
        "name": "Two turns: status, then cancel it",
        "description": "A follow-up that refers back to the order of the first turn; sim-hasty loses it.",
        "tags": ["cancel", "multi-turn"],
        "turns": [
            {"user_message": "Where is order 1041?",
             "assertions": [_check("toolCalled", fatal=True, function="lookup_order", arguments={"order_id": "1041"})]},
            {"user_message": "Please cancel it",
             "assertions": [_check("toolCalled", function="cancel_order", arguments={"order_id": "1041"}),
                            _check("outputNotContains", text="could not")]},
        ],
        "assertions": [_check("stateEquals", key="order_status", value="cancelled"),
                       _check("noBlockedTools")],
        "mocks": [
            _mock("lookup_order", _order("1041", "shipped"), state_writes={"order_status": "shipped"}),
            _mock("cancel_order", {"order_id": "1041", "cancelled": True}, state_writes={"order_status": "cancelled"}),
            _mock("util-email-handle_email_sender", {"sent": True}),
        ],
    },
    {
        "name": "Cancelling updates the order table",
        "description": "Stateful mocks: look-up and cancellation read and update a table of orders, never a real "
                       "system; the table the case leaves is checked (a second cancellation would be refused).",
        "tags": ["cancel", "stateful"],
        "tables": {"orders": [
            {"order_id": "1048", "status": "processing", "items": ["ceramic mug"], "customer_email": "lee@example.com"},
            {"order_id": "1049", "status": "delivered", "items": ["teapot"], "customer_email": "lee@example.com"},
        ]},
        "turns": [{"user_message": "Please cancel order 1048, my email is lee@example.com",
                   "assertions": [_check("toolCalled", function="cancel_order", arguments={"order_id": "1048"})]}],
        "assertions": [_check("tableEquals", table="orders", key="order_id",
                              rows=[{"order_id": "1048", "status": "cancelled"},
                                    {"order_id": "1049", "status": "delivered"}])],
        "mocks": [
            {**_mock("lookup_order", ""), "table": {"name": "orders", "key": {"order_id": "$args.order_id"}}},
            {**_mock("cancel_order", "", state_writes={"order_status": "cancelled"}), "table": {
                "name": "orders", "key": {"order_id": "$args.order_id"},
                "when": {"status": ["processing", "shipped"]}, "update": {"status": "cancelled"},
            }},
            _mock("util-email-handle_email_sender", {"sent": True, "to": ["lee@example.com"]}),
        ],
    },
    {
        "name": "The reply is helpful (judge)",
        "description": "The suite's judge model scores the reply against a criterion.",
        "tags": ["judge"],
        "turns": [{"user_message": "Where is my order #1045?",
                   "assertions": [_check("llmJudge", criterion="Gives the order's status and what it contains.",
                                         min_score=4)]}],
        "mocks": [_mock("lookup_order", _order("1045", "shipped"))],
    },
    {
        "name": "Routing: a cancellation goes to order-cancellation",
        "type": "routing",
        "turns": [{"user_message": "I want to cancel order 1046",
                   "assertions": [_check("routedToAgent", agent="order-cancellation")]}],
        "mocks": [
            _mock("lookup_order", _order("1046", "processing")),
            _mock("cancel_order", {"order_id": "1046", "cancelled": True}),
            _mock("util-email-handle_email_sender", {"sent": True}),
        ],
    },
    {
        "name": "Routing: small talk stays with the router",
        "type": "routing",
        "turns": [{"user_message": "What's the weather like?",
                   "assertions": [_check("agentChain", agents=[ROUTER], mode="exact")]}],
    },
]


@transaction.atomic
def demo_suite_ensure() -> tuple[Suite, bool]:
    """Create the demo suite and its cases if the suite does not exist yet. An existing suite is left alone."""
    existing = Suite.objects.filter(name=DEMO_SUITE).first()
    if existing is not None:
        return existing, False
    suite = suite_create(data={
        "name": DEMO_SUITE,
        "description": "Order support: look-ups, cancellations, a blocked tool, routing and a judged reply.",
        "agent": ROUTER,
        "judge_model": "simulated:sim-careful",
        "case_timeout_seconds": 60,
    })
    for document in DEMO_CASES:
        case_create(suite=suite, document={**document, "enabled": True})
    return suite, True


# Issue 24: cases whose user is played by a model (the suite's judge, sim-careful, plays it on either model under
# test). sim-careful asks for the order number it needs and keeps the order a changed mind refers to; sim-hasty
# guesses an empty one, so it cancels nothing the user asked for, and the user gives up.
_PROCESSING = _order("1043", "processing", "ana@example.com")
SIMULATED_USER_CASES: list[dict[str, Any]] = [
    {
        "name": "The order number is given only when asked",
        "description": "The simulated user wants an order cancelled and gives its number only when the agent asks "
                       "for it; an agent that guesses instead cancels nothing the user meant.",
        "tags": ["simulated-user", "cancel"],
        "turns": [],
        "simulated_user": {
            "persona": 'Ana, a customer who wants an order cancelled. She opens with "I\'d like to cancel my order, '
                       'please." and gives the order number only when the assistant asks for it.',
            "goal": "Get order 1043 cancelled.",
            "facts": {"order number": "1043"},
            "max_turns": 4,
        },
        "assertions": [_check("goalReached"),
                       _check("toolCalled", function="cancel_order", arguments={"order_id": "1043"})],
        "mocks": [
            _mock("lookup_order", _PROCESSING),
            _mock("cancel_order", {"order_id": "1043", "cancelled": True, "refund": "full"},
                  state_writes={"order_status": "cancelled"}),
            _mock("util-email-handle_email_sender", {"sent": True, "to": ["ana@example.com"]}),
        ],
    },
    {
        "name": "The user changes their mind",
        "description": "The user asks where an order is, then changes their mind and wants it cancelled (\"cancel "
                       "it\"): the agent must keep the order the change of mind refers to.",
        "tags": ["simulated-user", "cancel", "multi-turn"],
        "turns": [{"user_message": "Where is my order 1043?", "assertions": []}],
        "simulated_user": {
            "persona": "Ana, who asked where her order is. Hearing it is still processing, she changes her mind "
                       'and says "Actually, I have changed my mind: please cancel it."',
            "goal": "Get order 1043 cancelled.",
            "max_turns": 4,
        },
        "assertions": [_check("goalReached"),
                       _check("toolCalled", function="cancel_order", arguments={"order_id": "1043"}),
                       _check("stateEquals", key="order_status", value="cancelled")],
        "mocks": [
            _mock("lookup_order", _PROCESSING, state_writes={"order_status": "processing"}),
            _mock("cancel_order", {"order_id": "1043", "cancelled": True, "refund": "full"},
                  state_writes={"order_status": "cancelled"}),
            _mock("util-email-handle_email_sender", {"sent": True, "to": ["ana@example.com"]}),
        ],
    },
]


@transaction.atomic
def simulated_users_suite_ensure() -> tuple[Suite, bool]:
    """Create the simulated users demo suite and its cases if the suite does not exist yet."""
    existing = Suite.objects.filter(name=SIMULATED_USERS_SUITE).first()
    if existing is not None:
        return existing, False
    suite = suite_create(data={
        "name": SIMULATED_USERS_SUITE,
        "description": "Cases played by a simulated user: a fact given only when asked, and a change of mind.",
        "agent": ROUTER,
        "judge_model": "simulated:sim-careful",
        "case_timeout_seconds": 60,
    })
    for document in SIMULATED_USER_CASES:
        case_create(suite=suite, document={**document, "enabled": True})
    return suite, True
