"""examples/acp-agent as a team runs it: an ACP agent (agent.py, the `agent-client-protocol` library's agent side)
whose recordings `agenttest run . --mode replay` plays with no model and proxies pointing nowhere — the suite with
the file write and the command mocked passes; the one leaving them unmocked Fails on the block, and nothing is
written."""

from __future__ import annotations

import pytest

from tests.example_repo import EXAMPLES, copy_example, replay_here

EXAMPLE = EXAMPLES / "acp-agent"

pytestmark = pytest.mark.slow


def test_it_replays_the_acp_agents_suites_green_where_mocked_and_failed_on_the_block_with_nothing_written(tmp_path):
    repo, var = tmp_path / "acp-agent", tmp_path / "var"
    copy_example(EXAMPLE, repo, "__pycache__")
    # The program is started as `python3`: this interpreter's, which has the openai SDK and the ACP library.
    ran = replay_here(repo, var, "--suite", "notes", "--suite", "notes-unmocked")

    said = ran.stdout + ran.stderr
    assert ran.returncode == 1, said
    assert "PASSED  Note is written" in said
    assert "FAILED  Unmocked write is blocked" in said
    assert "fs_write_text_file has no mock, so it was blocked" in said
    assert not list(tmp_path.rglob("note-1042.txt"))


def test_it_fails_on_a_changed_acp_transcript_naming_it_until_the_snapshot_is_updated(tmp_path):
    repo = tmp_path / "acp-agent"
    copy_example(EXAMPLE, repo, "__pycache__")
    snapshot = repo / "suites" / "notes" / "snapshots" / "note-is-written.jsonl"
    committed = snapshot.read_text()
    # What the agent reports of its write (the ACP tool kind) is the program's, not the model's: the replay holds.
    program = repo / "agent.py"
    program.write_text(program.read_text().replace('"write_file": "edit"', '"write_file": "other"'))

    changed = replay_here(repo, tmp_path / "var-changed")

    said = changed.stdout + changed.stderr
    assert changed.returncode == 1, said
    assert "FAILED  Note is written" in said
    assert 'snapshotMatches (case): the program said something else than the snapshot holds' in said
    assert '"kind": "other"' in said

    updated = replay_here(repo, tmp_path / "var-update", "--update-snapshots")

    said = updated.stdout + updated.stderr
    assert updated.returncode == 0, said
    assert "Wrote suites/notes/snapshots/note-is-written.jsonl (changed, 7 entries)." in said
    assert snapshot.read_text() == committed.replace('"kind": "edit"', '"kind": "other"')

    green = replay_here(repo, tmp_path / "var-green")

    assert green.returncode == 0, green.stdout + green.stderr
