"""The simulated offline models: two behaviours on the demo's order-support tools, routing, determinism."""

from __future__ import annotations

import json

import pytest
from django.core import mail

from agenthost.functions import get_function
from agenthost.llm import registry
from agenthost.llm.base import ModelRequest, ProviderError
from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start

SUB_AGENT_TOOLS = ["lookup_order", "cancel_order", "util-email-handle_email_sender", "util-routing-fallback_to_router"]
LOOKUP_RESULT = {"order_id": "1042", "status": "processing", "items": ["item-42"], "customer_email": "c@example.com"}
RESULTS = {
    "lookup_order": json.dumps(LOOKUP_RESULT),
    "cancel_order": json.dumps({"order_id": "1042", "cancelled": True, "refund": "full"}),
    "util-email-handle_email_sender": "Email sent to ann@example.com.",
    "util-routing-fallback_to_router": "Returned to the router.",
}
CANCEL = "Please cancel order #1042, I ordered it by mistake. My email is ann@example.com"


def tools(*names):
    # The real demo and built-in tool definitions, as the conversation loop offers them.
    return [{"type": "function", "function": get_function(name).tool_schema()} for name in names]


ROUTER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "route_to_agent",
            "description": "Hand this turn to the sub-agent best suited to the user's request. Sub-agents: "
            "orders: Looks up orders and cancels them; billing: Invoices, payments and refunds",
            "parameters": {
                "type": "object",
                "properties": {"agent_name": {"type": "string", "enum": ["orders", "billing"]}},
                "required": ["agent_name"],
            },
        },
    }
]


def converse(model, text, offered, results=RESULTS, system="You are the orders agent."):
    """Play one turn against the model, answering its tool calls from `results`; returns (calls, final answer)."""
    provider = registry.get_provider("simulated")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
    calls = []
    for _ in range(10):
        answer = provider.complete(ModelRequest(model=model, messages=messages, tools=offered))
        if not answer.tool_calls:
            return calls, answer
        requested = [call.as_openai() for call in answer.tool_calls]
        messages.append({"role": "assistant", "content": None, "tool_calls": requested})
        for call in answer.tool_calls:
            calls.append((call.name, json.loads(call.arguments)))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": results[call.name]})
    raise AssertionError("the simulated model did not finish within 10 steps")


def test_the_careful_model_looks_up_cancels_and_confirms_by_email():
    calls, answer = converse("sim-careful", CANCEL, tools(*SUB_AGENT_TOOLS))

    assert [name for name, _ in calls] == ["lookup_order", "cancel_order", "util-email-handle_email_sender"]
    assert calls[0][1] == {"order_id": "1042"}
    assert calls[1][1]["order_id"] == "1042"
    email = calls[2][1]
    assert email["to"] == "ann@example.com"
    assert "1042" in email["subject"] and "cancelled" in email["body"]
    assert "1042" in answer.text and "cancelled" in answer.text and "ann@example.com" in answer.text


def test_the_hasty_model_only_cancels_and_answers_tersely_when_its_instruction_asks_for_nothing_more():
    calls, answer = converse("sim-hasty", CANCEL, tools(*SUB_AGENT_TOOLS))

    assert [name for name, _ in calls] == ["cancel_order"]
    assert calls[0][1]["order_id"] == "1042"
    assert answer.text == "Order 1042 is now cancelled."


CANCELLATION_INSTRUCTION = (
    "You cancel orders of an online shop. Look the order up first; do not cancel one that is already delivered. "
    "After a cancellation, email the customer a confirmation."
)


def test_the_hasty_model_looks_up_and_emails_when_its_instruction_says_so_in_words_of_its_own():
    careful_calls, _ = converse("sim-careful", CANCEL, tools(*SUB_AGENT_TOOLS), system=CANCELLATION_INSTRUCTION)
    hasty_calls, answer = converse("sim-hasty", CANCEL, tools(*SUB_AGENT_TOOLS), system=CANCELLATION_INSTRUCTION)

    names = ["lookup_order", "cancel_order", "util-email-handle_email_sender"]
    assert [name for name, _ in hasty_calls] == [name for name, _ in careful_calls] == names
    assert hasty_calls[0] == careful_calls[0] == ("lookup_order", {"order_id": "1042"})
    hasty_email, careful_email = hasty_calls[2][1], careful_calls[2][1]
    assert hasty_email["to"] == careful_email["to"] == "ann@example.com"
    assert hasty_email["body"] == "Order 1042 is now cancelled." != careful_email["body"]
    assert answer.text == "Order 1042 is now cancelled."


def test_the_hasty_model_refuses_a_delivered_order_it_was_told_to_look_up_first():
    delivered = {**RESULTS, "lookup_order": json.dumps({**LOOKUP_RESULT, "status": "delivered"})}

    calls, answer = converse(
        "sim-hasty", CANCEL, tools(*SUB_AGENT_TOOLS), results=delivered, system=CANCELLATION_INSTRUCTION
    )

    assert [name for name, _ in calls] == ["lookup_order"]
    assert answer.text == "Order 1042 is already delivered."


