"""The team's own tools: what the order-support agent calls in production. Under test agenttest never runs them —
each call is answered by a case's mock or blocked."""

from agenttest.plugin import tool


@tool(outside_effects=False)
def shop_find_order(order_id: str) -> dict:
    """Look an order up by its number and tell its status."""
    raise RuntimeError("the order database is not reachable from here")


@tool(outside_effects=True)
def shop_cancel_order(order_id: str, reason: str = "") -> dict:
    """Cancel an order that has not shipped yet."""
    raise RuntimeError("cancelling needs the order database")
