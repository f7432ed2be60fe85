"""examples/python-shop as a team runs it: its unchanged plain tool loop over the openai SDK copied outside the
checkout, on the built wheel (tests/example_repo.py says how, and what the scenario proves)."""

from __future__ import annotations

import json
import runpy

import pytest

from tests.example_repo import example_copy, shop_scenario
from tests.package_env import package_env_fixture  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.installed]


def test_it_chats_records_blocks_and_replays_the_teams_plain_loop_step_by_step(package_env, tmp_path):
    repo = example_copy("python-shop", tmp_path)
    bot = runpy.run_path(str(repo / "shop" / "bot.py"))

    shop_scenario(
        package_env, repo, instruction="then confirm by email with send_email.",
        changed="then always confirm by email with send_email.", shown="then always confirm",
    )

    # The requests recorded are the ones the loop builds: its own instruction, tool schemas and temperature.
    lines = (repo / "recordings" / "shop" / "status-is-looked-up.local-gpt-4o-mini.jsonl").read_text().splitlines()
    request = json.loads(lines[1])["request"]
    assert (request["messages"][0]["content"], request["tools"], request["temperature"]) == (
        bot["INSTRUCTIONS"], bot["TOOLS"], 0.2,
    )
