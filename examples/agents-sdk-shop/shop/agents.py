"""The shop's customer-service agents, written the way the OpenAI Agents SDK's documentation writes them: a triage
agent that looks orders up and hands cancellations to the orders agent.

Run on its own: `python -m shop.agents "Where is order 1042?"` (with OPENAI_API_KEY, or OPENAI_BASE_URL pointing at
any OpenAI-compatible server)."""

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

from agents import Agent, Runner, function_tool

ORDERS = {"1042": "shipped", "1043": "processing"}
# Where this shop's effects land: the email outbox and the cancellations ledger.
DATA = Path(os.environ.get("SHOP_DATA", "shop-data"))


def _write(folder: str, text: str) -> None:
    (DATA / folder).mkdir(parents=True, exist_ok=True)
    (DATA / folder / f"{uuid.uuid4().hex}.txt").write_text(text)


@function_tool
def find_order(order_id: str) -> str:
    """Look an order up by its number and tell its status."""
    return json.dumps({"order_id": order_id, "status": ORDERS.get(order_id, "unknown")})


@function_tool
def cancel_order(order_id: str, reason: str) -> str:
    """Cancel an order that has not shipped yet."""
    _write("cancelled", f"{order_id}: {reason}")
    ORDERS[order_id] = "cancelled"
    return f"order {order_id} cancelled"


@function_tool
def send_email(to: str, subject: str, body: str) -> str:
    """Email the customer."""
    _write("outbox", f"To: {to}\nSubject: {subject}\n\n{body}")
    return f"email sent to {to}"


orders_agent = Agent(
    name="Orders agent",
    handoff_description="Cancels orders and emails the customer about it.",
    instructions=(
        "You cancel orders that have not shipped yet. Cancel with cancel_order, then confirm by email with "
        "send_email, then tell the customer."
    ),
    tools=[cancel_order, send_email],
)

triage = Agent(
    name="Triage agent",
    instructions=(
        "You are the shop's customer-service agent. Look an order up with find_order before you say anything about "
        "it. Hand cancellations to the orders agent."
    ),
    tools=[find_order],
    handoffs=[orders_agent],
)


async def main(question: str) -> None:
    result = await Runner.run(triage, input=question)
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "Where is order 1042?"))
