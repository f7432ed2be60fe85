"""The `langgraph` runtime: a team's LangGraph agent, written the way LangChain's documentation writes it
(`create_agent` over `ChatOpenAI` and `@tool` functions), runs with LangGraph's own loop — its model calls through
agenttest's model layer, its tool calls through the seam."""

from __future__ import annotations

import json
import re
import sys

import pytest
from django.db import connection

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message
from agenthost.runtimes.base import get_runtime
from agenthost.runtimes.entry import load_entry
from agenthost.services import conversation_send, conversation_start
from tests.runtimes.conftest import markers, suite_finding_order
from tests.runtimes.harness import AssertionPlan, MockSpec, TurnPlan
from tests.runtimes.shop import (
    QUESTION,
    assert_mocked_then_blocked,
    assert_sent_alike,
    case_plan,
    execute_on,
    find_order_mocked,
    play_find_then_email,
    record_then_replay,
    replayed_after_a_change,
    shop_agent,
)

pytestmark = pytest.mark.django_db(transaction=True)

SHOP_GRAPH = '''
import os
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

MARKERS = Path(os.environ.get("SHOP_MARKERS", "markers"))
PROMPT = "You are the shop's assistant. Look orders up before answering."


@tool
def find_order(order_id: str) -> dict:
    """Find an order by its number."""
    return {"order_id": order_id, "status": "shipped"}


@tool
def send_email(to: str, body: str) -> str:
    """Email the customer."""
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"email-{len(list(MARKERS.iterdir()))}").write_text(f"{to}: {body}")
    return "sent"


def model():
    return ChatOpenAI(model="gpt-4o-mini", temperature=0.2, api_key="unused-key", max_retries=0)


graph = create_agent(model(), tools=[find_order, send_email], system_prompt=PROMPT)


def make_graph():
    return graph
'''


def _agent(package: str, attribute: str = "graph", **fields) -> Agent:
    return shop_agent("langgraph", f"{package}.bot:{attribute}", **fields)


def test_it_runs_langgraphs_loop_with_the_real_tools_in_chat(scripted_model, team_repo, tmp_path):
    agent = _agent(team_repo(SHOP_GRAPH))
    play_find_then_email(scripted_model)

    result = conversation_send(conversation=conversation_start(agent=agent), text=QUESTION)

    assert result.output == "Done: I emailed you."
    assert [(call.name, call.outcome) for call in result.tool_calls] == [
        ("find_order", "executed"), ("send_email", "executed"),
    ]
    assert [marker.read_text() for marker in markers(tmp_path)] == ["ana@example.com: Your order has shipped."]
    first, second = scripted_model.requests[0], scripted_model.requests[1]
    # The graph's own request: its system prompt, its tool schemas, its settings.
    assert first.messages[0] == {"role": "system",
                                 "content": "You are the shop's assistant. Look orders up before answering."}
    assert [tool["function"]["name"] for tool in first.tools] == ["find_order", "send_email"]
    assert first.temperature == 0.2
    assert second.messages[-1]["content"] == '{"order_id": "1042", "status": "shipped"}'
    assert result.nodes_visited == ["model", "tools", "model", "tools", "model"]


STUB_GRAPH = SHOP_GRAPH.replace(
    'def model():\n    return ChatOpenAI(model="gpt-4o-mini", temperature=0.2, api_key="unused-key", max_retries=0)',
    'def model(base_url=None):\n'
    '    return ChatOpenAI(model="gpt-4o-mini", temperature=0.2, api_key="unused-key", max_retries=0,\n'
    '                      base_url=base_url)',
) + '''

def build(base_url=None):
    return create_agent(model(base_url), tools=[find_order, send_email], system_prompt=PROMPT)
'''


