"""The shop's customer-service agent, written the way pydantic-ai's documentation writes agents: it looks orders up,
cancels the ones that have not shipped and confirms by email.

Run on its own: `python -m shop.agents "Where is order 1042?"` (with OPENAI_API_KEY)."""

import json
import os
import sys
import uuid
from pathlib import Path

from pydantic_ai import Agent, ModelRetry, RunContext

ORDERS = {"1042": "shipped", "1043": "processing"}
# Where this shop's effects land: the email outbox and the cancellations ledger.
DATA = Path(os.environ.get("SHOP_DATA", "shop-data"))


def _write(folder: str, text: str) -> None:
    (DATA / folder).mkdir(parents=True, exist_ok=True)
    (DATA / folder / f"{uuid.uuid4().hex}.txt").write_text(text)


agent = Agent(
    "openai:gpt-4o-mini",
    instructions=(
        "You are the shop's customer-service agent. Look an order up with find_order before you say anything about "
        "it. Cancel an order that has not shipped with cancel_order, then confirm by email with send_email."
    ),
)


@agent.tool_plain
def find_order(order_id: str) -> str:
    """Look an order up by its number and tell its status.

    Args:
        order_id: The order's number, e.g. "1042".
    """
    if order_id not in ORDERS:
        raise ModelRetry(f"There is no order {order_id}; ask the customer for the order number.")
    return json.dumps({"order_id": order_id, "status": ORDERS[order_id]})


@agent.tool
def cancel_order(ctx: RunContext[None], order_id: str, reason: str) -> str:
    """Cancel an order that has not shipped yet.

    Args:
        order_id: The order's number.
        reason: Why the customer cancels, in a few words.
    """
    # The ledger keeps what the customer wrote beside the reason, for the support team.
    _write("cancelled", f"{order_id}: {reason}\n\nThe customer wrote: {ctx.prompt}")
    ORDERS[order_id] = "cancelled"
    return f"order {order_id} cancelled"


@agent.tool_plain
def send_email(to: str, subject: str, body: str) -> str:
    """Email the customer.

    Args:
        to: The customer's email address.
        subject: The subject line.
        body: The message, in plain text.
    """
    _write("outbox", f"To: {to}\nSubject: {subject}\n\n{body}")
    return f"email sent to {to}"


if __name__ == "__main__":
    result = agent.run_sync(" ".join(sys.argv[1:]) or "Where is order 1042?")
    print(result.output)
