"""examples/process-shop as a team runs it: its agent is a program of its own (agent.py, JSON lines on stdio), whose
recordings `agenttest run . --mode replay` plays green with no model and proxies pointing nowhere, and whose replay
goes stale, naming the change, when the program's own instruction changes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers import WAIT_SECONDS

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "process-shop"
REFUSED = "http://127.0.0.1:9"

pytestmark = pytest.mark.slow


def _replay(repo: Path, var: Path) -> subprocess.CompletedProcess[str]:
    env = {
        key: value for key, value in os.environ.items()
        if not key.startswith(("AGENTTEST_", "DATABASE_URL", "DJANGO_"))
    }
    env.update({
        # The program is started as `python3`: this interpreter's, which has the openai SDK.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "AGENTTEST_VAR_DIR": str(var), "OPENAI_API_KEY": "",
        "HTTP_PROXY": REFUSED, "HTTPS_PROXY": REFUSED, "ALL_PROXY": REFUSED, "NO_PROXY": "127.0.0.1,localhost",
    })
    return subprocess.run(
        [sys.executable, "-m", "agenttest", "run", ".", "--mode", "replay"], cwd=repo, env=env, capture_output=True,
        text=True, timeout=WAIT_SECONDS * 4, check=False,
    )


def test_it_replays_the_program_agents_recordings_and_goes_stale_when_its_instruction_changes(tmp_path):
    repo = tmp_path / "process-shop"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))

    green = _replay(repo, tmp_path / "var-green")

    assert green.returncode == 0, green.stdout + green.stderr
    assert "Run #1 Passed" in green.stdout

    program = repo / "agent.py"
    program.write_text(program.read_text().replace("Answer in one or two sentences", "Answer in one sentence"))
    stale = _replay(repo, tmp_path / "var-stale")

    assert stale.returncode == 2, stale.stdout + stale.stderr
    assert "Answer in one sentence" in stale.stdout + stale.stderr