def test_it_sends_the_request_the_graph_sends_when_it_runs_on_its_own(stub, team_repo):
    package = team_repo(STUB_GRAPH)
    agent = _agent(package, provider="stub", model="gpt-4o-mini")
    under_agenttest = conversation_send(conversation=conversation_start(agent=agent), text="Where is order 1042?")
    through_agenttest = stub.requests

    module = sys.modules[f"{package}.bot"]
    alone = module.build(stub.base_url).invoke({"messages": [{"role": "user", "content": "Where is order 1042?"}]})

    assert alone["messages"][-1].content == under_agenttest.output
    assert_sent_alike(through_agenttest, stub.requests[len(through_agenttest):])


def test_it_records_the_graphs_loop_replays_it_offline_and_reports_a_changed_prompt_stale(stub, team_repo):
    suite = suite_finding_order(_agent(team_repo(STUB_GRAPH), provider="stub", model="gpt-4o-mini"))

    record_then_replay(suite, stub)

    changed = team_repo(STUB_GRAPH.replace("Look orders up before", "Always look orders up before"))
    assert "Always look orders up" in replayed_after_a_change(suite, f"{changed}.bot:graph")


# A custom StateGraph: a router node, a subgraph, and a refund that asks the user before it is made (interrupt).
REFUND_GRAPH = '''
from typing import Literal

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt


class State(MessagesState):
    customer: str


def route(state: State) -> Literal["refund", "greet"]:
    return "refund" if "refund" in state["messages"][-1].content else "greet"


def greet(state: State):
    return {"messages": [AIMessage(f"Hello {state.get('customer', 'there')}!")]}


def confirm(state: State):
    answer = interrupt("Refund order 1042? (yes/no)")
    return {"messages": [AIMessage("Refunded." if answer == "yes" else "Kept as it is.")]}


inner = StateGraph(State)
inner.add_node("confirm", confirm)
inner.add_edge(START, "confirm")
refund = inner.compile()

outer = StateGraph(State)
outer.add_node("greet", greet)
outer.add_node("refund", refund)
outer.add_conditional_edges(START, route)
outer.add_edge("greet", END)
outer.add_edge("refund", END)
graph = outer.compile()
uncompiled = outer
'''


def test_an_interrupt_is_answered_by_the_next_turn_of_the_case(scripted_model, team_repo):
    agent = _agent(team_repo(REFUND_GRAPH))
    plan = case_plan(
        agent, initial_state={"customer": "Ana"}, turns=[
            TurnPlan("hi", [AssertionPlan("nodesVisited", {"nodes": ["greet"], "mode": "exact"})]),
            TurnPlan("I want a refund", [AssertionPlan("nodesVisited", {"nodes": ["refund/confirm"]})]),
            TurnPlan("yes", [AssertionPlan("nodesVisited", {"nodes": ["greet"], "mode": "contains"})]),
        ],
        assertions=[
            AssertionPlan("outputContains", {"text": "Refunded."}),
            AssertionPlan("nodesVisited", {"nodes": ["greet", "refund/confirm", "refund"], "mode": "ordered"}),
            AssertionPlan("nodesVisited", {"nodes": ["refund", "greet"], "mode": "ordered"}),
            AssertionPlan("routedToAgent", {"agent": "refund"}),
        ],
    )

    execution = execute_on(scripted_model, plan)

    assert execution.status == "failed", execution.reason
    # The third turn resumed the refund subgraph: it did not pass through greet, and the assertion says so.
    assert [(outcome["type"], outcome["status"]) for outcome in execution.assertions] == [
        ("nodesVisited", "passed"), ("nodesVisited", "passed"), ("nodesVisited", "failed"),
        ("outputContains", "passed"), ("nodesVisited", "passed"), ("nodesVisited", "failed"),
        ("routedToAgent", "passed"),
    ]
    assert execution.assertions[2]["message"] == (
        "the nodes visited were refund → refund/confirm; expected contains greet"
    )
    answers = list(Message.objects.filter(conversation_id=execution.conversation_id, role="assistant")
                   .order_by("id").values_list("content", flat=True))
    assert answers == ["Hello Ana!", "Refund order 1042? (yes/no)", "Refunded."]


