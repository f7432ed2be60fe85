"""The process group agenttest starts the team's code in (a chat turn's child, a process agent's program): stopped
whole when its work ends, whatever the code left running in it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

# A hang guard on the wait for a killed process group to be gone.
GROUP_EXIT_SECONDS = 5.0


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kills `process`'s group (it was started in a session of its own) and returns once none of it runs."""
    _kill(process.pid)
    process.wait()
    _wait_gone(process.pid)


def kill_group_id(group: int) -> None:
    """Kills process group `group` and returns once none of it runs: for a group whose leader is not this process's
    child (a forked child of runtimes/fork_server.py, kept unreaped by its waiter until the group is gone)."""
    _kill(group)
    _wait_gone(group)


def _kill(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(group: int) -> None:
    # A kill is delivered on the way out of the kernel: until then a member of the group still runs.
    give_up = time.monotonic() + GROUP_EXIT_SECONDS
    while _group_runs(group) and time.monotonic() < give_up:
        time.sleep(0.01)


def _group_runs(group: int) -> bool:
    """Whether a process of `group` still runs (a zombie waiting to be reaped does not)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            return True
    return False
