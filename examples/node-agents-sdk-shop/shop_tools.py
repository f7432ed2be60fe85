"""The shop's own tools, served to the Node agent through agenttest's MCP gateway: under test a case mocks them (or
the refund is blocked); in chat they run, and a refund is posted to the shop's payments webhook."""

import json
import os
import urllib.request

from agenttest.plugin import tool

# Where a refund is sent in chat: the payment service's webhook (any URL that takes a JSON POST).
WEBHOOK_ENV = "SHOP_WEBHOOK_URL"


@tool(outside_effects=False)
def shop_find_order(order_id: str) -> dict:
    """Look an order up by its number and tell its status and total."""
    return {"order_id": order_id, "status": "delivered", "total_eur": 39.9}


@tool(outside_effects=True)
def shop_refund_order(order_id: str, reason: str) -> dict:
    """Refund an order in full to the card it was paid with."""
    request = urllib.request.Request(
        os.environ[WEBHOOK_ENV], data=json.dumps({"order_id": order_id, "reason": reason}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()
    return {"order_id": order_id, "refund_id": f"R-{order_id}", "status": "refunded"}