def test_a_graph_in_chat_continues_its_thread_and_names_the_nodes_it_ran(team_repo):
    agent = _agent(team_repo(REFUND_GRAPH))
    conversation = conversation_start(agent=agent)

    asked = conversation_send(conversation=conversation, text="I want a refund")
    answered = conversation_send(conversation=conversation, text="no")

    assert asked.output == "Refund order 1042? (yes/no)"
    assert answered.output == "Kept as it is."
    assert (asked.nodes_visited, answered.nodes_visited) == (["refund", "refund/confirm"], ["refund", "refund/confirm"])
    # The refund subgraph is an agent of the graph's: each turn was routed to it.
    assert answered.agent_chain == ["shop", "refund"]


def _this_database_url() -> str:
    """The test database as a URL, for a child process of the chat path (which reads DATABASE_URL)."""
    database = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{database['NAME']}"
    return (f"postgres://{database['USER']}:{database['PASSWORD']}@{database['HOST']}:{database['PORT']}/"
            f"{database['NAME']}")


def test_it_resumes_a_graph_paused_at_an_interrupt_in_the_next_chat_turns_own_process(team_repo, monkeypatch):
    # As the web process sends a chat turn: each in a child process of its own, which ends with the turn.
    monkeypatch.setenv("DATABASE_URL", _this_database_url())
    conversation = conversation_start(agent=_agent(team_repo(REFUND_GRAPH)))

    asked = conversation_send(conversation=conversation, text="I want a refund", team_code_in_child=True)
    answered = conversation_send(conversation=conversation, text="yes", team_code_in_child=True)

    assert asked.output == "Refund order 1042? (yes/no)"
    # The second process resumed the refund the first one paused, with the user's answer: not a new run from greet.
    assert (answered.output, answered.nodes_visited) == ("Refunded.", ["refund", "refund/confirm"])
    assert conversation_send(conversation=conversation, text="hi", team_code_in_child=True).output == "Hello there!"


def test_an_entry_that_is_not_a_compiled_graph_is_refused_without_running_it(team_repo):
    package = team_repo(REFUND_GRAPH)
    runtime = get_runtime("langgraph")

    assert "not compiled" in runtime.entry_problem(load_entry(f"{package}.bot:uncompiled"), "x:uncompiled")
    assert "must be a compiled LangGraph graph" in runtime.entry_problem(load_entry(f"{package}.bot:State"), "x:State")
    assert runtime.entry_problem(load_entry(f"{package}.bot:graph"), "x:graph") == ""
    shop = team_repo(SHOP_GRAPH)
    declared = runtime.tool_declarations(load_entry(f"{shop}.bot:make_graph"))
    assert [(tool["name"], sorted(tool["parameters"]["properties"])) for tool in declared] == [
        ("find_order", ["order_id"]), ("send_email", ["body", "to"]),
    ]
    assert declared[0]["returns"] == {"additionalProperties": True, "type": "object"}


# A node that calls its tools itself — no ToolNode — one of them async, and its model asynchronously.
DIRECT_GRAPH = '''
import os
from pathlib import Path

from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

MARKERS = Path(os.environ.get("SHOP_MARKERS", "markers"))


@tool
def find_order(order_id: str) -> dict:
    """Find an order by its number."""
    return {"order_id": order_id, "status": "shipped"}


@tool
async def refund(order_id: str) -> str:
    """Refund an order."""
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"refund-{order_id}").write_text("refunded")
    return "refunded"


async def handle(state: MessagesState):
    found = find_order.invoke({"order_id": "1042"})
    done = await refund.ainvoke({"order_id": "1042"})
    model = ChatOpenAI(model="gpt-4o-mini", api_key="unused-key", max_retries=0)
    reply = await model.ainvoke([SystemMessage(f"Order: {found}. Refund: {done}."), *state["messages"]])
    return {"messages": [AIMessage(reply.content)]}


builder = StateGraph(MessagesState)
builder.add_node("handle", handle)
builder.add_edge(START, "handle")
builder.add_edge("handle", END)
graph = builder.compile()
'''


