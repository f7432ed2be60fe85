"""The order-support demo's tools, registered when the demo plugin loads (agenttest_demo.registration). They compute
answers from the order number so the demo needs no data set."""

from __future__ import annotations

import json
import re

from agenttest.plugin import FunctionContext, FunctionError, FunctionResult, register_function

_STATUSES = ["processing", "shipped", "delivered", "processing", "shipped"]


def _normalise(order_id: str) -> str:
    digits = re.sub(r"\D", "", order_id)
    if not digits:
        raise FunctionError(f"{order_id!r} is not an order number; order numbers look like 1042")
    return digits


@register_function(
    name="lookup_order",
    outside_effects=False,
    description="Look up an order by its number: status, items and the customer's email.",
    parameters={
        "type": "object",
        "properties": {"order_id": {"type": "string", "description": "The order number, e.g. 1042."}},
        "required": ["order_id"],
    },
)
def lookup_order(context: FunctionContext, order_id: str) -> FunctionResult:
    number = _normalise(order_id)
    status = _STATUSES[int(number) % len(_STATUSES)]
    order = {
        "order_id": number,
        "status": status,
        "items": [f"item-{number[-2:]}", "gift wrap"] if int(number) % 2 else [f"item-{number[-2:]}"],
        "customer_email": f"customer{number}@example.com",
    }
    return FunctionResult(content=json.dumps(order), state_writes={"order_id": number, "order_status": status})


@register_function(
    name="cancel_order",
    outside_effects=True,
    description="Cancel an order that has not been delivered yet.",
    parameters={
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "description": "The order number."},
            "reason": {"type": "string", "description": "Why the customer cancels."},
        },
        "required": ["order_id"],
    },
)
def cancel_order(context: FunctionContext, order_id: str, reason: str = "") -> FunctionResult:
    number = _normalise(order_id)
    if _STATUSES[int(number) % len(_STATUSES)] == "delivered":
        return FunctionResult(
            content=json.dumps({"order_id": number, "cancelled": False, "error": "the order was already delivered"}),
            state_writes={"order_id": number, "order_status": "delivered"},
        )
    return FunctionResult(
        content=json.dumps({"order_id": number, "cancelled": True, "refund": "full"}),
        state_writes={"order_id": number, "order_status": "cancelled"},
    )
