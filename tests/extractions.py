"""What a refused extraction says, checked the same way for every agent set that records the README's scenario."""

from __future__ import annotations

from typing import Any

from agenthost.models import Agent

# The draft's four references to the functions the agent stopped offering: two assertions, two mocks.
GONE_FUNCTION_FIELDS = (
    "turns[0].assertions[1].params.function",
    "turns[0].assertions[2].params.function",
    "mocks[1].function_name",
    "mocks[2].function_name",
)


def assert_extraction_refused_once_the_tools_are_gone(
    client: Any, extract: dict[str, Any], *, agent: Agent, keep: str, callable_functions: str
) -> None:
    """Once `agent` offers only its function `keep`, extracting `extract` again is a 400 that names each of the four
    problems once, then lists what the agents can call once (`callable_functions`, after the colon)."""
    agent.functions = [item for item in agent.functions if item["name"] == keep]
    agent.save()
    refused = client.post("/api/extractions/", extract, format="json")
    assert refused.status_code == 400
    [error] = refused.json()["errors"]
    message = error["message"]
    assert [message.count(f"{field}: ") for field in GONE_FUNCTION_FIELDS] == [1, 1, 1, 1], message
    assert message.count("callable functions") == 1 and message.count("order-lookup") == 1, message
    assert message.endswith(
        f"callable functions (agents: order-router, order-cancellation, order-lookup): {callable_functions}"
    ), message