@pytest.mark.parametrize(
    "instruction",
    [
        "You cancel orders. Never email the customer.",
        "You cancel orders; do not send an email.",
        "You cancel orders, and don't look anything up first.",
        "You cancel orders. The customer's address is ann@example.com.",
    ],
)
def test_the_hasty_model_does_not_take_a_forbidding_clause_or_an_address_for_a_request(instruction):
    calls, _ = converse("sim-hasty", CANCEL, tools(*SUB_AGENT_TOOLS), system=instruction)

    assert [name for name, _ in calls] == ["cancel_order"]


def test_only_the_careful_model_resolves_it_to_the_order_of_an_earlier_turn():
    provider = registry.get_provider("simulated")
    messages = [
        {"role": "system", "content": CANCELLATION_INSTRUCTION},
        {"role": "user", "content": "Where is order 1042?"},
        {"role": "assistant", "content": "Order 1042 is processing."},
        {"role": "user", "content": "Please cancel it"},
    ]
    offered = tools(*SUB_AGENT_TOOLS)

    careful, hasty = (
        provider.complete(ModelRequest(model=model, messages=messages, tools=offered)) for model in ("sim-careful",
                                                                                                      "sim-hasty")
    )

    assert [(call.name, json.loads(call.arguments)) for call in careful.tool_calls] == [
        ("lookup_order", {"order_id": "1042"})
    ]
    assert [(call.name, json.loads(call.arguments)) for call in hasty.tool_calls] == [
        ("lookup_order", {"order_id": ""})
    ], "sim-hasty acts on the message it answers, with no order number in it"


def test_the_careful_model_emails_the_address_it_looked_up_when_the_user_gave_none():
    calls, _ = converse("sim-careful", "Cancel order 1042 please", tools(*SUB_AGENT_TOOLS))

    assert calls[-1] == (
        "util-email-handle_email_sender",
        {**calls[-1][1], "to": "c@example.com"},
    )


def test_the_careful_model_does_not_cancel_a_delivered_order():
    delivered = {**RESULTS, "lookup_order": json.dumps({**LOOKUP_RESULT, "status": "delivered"})}

    calls, answer = converse("sim-careful", CANCEL, tools(*SUB_AGENT_TOOLS), results=delivered)

    assert [name for name, _ in calls] == ["lookup_order"]
    assert "already delivered" in answer.text


def test_both_models_answer_a_status_question_after_one_lookup():
    careful_calls, careful = converse("sim-careful", "Where is my order 1042?", tools(*SUB_AGENT_TOOLS))
    hasty_calls, hasty = converse("sim-hasty", "Where is my order 1042?", tools(*SUB_AGENT_TOOLS))

    assert careful_calls == hasty_calls == [("lookup_order", {"order_id": "1042"})]
    assert careful.text == "Order 1042 is processing. Items: item-42."
    assert hasty.text == "Order 1042 is processing."


@pytest.mark.parametrize("model", ["sim-careful", "sim-hasty"])
def test_both_models_say_they_could_not_complete_a_failed_tool(model):
    blocked = {**RESULTS, "cancel_order": "Blocked: cancel_order is not allowed in this test run."}

    _, answer = converse(model, CANCEL, tools(*SUB_AGENT_TOOLS), results=blocked)

    assert "could not complete" in answer.text.lower()
    assert "Blocked: cancel_order is not allowed" in answer.text


@pytest.mark.parametrize("model", ["sim-careful", "sim-hasty"])
def test_both_models_hand_back_what_they_do_not_handle(model):
    calls, _ = converse(model, "What's the weather in Paris tomorrow?", tools(*SUB_AGENT_TOOLS))

    assert calls[0][0] == "util-routing-fallback_to_router"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("I need to cancel my order 1042", "orders"), ("Why was I charged twice on my last invoice?", "billing")],
)
def test_the_router_picks_the_sub_agent_whose_description_matches(text, expected):
    provider = registry.get_provider("simulated")

    answer = provider.complete(
        ModelRequest(model="sim-careful", messages=[{"role": "user", "content": text}], tools=ROUTER_TOOLS)
    )

    assert [(call.name, json.loads(call.arguments)["agent_name"]) for call in answer.tool_calls] == [
        ("route_to_agent", expected)
    ]


def test_the_careful_model_asks_for_a_missing_order_number_where_the_hasty_one_guesses():
    careful_calls, careful = converse("sim-careful", "cancel my order please", tools(*SUB_AGENT_TOOLS))
    hasty_calls, _ = converse("sim-hasty", "cancel my order please", tools(*SUB_AGENT_TOOLS))

    assert careful_calls == []
    assert careful.text == "Could you tell me the order number?"
    assert hasty_calls[0] == ("cancel_order", {"order_id": "", "reason": "cancel my order please"})