def test_tools_a_node_calls_itself_go_through_the_seam_too(scripted_model, team_repo, tmp_path):
    agent = _agent(team_repo(DIRECT_GRAPH))
    scripted_model.play("Your refund is on its way.")
    plan = case_plan(
        agent, turns=[TurnPlan("Refund order 1042")], mocks=[MockSpec("find_order", '{"status": "delivered"}')],
        assertions=[AssertionPlan("toolCalled", {"function": "refund"})],
    )

    execution = execute_on(scripted_model, plan)

    assert markers(tmp_path) == []
    assert [(c["name"], c["outcome"]) for c in execution.tool_calls] == [
        ("find_order", "mocked"), ("refund", "blocked"),
    ]
    assert execution.status == "failed", execution.reason
    assert scripted_model.requests == []

    scripted_model.play("Your refund is on its way.")
    chat = conversation_send(conversation=conversation_start(agent=agent), text="Refund order 1042")
    assert chat.output == "Your refund is on its way."
    assert [marker.name for marker in markers(tmp_path)] == ["refund-1042"]
    assert scripted_model.requests[0].messages[0]["content"] == (
        "Order: {'order_id': '1042', 'status': 'shipped'}. Refund: refunded."
    )


# A node asking for structured output, and another model on the Responses API.
STRUCTURED_GRAPH = '''
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import BaseModel


class Verdict(BaseModel):
    order_id: str
    refundable: bool


async def judge(state: MessagesState):
    model = ChatOpenAI(model="gpt-4o-mini", api_key="unused-key", max_retries=0)
    verdict = model.with_structured_output(Verdict).invoke(state["messages"])
    writer = ChatOpenAI(model="gpt-4o-mini", api_key="unused-key", max_retries=0, use_responses_api=True)
    reply = await writer.ainvoke(f"Say whether order {verdict.order_id} is refundable: {verdict.refundable}")
    return {"messages": [AIMessage(reply.text)]}


builder = StateGraph(MessagesState)
builder.add_node("judge", judge)
builder.add_edge(START, "judge")
builder.add_edge("judge", END)
graph = builder.compile()
'''


def test_structured_output_and_the_responses_api_go_through_the_model_layer(scripted_model, team_repo):
    agent = _agent(team_repo(STRUCTURED_GRAPH))
    scripted_model.play('{"order_id": "1042", "refundable": true}', "Order 1042 is refundable.")

    result = conversation_send(conversation=conversation_start(agent=agent), text="Can I get a refund for 1042?")

    assert result.output == "Order 1042 is refundable."
    structured, written = scripted_model.requests
    assert structured.api == "chat" and structured.response_schema["name"] == "Verdict"
    assert sorted(structured.response_schema["schema"]["properties"]) == ["order_id", "refundable"]
    assert written.api == "responses"
    assert "Say whether order 1042 is refundable: True" in json.dumps(written.messages)


# A node streaming its model's answer (chat completions, with usage) and another's over the Responses API.
STREAMING_NODE_GRAPH = STRUCTURED_GRAPH.replace(
    'verdict = model.with_structured_output(Verdict).invoke(state["messages"])',
    'streamed = ChatOpenAI(model="gpt-4o-mini", api_key="unused-key", max_retries=0, stream_usage=True)\n'
    '    chunks = list(streamed.stream(state["messages"]))\n'
    '    whole = sum(chunks[1:], chunks[0])\n'
    '    verdict = Verdict.model_validate_json(whole.text)',
).replace(
    'reply = await writer.ainvoke(',
    'reply = None\n'
    '    async for chunk in writer.astream(',
).replace(
    'is refundable: {verdict.refundable}")',
    'is refundable: {verdict.refundable}"):\n'
    '        reply = chunk if reply is None else reply + chunk\n'
    '    reply.content = f"{reply.text} ({whole.usage_metadata[\'total_tokens\']} tokens, {len(chunks)} chunks)"',
)


