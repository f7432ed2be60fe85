"""The shop's front desk, a custom LangGraph `StateGraph`: a router node sends a refund request to the refunds
subgraph, anything else to the shop's `create_agent` assistant (shop/graph.py). The refunds subgraph looks the order
up, asks a person to approve the refund (`interrupt`), refunds it only on "yes" (its `ToolNode` runs `refund_order`)
and lets the model word the reply.

Run on its own: `python -m shop.desk "Please refund order 1042."` (with OPENAI_API_KEY), then answer the question."""

import json
import re
import sys
from typing import Literal

from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from .graph import find_order, model, write
from .graph import graph as assistant

REPLY_PROMPT = "You write the shop's replies about refunds: one short, friendly sentence, no promises of dates."


class Refund(MessagesState):
    order_id: str
    status: str
    approved: bool


@tool
def refund_order(order_id: str) -> str:
    """Refund an order's payment to the customer.

    Args:
        order_id: The order's number.
    """
    write("refunds", order_id)
    return f"order {order_id} refunded"


def look_up(state: Refund) -> dict:
    number = re.search(r"\d+", state["messages"][-1].content)
    order_id = number.group() if number else ""
    found = find_order.invoke({"order_id": order_id})
    return {"order_id": order_id, "status": json.loads(found)["status"] if found.startswith("{") else found}


def approve(state: Refund) -> dict:
    # A person approves every refund: the graph waits here for their answer, however long it takes.
    answer = interrupt(f"Refund order {state['order_id']} ({state['status']})? Answer yes or no.")
    if str(answer).strip().lower() not in ("yes", "y"):
        return {"approved": False, "messages": [AIMessage(f"Order {state['order_id']} is not refunded.")]}
    # The refund as a tool call, which the subgraph's ToolNode runs.
    call = {"name": "refund_order", "args": {"order_id": state["order_id"]}, "id": f"refund-{state['order_id']}"}
    return {"approved": True, "messages": [AIMessage("", tool_calls=[call])]}


def reply(state: Refund) -> dict:
    return {"messages": [model.invoke([SystemMessage(REPLY_PROMPT), *state["messages"]])]}


refunds = StateGraph(Refund)
refunds.add_node("look_up", look_up)
refunds.add_node("approve", approve)
refunds.add_node("refund", ToolNode([refund_order]))
refunds.add_node("reply", reply)
refunds.add_edge(START, "look_up")
refunds.add_edge("look_up", "approve")
refunds.add_conditional_edges("approve", lambda state: "refund" if state["approved"] else END)
refunds.add_edge("refund", "reply")
refunds.add_edge("reply", END)


def triage(state: MessagesState) -> Command[Literal["refunds", "assistant"]]:
    return Command(goto="refunds" if "refund" in state["messages"][-1].content.lower() else "assistant")


desk = StateGraph(MessagesState)
desk.add_node("triage", triage)
desk.add_node("refunds", refunds.compile())
desk.add_node("assistant", assistant)
desk.add_edge(START, "triage")
desk.add_edge("refunds", END)
desk.add_edge("assistant", END)
graph = desk.compile()


if __name__ == "__main__":
    alone = desk.compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "1"}}
    state = alone.invoke({"messages": [("user", " ".join(sys.argv[1:]) or "Please refund order 1042.")]}, thread)
    while state.get("__interrupt__"):
        state = alone.invoke(Command(resume=input(state["__interrupt__"][0].value + " ")), thread)
    print(state["messages"][-1].content)
