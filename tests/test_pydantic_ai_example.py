"""examples/pydantic-ai-shop as a team runs it: its unchanged pydantic-ai agent copied outside the checkout, on the
built wheel with its `pydantic-ai` extra (tests/example_repo.py says how, and what the scenario proves)."""

from __future__ import annotations

import json

import pytest

from tests.example_repo import CANCEL_REQUEST, example_copy, shop_scenario
from tests.package_env import package_env_fixture  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.installed]

# `Agent("openai:…")` makes pydantic-ai build its OpenAI client when the module is imported, which the openai SDK
# refuses without a key, an empty one included. agenttest never sends a call with it: a placeholder is enough.
PLACEHOLDER_KEY = {"OPENAI_API_KEY": "unused"}


def test_it_chats_records_blocks_and_replays_the_teams_pydantic_ai_agent_step_by_step(package_env, tmp_path):
    repo = example_copy("pydantic-ai-shop", tmp_path)

    shop = shop_scenario(
        package_env, repo, env=PLACEHOLDER_KEY, instruction="then confirm by email with send_email.",
        changed="then always confirm by email with send_email.", shown="then always confirm",
        # pydantic-ai's "openai:…" model calls the Responses API, its instructions a field of the request.
        differs_at="settings.instructions",
    )

    # In chat pydantic-ai called the shop's tool with its own RunContext: the ledger holds the prompt it carries.
    (ledger,) = shop.effects["cancelled"]
    assert ledger.endswith(f"The customer wrote: {CANCEL_REQUEST}")
    # The tools offered are pydantic-ai's, from the functions and their docstrings, not a copy in agenttest's files.
    lines = (repo / "recordings" / "shop" / "status-is-looked-up.local-gpt-4o-mini.jsonl").read_text().splitlines()
    # As the Responses API takes them: each tool the function itself.
    tools = {tool["name"]: tool for tool in json.loads(lines[1])["request"]["tools"]}
    assert sorted(tools) == ["cancel_order", "find_order", "send_email"]
    assert tools["find_order"]["description"] == "Look an order up by its number and tell its status."
    assert tools["find_order"]["parameters"]["properties"]["order_id"] == {
        "description": 'The order\'s number, e.g. "1042".', "type": "string",
    }
