"""The shop's customer-service agent, written the way LangChain's documentation writes agents: `create_agent` over a
`ChatOpenAI` model and `@tool` functions. It looks orders up, cancels the ones that have not shipped and confirms by
email.

Run on its own: `python -m shop.graph "Where is order 1042?"` (with OPENAI_API_KEY)."""

import json
import os
import sys
import uuid
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

ORDERS = {"1042": "shipped", "1043": "processing"}
# Where this shop's effects land: the email outbox and the cancellations ledger.
DATA = Path(os.environ.get("SHOP_DATA", "shop-data"))
PROMPT = (
    "You are the shop's customer-service agent. Look an order up with find_order before you say anything about it. "
    "Cancel an order that has not shipped with cancel_order, then confirm by email with send_email."
)


def write(folder: str, text: str) -> None:
    (DATA / folder).mkdir(parents=True, exist_ok=True)
    (DATA / folder / f"{uuid.uuid4().hex}.txt").write_text(text)


@tool
def find_order(order_id: str) -> str:
    """Look an order up by its number and tell its status.

    Args:
        order_id: The order's number, e.g. "1042".
    """
    if order_id not in ORDERS:
        return f"There is no order {order_id}; ask the customer for the order number."
    return json.dumps({"order_id": order_id, "status": ORDERS[order_id]})


@tool
def cancel_order(order_id: str, reason: str) -> str:
    """Cancel an order that has not shipped yet.

    Args:
        order_id: The order's number.
        reason: Why the customer cancels, in a few words.
    """
    write("cancelled", f"{order_id}: {reason}")
    ORDERS[order_id] = "cancelled"
    return f"order {order_id} cancelled"


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Email the customer.

    Args:
        to: The customer's email address.
        subject: The subject line.
        body: The message, in plain text.
    """
    write("outbox", f"To: {to}\nSubject: {subject}\n\n{body}")
    return f"email sent to {to}"


# ChatOpenAI builds its OpenAI client here, and the openai SDK refuses to without a key: under agenttest the key is
# never used (every request is answered by its model layer).
model = ChatOpenAI(model="gpt-4o-mini", temperature=0)
graph = create_agent(model, tools=[find_order, cancel_order, send_email], system_prompt=PROMPT)


if __name__ == "__main__":
    state = graph.invoke({"messages": [{"role": "user", "content": " ".join(sys.argv[1:]) or "Where is order 1042?"}]})
    print(state["messages"][-1].content)