def test_a_nodes_streamed_model_calls_are_answered_through_the_model_layer_as_chunks(scripted_model, team_repo):
    agent = _agent(team_repo(STREAMING_NODE_GRAPH))
    scripted_model.play('{"order_id": "1042", "refundable": true}', "Order 1042 is refundable.")

    result = conversation_send(conversation=conversation_start(agent=agent), text="Can I get a refund for 1042?")

    streamed, written = scripted_model.requests
    # Asked whole: the transport fields (stream, stream_options) are not part of the request the model layer answers.
    assert streamed.api == "chat" and written.api == "responses"
    assert "Say whether order 1042 is refundable: True" in json.dumps(written.messages)
    # The chunks the API streams: the message, its finish, and the usage stream_usage asked for.
    assert re.fullmatch(r"Order 1042 is refundable\. \(\d+ tokens, [3-9] chunks\)", result.output), result.output


# A node relaying an agent it streams with stream_mode="messages": LangChain then streams the agent's chat model.
MESSAGES_STREAM_GRAPH = '''
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

inner = create_agent(ChatOpenAI(model="gpt-4o-mini", api_key="unused-key", max_retries=0), tools=[])


def relay(state: MessagesState):
    streamed = inner.stream({"messages": state["messages"]}, stream_mode="messages")
    pieces = [chunk.text for chunk, _metadata in streamed if chunk.type == "AIMessageChunk"]
    return {"messages": [AIMessage(f"{''.join(pieces)} ({len(pieces)} chunks)")]}


builder = StateGraph(MessagesState)
builder.add_node("relay", relay)
builder.add_edge(START, "relay")
builder.add_edge("relay", END)
graph = builder.compile()
'''


def test_an_agent_streamed_with_stream_mode_messages_gets_its_answer_in_chunks(scripted_model, team_repo):
    agent = _agent(team_repo(MESSAGES_STREAM_GRAPH))
    scripted_model.play("Order 1042 has shipped.")

    result = conversation_send(conversation=conversation_start(agent=agent), text="Where is order 1042?")

    assert re.fullmatch(r"Order 1042 has shipped\. \([2-9] chunks\)", result.output), result.output
    (request,) = scripted_model.requests
    assert request.api == "chat" and request.messages[-1]["content"] == "Where is order 1042?"


STREAMING_SHOP_GRAPH = SHOP_GRAPH.replace(
    'max_retries=0)', 'max_retries=0, streaming=True, stream_usage=True)',
)


# The graph's model answering whole, and streaming (its tool calls then come in chunks LangChain puts together).
@pytest.mark.parametrize(("source", "attribute"), [(SHOP_GRAPH, "make_graph"), (STREAMING_SHOP_GRAPH, "graph")],
                         ids=["unstreamed", "streaming"])
def test_it_mocks_and_blocks_the_graphs_tool_calls_under_test_and_stops_the_turn(
    scripted_model, team_repo, tmp_path, source, attribute
):
    agent = _agent(team_repo(source), attribute)
    play_find_then_email(scripted_model)

    execution = execute_on(scripted_model, find_order_mocked(agent))

    assert_mocked_then_blocked(execution, tmp_path)
    assert scripted_model.requests[1].messages[-1]["content"] == '{"status": "lost"}'
    assert len(scripted_model.requests) == 2


STREAMING_STUB_GRAPH = STUB_GRAPH.replace(
    'def model(base_url=None):\n'
    '    return ChatOpenAI(model="gpt-4o-mini", temperature=0.2, api_key="unused-key", max_retries=0,\n'
    '                      base_url=base_url)',
    'def model(base_url=None, streaming=True):\n'
    '    return ChatOpenAI(model="gpt-4o-mini", temperature=0.2, api_key="unused-key", max_retries=0,\n'
    '                      base_url=base_url, streaming=streaming, stream_usage=streaming)',
).replace(
    'def build(base_url=None):\n    return create_agent(model(base_url),',
    'def build(base_url=None, streaming=True):\n    return create_agent(model(base_url, streaming),',
)


