"""examples/acp-agent as a team runs it: an ACP agent (agent.py, the `agent-client-protocol` library's agent side)
whose recordings `agenttest run . --mode replay` plays with no model and proxies pointing nowhere — the suite with
the file write and the command mocked passes; the one leaving them unmocked Fails on the block, and nothing is
written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers import WAIT_SECONDS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "acp-agent"
REFUSED = "http://127.0.0.1:9"

pytestmark = pytest.mark.slow


def test_it_replays_the_acp_agents_suites_green_where_mocked_and_failed_on_the_block_with_nothing_written(tmp_path):
    repo, var = tmp_path / "acp-agent", tmp_path / "var"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    env = {
        key: value for key, value in os.environ.items()
        if not key.startswith(("AGENTTEST_", "DATABASE_URL", "DJANGO_"))
    }
    env.update({
        # The program is started as `python3`: this interpreter's, which has the openai SDK and the ACP library.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "AGENTTEST_VAR_DIR": str(var), "OPENAI_API_KEY": "",
        "HTTP_PROXY": REFUSED, "HTTPS_PROXY": REFUSED, "ALL_PROXY": REFUSED, "NO_PROXY": "127.0.0.1,localhost",
    })

    ran = subprocess.run(
        [sys.executable, "-m", "agenttest", "run", ".", "--mode", "replay", "--suite", "notes",
         "--suite", "notes-unmocked"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=WAIT_SECONDS * 4, check=False,
    )

    said = ran.stdout + ran.stderr
    assert ran.returncode == 1, said
    assert "PASSED  Note is written" in said
    assert "FAILED  Unmocked write is blocked" in said
    assert "fs_write_text_file has no mock, so it was blocked" in said
    assert not list(tmp_path.rglob("note-1042.txt"))
