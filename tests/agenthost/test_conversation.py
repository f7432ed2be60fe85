"""The conversation loop on the scripted model: tool round trips, bad tool calls, limits, routing, state, hooks."""

from __future__ import annotations

import json

import pytest

from agenthost.executor import unregister_executor_provider
from agenthost.functions import FunctionResult
from agenthost.llm.scripted import Answer, Call, Fail
from agenthost.loading import unregister_agent_load_hook
from agenthost.models import Agent, Message
from agenthost.seams import ModelCallFailed, StepLimitExceeded, register_agent_load_hook, register_executor_provider
from agenthost.selectors import conversation_state
from agenthost.services import conversation_invoke_function, conversation_send, conversation_start
from tests.order_tools import TRACK_ORDER, VOID_ORDER

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(scripted_model):
    return Agent.objects.create(
        name="support",
        instruction="You help {{ customer|default:'a customer' }}.",
        provider=scripted_model.provider_name,
        model=scripted_model.model,
        functions=[
            {"name": TRACK_ORDER},
            {"name": VOID_ORDER},
            {"name": "greeting", "description": "A fixed greeting.", "output": "Hello from a static function"},
        ],
    )


def test_it_runs_a_tool_round_trip_and_feeds_the_result_back(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1041"})]), Answer("It has shipped."))
    conversation = conversation_start(agent=agent, initial_state={"customer": "Ana"})
    result = conversation_send(conversation=conversation, text="Where is order 1041?")

    assert result.output == "It has shipped."
    assert [(c.name, c.arguments, c.outcome) for c in result.tool_calls] == [
        (TRACK_ORDER, {"order_id": "1041"}, "executed")
    ]
    assert json.loads(result.tool_calls[0].result)["status"] == "shipped"
    assert result.agent_chain == ["support"]
    assert result.steps == 2 and result.usage.total_tokens > 0
    first, second = scripted_model.requests
    assert first.messages[0] == {"role": "system", "content": "You help Ana."}
    assert {t["function"]["name"] for t in first.tools} == {TRACK_ORDER, VOID_ORDER, "greeting"}
    tool_message = second.messages[-1]
    assert tool_message["role"] == "tool" and "shipped" in tool_message["content"]
    assert second.messages[-2]["tool_calls"][0]["function"]["name"] == TRACK_ORDER
    assert conversation_state(conversation=conversation) == {
        "customer": "Ana",
        "order_id": "1041",
        "order_status": "shipped",
    }


def test_it_sends_malformed_tool_arguments_back_to_the_model_as_an_error(agent, scripted_model):
    scripted_model.play(
        Answer(tool_calls=[Call(TRACK_ORDER, '{"order_id": 10')]),
        Answer(tool_calls=[Call(TRACK_ORDER, "[1, 2]")]),
        Answer("Sorry, I could not read that order number."),
    )
    conversation = conversation_start(agent=agent)
    result = conversation_send(conversation=conversation, text="Where is my order?")
    assert result.output == "Sorry, I could not read that order number."
    assert [c.outcome for c in result.tool_calls] == ["invalid", "invalid"]
    assert "not valid JSON" in scripted_model.requests[1].messages[-1]["content"]
    assert "must be a JSON object" in scripted_model.requests[2].messages[-1]["content"]


def test_it_stops_with_a_clear_error_at_the_step_limit(agent, scripted_model, settings):
    settings.AGENTTEST_MAX_STEPS = 3
    scripted_model.play(*[Answer(tool_calls=[Call("greeting", {})]) for _ in range(5)])
    conversation = conversation_start(agent=agent)
    with pytest.raises(StepLimitExceeded, match="within 3 model steps") as raised:
        conversation_send(conversation=conversation, text="hi")
    assert len(scripted_model.requests) == 3
    assert raised.value.partial.steps == 3 and len(raised.value.partial.tool_calls) == 3


def test_it_ends_the_turn_on_a_stop_completion_and_answers_every_pending_call(agent, scripted_model):
    agent.functions = [*agent.functions, {"name": "response_to_user"}]
    agent.save()
    scripted_model.play(
        Answer(tool_calls=[Call("response_to_user", {"content": "Done."}), Call(VOID_ORDER, {"order_id": "7"})]),
        Answer("next turn"),
    )
    conversation = conversation_start(agent=agent)
    result = conversation_send(conversation=conversation, text="cancel 7")
    assert (result.output, result.finish) == ("Done.", "stop_completion")
    assert len(scripted_model.requests) == 1
    assert conversation_state(conversation=conversation) == {}
    conversation_send(conversation=conversation, text="thanks")
    replayed = scripted_model.requests[1].messages
    assert [m["tool_call_id"] for m in replayed if m["role"] == "tool"] == ["call_1", "call_2"]


def test_it_stops_the_turn_when_no_implementation_exists(agent, scripted_model):
    agent.functions = [*agent.functions, {"name": "send_fax", "description": "Declared, implemented nowhere."}]
    agent.save()
    scripted_model.play(Answer(tool_calls=[Call("send_fax", {})]))
    conversation = conversation_start(agent=agent)
    result = conversation_send(conversation=conversation, text="fax it")
    assert result.output == "Can't find function implementation of send_fax"
    assert result.finish == "missing_function" and len(scripted_model.requests) == 1


def test_it_answers_a_static_function_from_the_agent_declaration(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call("greeting", {})]), Answer("ok"))
    result = conversation_send(conversation=conversation_start(agent=agent), text="hello")
    assert result.tool_calls[0].result == "Hello from a static function"


