"""A plugin whose entry point names a callable: nothing registers at import, register() does — once."""

from agenttest.plugin import tool

CALLS: list[str] = []


def register() -> None:
    CALLS.append("register")

    @tool(outside_effects=False, name="acme_escalation_level")
    def escalation_level(ticket_id: str) -> int:
        """How many times a ticket has been escalated."""
        return len(ticket_id) % 3