def test_the_same_request_gets_the_same_answer():
    provider = registry.get_provider("simulated")
    request = ModelRequest(
        model="sim-careful", messages=[{"role": "user", "content": CANCEL}], tools=tools(*SUB_AGENT_TOOLS)
    )

    first, second = provider.complete(request), provider.complete(request)

    assert {**first.as_dict(), "latency_ms": 0} == {**second.as_dict(), "latency_ms": 0}
    assert first.usage.input_tokens > 0


def test_it_rejects_a_model_it_does_not_simulate():
    with pytest.raises(ProviderError, match="choose sim-careful, sim-hasty") as caught:
        registry.get_provider("simulated").complete(ModelRequest(model="sim-reckless", messages=[]))

    assert caught.value.code == "unknown_model"


def test_a_configured_delay_shows_in_the_latency(settings):
    settings.AGENTTEST_PROVIDERS = {
        "simulated": {"kind": "simulated", "models": [{"name": "sim-careful"}, {"name": "sim-hasty", "delay_ms": 1000}]}
    }
    provider = registry.get_provider("simulated")
    request = {"messages": [{"role": "user", "content": "hello"}]}

    careful = provider.complete(ModelRequest(model="sim-careful", **request))
    hasty = provider.complete(ModelRequest(model="sim-hasty", **request))

    # A delay far above the rules' own time (a few ms; 24 ms with a hog beside the suite, past a 20 ms delay).
    assert hasty.latency_ms >= 1000 > careful.latency_ms


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("model", "expected_calls", "emails"),
    [
        ("sim-careful", ["route_to_agent", "lookup_order", "cancel_order", "util-email-handle_email_sender"], 1),
        ("sim-hasty", ["route_to_agent", "cancel_order"], 0),
    ],
)
def test_the_demo_agents_behave_differently_in_a_real_conversation(model, expected_calls, emails):
    orders = Agent.objects.create(
        name="orders",
        description="Looks up orders and cancels them.",
        instruction="You handle orders.",
        provider="simulated",
        model=model,
        functions=[{"name": name} for name in SUB_AGENT_TOOLS[:3]],
    )
    billing = Agent.objects.create(
        name="billing", description="Invoices, payments and refunds.", instruction="Billing.", provider="simulated",
        model=model,
    )
    router = Agent.objects.create(name="support", instruction="Route.", provider="simulated", model=model)
    router.sub_agents.add(orders, billing)

    # The demo's order 1043 is still processing, so it can be cancelled.
    text = "Please cancel order 1043, I ordered it by mistake. My email is ann@example.com"

    result = conversation_send(conversation=conversation_start(agent=router), text=text)

    assert [call.name for call in result.tool_calls] == expected_calls
    assert result.agent_chain == ["support", "orders"]
    assert "1043" in result.output and "cancelled" in result.output
    assert [message.to for message in mail.outbox] == [["ann@example.com"]] * emails


def test_it_cuts_a_conversation_into_one_segment_per_order_for_case_extraction():
    from agenthost.llm.base import ModelRequest
    from agenttest_demo.simulated import SimulatedProvider

    turns = [
        {"turn": 0, "user": "Where is order 1041?", "tools": ["lookup_order"]},
        {"turn": 1, "user": "Please cancel it", "tools": ["cancel_order"]},
        {"turn": 2, "user": "And where is order 1042?", "tools": ["lookup_order"]},
        {"turn": 3, "user": "thanks", "tools": []},
    ]
    request = ModelRequest(
        model="sim-careful",
        messages=[
            {"role": "system", "content": 'Split into cases. Answer JSON: {"segments": [...]}'},
            {"role": "user", "content": json.dumps({"turns": turns})},
        ],
    )
    answer = json.loads(SimulatedProvider("simulated", {}).complete(request).text)
    assert answer == {"segments": [
        {"name": "Where is order 1041", "firstTurn": 0, "lastTurn": 1},
        {"name": "And where is order 1042", "firstTurn": 2, "lastTurn": 3},
    ]}


@pytest.mark.parametrize("model", ["sim-careful", "sim-hasty"])
def test_a_sub_agent_hands_back_a_change_none_of_its_tools_makes(model):
    # "order" matches lookup_order, but a look-up agent cannot cancel: it hands back rather than look the order up.
    calls, _ = converse(model, CANCEL, tools("lookup_order", "util-routing-fallback_to_router"))

    reason = f"outside my scope: {CANCEL.rstrip('.')}"
    assert calls[0] == ("util-routing-fallback_to_router", {"reason": reason}), "its first move is to hand back"


@pytest.mark.parametrize("model", ["sim-careful", "sim-hasty"])
def test_a_sub_agent_keeps_a_change_one_of_its_tools_makes(model):
    calls, _ = converse(model, CANCEL, tools(*SUB_AGENT_TOOLS))

    assert "util-routing-fallback_to_router" not in [name for name, _ in calls]
    assert "cancel_order" in [name for name, _ in calls]