def test_a_streaming_graph_sends_the_request_the_graph_sends_unstreamed_on_its_own(stub, team_repo):
    package = team_repo(STREAMING_STUB_GRAPH)
    agent = _agent(package, provider="stub", model="gpt-4o-mini")
    under_agenttest = conversation_send(conversation=conversation_start(agent=agent), text="Where is order 1042?")
    through_agenttest = stub.requests

    # The stub answers unstreamed requests only: the graph on its own, its model not streaming, is the reference.
    module = sys.modules[f"{package}.bot"]
    alone = module.build(stub.base_url, streaming=False).invoke(
        {"messages": [{"role": "user", "content": "Where is order 1042?"}]}
    )

    assert alone["messages"][-1].content == under_agenttest.output
    assert_sent_alike(through_agenttest, stub.requests[len(through_agenttest):])


def test_it_records_a_streaming_graph_and_replays_it_with_the_server_gone(stub, team_repo):
    suite = suite_finding_order(_agent(team_repo(STREAMING_STUB_GRAPH), provider="stub", model="gpt-4o-mini"))

    record_then_replay(suite, stub)


# A graph whose state is not a messages state: the user's message is `question`, the reply `answer`, said on the
# graph's config metadata. It counts its turns in its own state, so a continued thread shows.
KEYED_GRAPH = '''
from typing import TypedDict

from langchain_openai import ChatOpenAI
from langgraph.graph import START, StateGraph


class State(TypedDict, total=False):
    question: str
    answer: str
    customer: str
    turns: int


def reply(state: State):
    model = ChatOpenAI(model="gpt-4o-mini", api_key="unused-key", max_retries=0)
    text = model.invoke(f"{state.get('customer', 'someone')} asks: {state['question']}").content
    turns = state.get("turns", 0) + 1
    return {"answer": f"{text} (turn {turns})", "turns": turns}


builder = StateGraph(State)
builder.add_node("reply", reply)
builder.add_edge(START, "reply")
graph = builder.compile().with_config(metadata={"agenttest": {"message": "question", "reply": "answer"}})
misnamed = builder.compile().with_config(metadata={"agenttest": {"message": "prompt"}})
'''


def test_a_graph_names_other_state_keys_for_the_message_and_the_reply(scripted_model, team_repo):
    package = team_repo(KEYED_GRAPH)
    agent = _agent(package)
    scripted_model.play("Order 1042 has shipped.", "It left on Monday.")
    plan = case_plan(
        agent, initial_state={"customer": "Ana"},
        turns=[TurnPlan("Where is order 1042?"), TurnPlan("When did it leave?")],
        assertions=[AssertionPlan("outputContains", {"text": "It left on Monday. (turn 2)"})],
    )

    execution = execute_on(scripted_model, plan)

    assert execution.status == "passed", execution.reason
    first, second = scripted_model.requests
    assert first.messages[-1]["content"] == "Ana asks: Where is order 1042?"
    assert second.messages[-1]["content"] == "Ana asks: When did it leave?"
    answers = list(Message.objects.filter(conversation_id=execution.conversation_id, role="assistant")
                   .order_by("id").values_list("content", flat=True))
    # The model's answer, then the graph's reply (its `answer` key): the second turn continued the thread.
    assert answers == ["Order 1042 has shipped.", "Order 1042 has shipped. (turn 1)",
                       "It left on Monday.", "It left on Monday. (turn 2)"]
    problem = get_runtime("langgraph").entry_problem(load_entry(f"{package}.bot:misnamed"), "x:misnamed")
    assert "names message key 'prompt', not a key of its state (answer, customer, question, turns)" in problem


