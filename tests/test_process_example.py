"""examples/process-shop as a team runs it: its agent is a program of its own (agent.py, JSON lines on stdio), whose
recordings `agenttest run . --mode replay` plays green with no model and proxies pointing nowhere, and whose replay
goes stale, naming the change, when the program's own instruction changes."""

from __future__ import annotations

import pytest

from tests.example_repo import EXAMPLES, copy_example, replay_here

EXAMPLE = EXAMPLES / "process-shop"

pytestmark = pytest.mark.slow


def test_it_replays_the_program_agents_recordings_and_goes_stale_when_its_instruction_changes(tmp_path):
    repo = tmp_path / "process-shop"
    copy_example(EXAMPLE, repo, "__pycache__")

    green = replay_here(repo, tmp_path / "var-green")

    assert green.returncode == 0, green.stdout + green.stderr
    assert "Run #1 Passed" in green.stdout

    program = repo / "agent.py"
    program.write_text(program.read_text().replace("Answer in one or two sentences", "Answer in one sentence"))
    stale = replay_here(repo, tmp_path / "var-stale")

    assert stale.returncode == 2, stale.stdout + stale.stderr
    assert "Answer in one sentence" in stale.stdout + stale.stderr
