"""A team's plugin, as the guide has one write it: two typed tools and a model-provider kind, through
`agenttest.plugin` only.

- `ticket_lookup` reads (declared free of outside effects);
- `ticket_send_note` "sends": it appends a line to the file named by SAMPLE_PLUGIN_OUTBOX, so a test can see whether
  it really ran;
- kind `sample-rules`: a model that answers by rule — it looks up every ticket the user names, sends a note when asked
  to, then answers "<greeting> <the tool results>". Its own option `greeting` must be a non-empty string;
- an agent-load hook that tells every agent declaring `ticket_lookup` what ticket ids look like.
"""

from __future__ import annotations

import json
import os
import re
from typing import Annotated, Any

from pydantic import Field

from agenttest.plugin import (
    FunctionContext,
    FunctionError,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
    register_agent_load_hook,
    register_provider_kind,
    tool,
)

OUTBOX_ENV = "SAMPLE_PLUGIN_OUTBOX"
KIND = "sample-rules"
LOOKUP = "ticket_lookup"
SEND = "ticket_send_note"
_STATUSES = ("open", "waiting", "closed")
_TICKET = re.compile(r"\bT-\d+\b")
TICKET_HINT = "Ticket ids look like T-7."


@tool(outside_effects=False)
def ticket_lookup(
    ticket_id: Annotated[str, Field(pattern=r"^T-\d+$", description="The ticket id, e.g. T-7.")],
    include_history: bool = False,
) -> dict[str, Any]:
    """Look a support ticket up: its status and who owns it."""
    number = int(ticket_id[2:])
    ticket: dict[str, Any] = {"ticket_id": ticket_id, "status": _STATUSES[number % 3], "owner": f"agent{number}"}
    if include_history:
        ticket["history"] = [f"{ticket_id} opened", f"{ticket_id} assigned to agent{number}"]
    return ticket


@tool(outside_effects=True)
def ticket_send_note(context: FunctionContext, ticket_id: str, text: str) -> dict[str, Any]:
    """Send a note to the owner of a support ticket.

    Args:
        ticket_id: The ticket id, e.g. T-7.
        text: What the note says to the ticket's owner.
    """
    outbox = os.environ.get(OUTBOX_ENV, "")
    if not outbox:
        raise FunctionError(f"notes cannot be sent: {OUTBOX_ENV} is not set")
    with open(outbox, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"ticket_id": ticket_id, "text": text, "conversation": context.conversation_id}) + "\n")
    return {"sent": True, "ticket_id": ticket_id}


class RulesProvider(ModelProvider):
    kind = KIND
    option_keys = frozenset({"greeting"})

    @classmethod
    def validate_options(cls, spec: dict[str, Any]) -> list[str]:
        greeting = spec.get("greeting", "Hello.")
        if not isinstance(greeting, str) or not greeting.strip():
            return [f"field 'greeting' must be a non-empty string, got {greeting!r}"]
        return []

    def complete(self, request: ModelRequest) -> ModelResponse:
        greeting = self.options.get("greeting", "Hello.")
        offered = {item["function"]["name"] for item in request.tools}
        last = request.messages[-1]
        calls: list[ToolCall] = []
        if last["role"] == "tool":
            results = []
            for message in reversed(request.messages):
                if message["role"] != "tool":
                    break
                results.insert(0, message["content"])
            text = f"{greeting} {' | '.join(results)}"
        else:
            said = str(last.get("content") or "")
            tickets = _TICKET.findall(said)
            wanted = [(LOOKUP, {"ticket_id": ticket}) for ticket in tickets]
            if "note" in said.lower():
                wanted += [(SEND, {"ticket_id": ticket, "text": f"Customer asks about {ticket}"}) for ticket in tickets]
            calls = [
                ToolCall(id=f"call_rules_{len(request.messages)}_{index}", name=name, arguments=json.dumps(arguments))
                for index, (name, arguments) in enumerate(wanted)
                if name in offered
            ]
            text = "" if calls else f"{greeting} Which ticket is it about?"
        return ModelResponse(
            text=text,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else "stop",
            usage=Usage(input_tokens=len(json.dumps(request.messages)) // 4, output_tokens=len(text) // 4 + 1),
            model=request.model,
        )


register_provider_kind(KIND, RulesProvider)


def explain_ticket_ids(loaded: Any, conversation: Any) -> None:
    if any(item.get("name") == LOOKUP for item in loaded.functions):
        loaded.instruction = f"{loaded.instruction}\n{TICKET_HINT}"


register_agent_load_hook(explain_ticket_ids)