# A chat model of another vendor's — here LangChain's own fake, not built on the openai SDK — in a team's node.
FOREIGN_GRAPH = '''
from langchain_core.language_models import FakeListChatModel
from langgraph.graph import START, MessagesState, StateGraph


def answer(state: MessagesState):
    model = FakeListChatModel(responses=["Order 1042 has shipped."])
    return {"messages": [model.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
graph = builder.compile()
'''


def test_a_chat_model_of_another_vendor_is_refused_under_test_naming_it_and_runs_in_chat(scripted_model, team_repo):
    agent = _agent(team_repo(FOREIGN_GRAPH))
    plan = case_plan(
        agent, turns=[TurnPlan("Where is order 1042?")],
        assertions=[AssertionPlan("outputContains", {"text": "shipped"})],
    )

    execution = execute_on(scripted_model, plan)

    assert execution.status == "error"
    assert ("a chat model of another vendor, FakeListChatModel (langchain_core.language_models.fake_chat_models)"
            in execution.reason)
    assert scripted_model.requests == []
    chatted = conversation_send(conversation=conversation_start(agent=agent), text="Where is order 1042?")
    assert chatted.output == "Order 1042 has shipped."


# A triage node hands off with Command(goto=…): to a create_agent subgraph ("support") or to a plain node ("billing").
HANDOFF_GRAPH = '''
from typing import Literal

from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command


@tool
def find_order(order_id: str) -> dict:
    """Find an order by its number."""
    return {"order_id": order_id, "status": "shipped"}


support = create_agent(ChatOpenAI(model="gpt-4o-mini", api_key="unused-key", max_retries=0), tools=[find_order])


def triage(state: MessagesState) -> Command[Literal["support", "billing"]]:
    return Command(goto="support" if "order" in state["messages"][-1].content else "billing")


def billing(state: MessagesState):
    return {"messages": [AIMessage("Billing will write to you.")]}


builder = StateGraph(MessagesState)
builder.add_node("triage", triage)
builder.add_node("support", support)
builder.add_node("billing", billing)
builder.add_edge(START, "triage")
builder.add_edge("support", END)
builder.add_edge("billing", END)
graph = builder.compile()
'''


def test_a_subgraphs_model_and_tool_calls_are_made_as_its_agent_after_a_goto(scripted_model, team_repo):
    agent = _agent(team_repo(HANDOFF_GRAPH))
    scripted_model.play(Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]), "Order 1042 has shipped.")

    result = conversation_send(conversation=conversation_start(agent=agent), text="Where is order 1042?")

    assert result.output == "Order 1042 has shipped."
    assert [(call.name, call.agent, call.outcome) for call in result.tool_calls] == [
        ("goto_support", "shop", "routed"), ("find_order", "support", "executed"),
    ]
    assert [request.metadata["agent"] for request in scripted_model.requests] == ["support", "support"]
    assert result.agent_chain == ["shop", "support"]
    assert result.nodes_visited == ["triage", "support", "support/model", "support/tools", "support/model"]


def test_a_command_goto_to_a_plain_node_is_routing_that_routed_to_agent_sees(scripted_model, team_repo):
    agent = _agent(team_repo(HANDOFF_GRAPH))
    plan = case_plan(
        agent, turns=[TurnPlan("A question about my invoice")],
        assertions=[AssertionPlan("routedToAgent", {"agent": "billing"}),
                    AssertionPlan("routedToAgent", {"agent": "support"})],
    )

    execution = execute_on(scripted_model, plan)

    assert [(outcome["type"], outcome["status"]) for outcome in execution.assertions] == [
        ("routedToAgent", "passed"), ("routedToAgent", "failed"),
    ]
    # The hand-off is a routing call of the graph's, as a framework's hand-off is written.
    assert [(m.role, m.function_name, m.author) for m in Message.objects.filter(
        conversation_id=execution.conversation_id, role__in=["tool_call", "tool_result"]).order_by("seq")] == [
        ("tool_call", "goto_billing", "shop"), ("tool_result", "goto_billing", "shop"),
    ]
    assert scripted_model.requests == []