def test_it_raises_a_model_error_with_what_happened_before(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call("greeting", {})]), Fail(code="rate_limited", message="slow down"))
    with pytest.raises(ModelCallFailed, match="slow down") as raised:
        conversation_send(conversation=conversation_start(agent=agent), text="hello")
    assert raised.value.provider_code == "rate_limited"
    assert [c.name for c in raised.value.partial.tool_calls] == ["greeting"]


def test_it_routes_to_a_sub_agent_and_back_recording_the_chain(scripted_model):
    router = Agent.objects.create(name="router", instruction="Route.", provider="scripted", model="scripted")
    orders = Agent.objects.create(
        name="orders",
        description="Order questions",
        instruction="Orders.",
        provider="scripted",
        model="scripted",
        functions=[{"name": TRACK_ORDER}],
    )
    router.sub_agents.add(orders)
    scripted_model.play(
        Answer(tool_calls=[Call("route_to_agent", {"agent_name": "orders"})]),
        Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "12"})]),
        Answer("Order 12 is processing."),
        Answer(tool_calls=[Call("util-routing-fallback_to_router", {"reason": "weather"})]),
        Answer("I only know orders."),
    )
    conversation = conversation_start(agent=router)
    first = conversation_send(conversation=conversation, text="Where is order 12?")
    assert first.agent_chain == ["router", "orders"]
    router_tools = {t["function"]["name"] for t in scripted_model.requests[0].tools}
    orders_tools = {t["function"]["name"] for t in scripted_model.requests[1].tools}
    assert router_tools == {"route_to_agent"}
    assert orders_tools == {TRACK_ORDER, "util-routing-fallback_to_router"}
    assert scripted_model.requests[1].messages[0]["content"] == "Orders."
    second = conversation_send(conversation=conversation, text="And the weather?")
    assert second.agent_chain == ["orders", "router"] and second.output == "I only know orders."
    agents_by_role = list(
        Message.objects.filter(conversation=conversation, role="assistant").values_list("agent__name", flat=True)
    )
    assert agents_by_role == ["router", "orders", "orders", "orders", "router"]


def test_it_refuses_to_route_to_an_agent_that_is_not_a_sub_agent(scripted_model):
    router = Agent.objects.create(name="router", instruction="Route.", provider="scripted", model="scripted")
    Agent.objects.create(name="stranger", instruction="x", provider="scripted", model="scripted")
    router.sub_agents.add(Agent.objects.create(name="orders", instruction="x", provider="scripted", model="scripted"))
    scripted_model.play(Answer(tool_calls=[Call("route_to_agent", {"agent_name": "stranger"})]), Answer("ok"))
    result = conversation_send(conversation=conversation_start(agent=router), text="hi")
    assert result.agent_chain == ["router"]
    assert "Cannot route to 'stranger'" in result.tool_calls[0].result and "orders" in result.tool_calls[0].result


def test_it_derives_state_at_any_message(agent, scripted_model):
    scripted_model.play(
        Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1041"})]),
        Answer("shipped"),
        Answer(tool_calls=[Call(VOID_ORDER, {"order_id": "1040"})]),
        Answer("cancelled"),
    )
    conversation = conversation_start(agent=agent, initial_state={"customer": "Ana"})
    conversation_send(conversation=conversation, text="where is 1041")
    conversation_send(conversation=conversation, text="cancel 1040")
    results = list(Message.objects.filter(conversation=conversation, role="tool_result").order_by("seq"))
    assert conversation_state(conversation=conversation, at_seq=0) == {"customer": "Ana"}
    assert conversation_state(conversation=conversation, at_seq=results[0].seq)["order_status"] == "shipped"
    assert conversation_state(conversation=conversation)["order_status"] == "cancelled"
    assert results[0].state_changes.count() == 2


def test_it_writes_history_before_the_first_turn_and_numbers_turns_after_it(agent, scripted_model):
    scripted_model.play(Answer("Welcome back."))
    conversation = conversation_start(
        agent=agent, history=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    )
    result = conversation_send(conversation=conversation, text="Me again")
    assert result.turn == 1
    assert [m["role"] for m in scripted_model.requests[0].messages] == ["system", "user", "assistant", "user"]


