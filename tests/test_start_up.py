"""What every agenttest process pays before its first line: the suite starts hundreds of them (commands, workers, the
team's code in children), and a user pays it on each command (issue 40)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.workers import WAIT_SECONDS

# Imported by what uses them — a model call, a case of a framework's agent, the embedded broker, a turn of a process
# agent (the ACP library, the MCP gateway's server) — not on start-up: together well over two CPU seconds of imports
# that `migrate`, `check`, `apply` and the web server never use.
NOT_ON_START_UP = (
    "openai", "sqlalchemy", "agents", "pydantic_ai", "langgraph", "langchain_core", "acp", "uvicorn", "mcp.server",
)


def test_it_starts_a_process_with_its_apps_and_urls_without_importing_the_sdks(tmp_path):
    program = (
        "import json, sys, django; django.setup()\n"
        "from django.urls import get_resolver; get_resolver().url_patterns\n"
        f"print(json.dumps(sorted(name for name in {NOT_ON_START_UP!r} if name in sys.modules)))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agenttest.settings", "AGENTTEST_DEBUG": "1",
           "AGENTTEST_VAR_DIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("DATABASE_URL", None)

    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True,
                          timeout=WAIT_SECONDS, check=False)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
