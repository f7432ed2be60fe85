"""The shop's customer-service bot: a plain tool loop over the openai SDK's chat completions. It looks orders up,
cancels the ones that have not shipped and confirms by email.

`respond(messages, client, tools)` answers one customer message: `client` is an OpenAI client, and `tools` runs the
tool calls (`tools.call(function, arguments, call_id=…)`; on its own, `RunTools` calls the function). Run on its own:
`python -m shop.bot "Where is order 1042?"` (with OPENAI_API_KEY, or OPENAI_BASE_URL pointing at any
OpenAI-compatible server)."""

import json
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openai import OpenAI

MODEL = "gpt-4o-mini"
INSTRUCTIONS = (
    "You are the shop's customer-service agent. Look an order up with find_order before you say anything about it. "
    "Cancel an order that has not shipped with cancel_order, then confirm by email with send_email."
)
MAX_TOOL_ROUNDS = 6

ORDERS = {"1042": "shipped", "1043": "processing"}
# Where this shop's effects land: the email outbox and the cancellations ledger.
DATA = Path(os.environ.get("SHOP_DATA", "shop-data"))

TOOLS = [
    {"type": "function", "function": {
        "name": "find_order",
        "description": "Look an order up by its number and tell its status.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    }},
    {"type": "function", "function": {
        "name": "cancel_order",
        "description": "Cancel an order that has not shipped yet.",
        "parameters": {"type": "object",
                       "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}},
                       "required": ["order_id", "reason"]},
    }},
    {"type": "function", "function": {
        "name": "send_email",
        "description": "Email the customer.",
        "parameters": {"type": "object",
                       "properties": {"to": {"type": "string"}, "subject": {"type": "string"},
                                      "body": {"type": "string"}},
                       "required": ["to", "subject", "body"]},
    }},
]


def _write(folder: str, text: str) -> None:
    (DATA / folder).mkdir(parents=True, exist_ok=True)
    (DATA / folder / f"{uuid.uuid4().hex}.txt").write_text(text)


def find_order(order_id: str) -> str:
    """Look an order up by its number and tell its status."""
    return json.dumps({"order_id": order_id, "status": ORDERS.get(order_id, "unknown")})


def cancel_order(order_id: str, reason: str) -> str:
    """Cancel an order that has not shipped yet."""
    _write("cancelled", f"{order_id}: {reason}")
    ORDERS[order_id] = "cancelled"
    return f"order {order_id} cancelled"


def send_email(to: str, subject: str, body: str) -> str:
    """Email the customer."""
    _write("outbox", f"To: {to}\nSubject: {subject}\n\n{body}")
    return f"email sent to {to}"


FUNCTIONS = {"find_order": find_order, "cancel_order": cancel_order, "send_email": send_email}


class RunTools:
    """Runs each tool call the model makes: the function, with the model's arguments."""

    def call(self, function: Callable[..., str], arguments: str, call_id: str = "") -> str:
        return function(**json.loads(arguments or "{}"))


def respond(messages: list[dict[str, Any]], client: OpenAI, tools: RunTools) -> str:
    """The answer to the conversation's last message: ask the model, run the tools it calls, until it answers."""
    conversation = [{"role": "system", "content": INSTRUCTIONS}, *messages]
    for _ in range(MAX_TOOL_ROUNDS):
        completion = client.chat.completions.create(
            model=MODEL, messages=conversation, tools=TOOLS, temperature=0.2
        )
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        conversation.append(message)
        for call in message.tool_calls:
            result = tools.call(FUNCTIONS[call.function.name], call.function.arguments, call_id=call.id)
            conversation.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return "Sorry, I could not finish that. A colleague will get back to you."


if __name__ == "__main__":
    question = " ".join(sys.argv[1:]) or "Where is order 1042?"
    print(respond([{"role": "user", "content": question}], OpenAI(), RunTools()))
