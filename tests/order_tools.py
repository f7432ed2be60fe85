"""The tests' order tools, registered as a team's plugin registers its functions: a look-up free of outside effects
and a cancellation with them. One module for every test that declares them (the host's, the runtimes', the browser's,
the cases', the recordings' and the runs'), so an order answers the same in all of them. The tests' own, not the
demo's `lookup_order` and `cancel_order` (registered in the same process, hence names of their own): what a test
checks of an effect-free or a side-effecting tool, of a tool's parameters, or of a conversation that called one, holds
without the demo.

They answer from the order number alone, so a test needs no data set, and write the order and its status into the
conversation's state, so a recorded conversation has results and state changes to mock."""

from __future__ import annotations

import json
import re

from agenthost.functions import FunctionContext, FunctionError, FunctionResult, register_function

TRACK_ORDER = "track_order"
VOID_ORDER = "void_order"
ORDER_TOOLS = (TRACK_ORDER, VOID_ORDER)

_ORDER_ID = {"type": "string", "description": "The order number, e.g. 1042."}
# An order's status follows its number, so a test picks the order it needs: 1040 and 1043 are processing, 1041 and
# 1044 shipped, 1042 and 1047 delivered (the cancellation refuses those two).
_STATUSES = ("processing", "shipped", "delivered", "processing", "shipped")


def _number(order_id: str) -> str:
    digits = re.sub(r"\D", "", order_id)
    if not digits:
        raise FunctionError(f"{order_id!r} is not an order number; order numbers look like 1042")
    return digits


def _status(number: str) -> str:
    return _STATUSES[int(number) % len(_STATUSES)]


@register_function(
    name=TRACK_ORDER,
    outside_effects=False,
    description="Look up an order by its number: status, items and the customer's email.",
    parameters={"type": "object", "properties": {"order_id": _ORDER_ID}, "required": ["order_id"]},
)
def track_order(context: FunctionContext, order_id: str) -> FunctionResult:
    number = _number(order_id)
    status = _status(number)
    order = {
        "order_id": number,
        "status": status,
        "items": [f"item-{number[-2:]}", "gift wrap"] if int(number) % 2 else [f"item-{number[-2:]}"],
        "customer_email": f"customer{number}@example.com",
    }
    return FunctionResult(content=json.dumps(order), state_writes={"order_id": number, "order_status": status})


@register_function(
    name=VOID_ORDER,
    outside_effects=True,
    description="Cancel an order that has not been delivered yet.",
    parameters={
        "type": "object",
        "properties": {"order_id": _ORDER_ID, "reason": {"type": "string", "description": "Why the customer cancels."}},
        "required": ["order_id"],
    },
)
def void_order(context: FunctionContext, order_id: str, reason: str = "") -> FunctionResult:
    number = _number(order_id)
    if _status(number) == "delivered":
        return FunctionResult(
            content=json.dumps({"order_id": number, "cancelled": False, "error": "the order was already delivered"}),
            state_writes={"order_id": number, "order_status": "delivered"},
        )
    return FunctionResult(
        content=json.dumps({"order_id": number, "cancelled": True, "refund": "full"}),
        state_writes={"order_id": number, "order_status": "cancelled"},
    )
