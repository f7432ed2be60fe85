"""What a test of an agent's program (`runtime: process`) sees from outside it: the processes the program says it
started, and which of them are still running after agenttest is done with it."""

from __future__ import annotations

from pathlib import Path

import pytest

# The environment name (an agent's `env`) under which a misbehaving program is told where to write its pids.
PIDS = "PIDS"


def pid_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file a program started with `env=[PIDS]` writes its pid (and its children's) to, space-separated."""
    pids = tmp_path / "pids"
    monkeypatch.setenv(PIDS, str(pids))
    return pids


def running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie waiting for its parent to read its exit does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def still_running(pids: Path) -> list[int]:
    """The processes named in `pids` that are still running."""
    return [pid for pid in map(int, pids.read_text().split()) if running(pid)]
