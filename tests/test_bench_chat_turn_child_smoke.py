"""The child-process chat-turn benchmark runs end to end and prints its figures (a smoke test: no timing is
asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.own_database


@pytest.mark.slow
def test_it_prints_the_child_process_cost_per_turn_beside_the_in_process_turn():
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AGENTTEST_", "DATABASE_URL"))}
    done = subprocess.run(
        [sys.executable, "bench/chat_turn_child.py", "--turns", "1"], cwd=BASE_DIR, env=env, capture_output=True,
        text=True, timeout=600, check=False,
    )

    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for label in ("ms per turn (in-process)", "ms per turn (child process)", "child process cost ms per turn"):
        assert re.search(rf"^{re.escape(label)}\s+-?[\d.]+$", done.stdout, re.MULTILINE), done.stdout