def test_it_lets_an_agent_load_hook_rewrite_the_model_for_that_conversation_only(agent, scripted_model):
    seen = []

    def hook(loaded, conversation):
        seen.append(loaded.name)
        if "override" in conversation.tags:
            loaded.model = "other-model"

    register_agent_load_hook(hook)
    try:
        scripted_model.play(Answer("a"), Answer("b"))
        conversation_send(conversation=conversation_start(agent=agent, tags=["override"]), text="x")
        conversation_send(conversation=conversation_start(agent=agent), text="y")
    finally:
        unregister_agent_load_hook(hook)
    assert [r.model for r in scripted_model.requests] == ["other-model", "scripted"]
    agent.refresh_from_db()
    assert agent.model == "scripted" and len(seen) >= 2


class SpyProvider:
    name = "spy"
    order = 0

    def __init__(self):
        self.seen: list[tuple[str, str]] = []

    def resolve(self, name, context):
        self.seen.append((name, context.trigger))
        if name == TRACK_ORDER:
            return lambda ctx: FunctionResult(content="spied", outcome="mocked")
        return None


def test_it_executes_a_rule_triggered_call_with_differently_cased_name_through_the_factory(scripted_model):
    agent = Agent.objects.create(
        name="ruled",
        instruction="x",
        provider="scripted",
        model="scripted",
        functions=[{"name": TRACK_ORDER}, {"name": VOID_ORDER}],
        rules=[
            {"trigger": "conversation_started", "function": TRACK_ORDER.upper(), "arguments": {"order_id": "5"}},
            {
                "trigger": "state_changed",
                "key": "order_status",
                "function": VOID_ORDER.title(),
                "arguments": {"order_id": "5"},
            },
        ],
    )
    spy = SpyProvider()
    register_executor_provider(spy)
    try:
        conversation = conversation_start(agent=agent)
        conversation_invoke_function(
            conversation=conversation, name=TRACK_ORDER, arguments={"order_id": "6"}, record=True
        )
    finally:
        unregister_executor_provider(spy)
    assert (TRACK_ORDER, "rule") in spy.seen
    calls = list(
        Message.objects.filter(conversation=conversation, role="tool_result").values_list("function_name", "content")
    )
    assert calls[0] == (TRACK_ORDER, "spied")


def test_it_fires_a_state_changed_rule_with_the_canonical_name(scripted_model):
    agent = Agent.objects.create(
        name="ruled",
        instruction="x",
        provider="scripted",
        model="scripted",
        functions=[{"name": TRACK_ORDER}, {"name": VOID_ORDER}],
        rules=[
            {
                "trigger": "state_changed",
                "key": "order_id",
                "function": VOID_ORDER.upper(),
                "arguments": {"order_id": "1041"},
            }
        ],
    )
    scripted_model.play(Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1041"})]), Answer("done"))
    conversation = conversation_start(agent=agent)
    conversation_send(conversation=conversation, text="where is 1041")
    rule_calls = Message.objects.filter(conversation=conversation, role="tool_call", trigger="rule")
    assert list(rule_calls.values_list("function_name", flat=True)) == [VOID_ORDER]
    assert conversation_state(conversation=conversation)["order_status"] == "cancelled"


def test_it_stores_a_reply_and_tool_result_carrying_nul_bytes(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call("greeting", {"x": "a\x00b"})]), Answer("odd \x00 reply"))
    result = conversation_send(conversation=conversation_start(agent=agent), text="hi \x00 there")
    assert result.output == "odd \ufffd reply"
    assert Message.objects.filter(content="hi \ufffd there").exists()


def test_it_renders_each_conversations_own_state_into_one_instruction(agent, scripted_model):
    # The compiled instruction is shared between conversations (and threads); what it renders must not be.
    scripted_model.play(Answer("Hi Ana."), Answer("Hi."), Answer("Hi Bo."))
    for customer in ("Ana", None, "Bo"):
        conversation = conversation_start(agent=agent, initial_state={"customer": customer} if customer else {})
        conversation_send(conversation=conversation, text="Hello")

    assert [request.messages[0]["content"] for request in scripted_model.requests] == [
        "You help Ana.", "You help a customer.", "You help Bo."
    ]


@pytest.mark.parametrize("instruction", ["You help customers {with braces} and 50% off.", "A {plain} {% text"])
def test_it_sends_an_instruction_without_template_markup_as_written(scripted_model, instruction):
    plain = Agent.objects.create(
        name="plain", instruction=instruction, provider=scripted_model.provider_name, model=scripted_model.model
    )
    scripted_model.play(Answer("Hi."))

    conversation_send(conversation=conversation_start(agent=plain), text="Hello")

    assert scripted_model.requests[0].messages[0] == {"role": "system", "content": instruction}
