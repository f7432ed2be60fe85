"""The Agents SDK overhead benchmark runs end to end and prints its figures (a smoke test: no timing is asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent

# The bench makes a scratch database of its own (on the PostgreSQL server DATABASE_URL names, if it names one).
pytestmark = pytest.mark.own_database


def _figure(output: str, label: str) -> float:
    match = re.search(rf"^{re.escape(label)}\s+(-?[\d.]+)", output, re.MULTILINE)
    assert match, f"{label!r} is missing from the report:\n{output}"
    return float(match.group(1))


@pytest.mark.slow
def test_it_prints_the_agents_sdk_overhead_beside_the_native_runtimes_for_a_small_suite():
    command = [sys.executable, "bench/agents_sdk_overhead.py", "--cases", "3", "--turns", "2", "--repeat", "2"]
    database_url = os.environ.get("DATABASE_URL", "")
    if database_url.startswith(("postgres://", "postgresql://")):
        command += ["--database-url", database_url]
    done = subprocess.run(command, cwd=BASE_DIR, capture_output=True, text=True, timeout=240, check=False)
    output = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{output}\nstderr:\n{done.stderr}"

    assert _figure(output, "cases") == 3
    assert _figure(output, "turns per case") == 2
    assert _figure(output, "timed passes") == 2
    for side in ("SDK bare", "SDK under agenttest", "native bare loop", "native under agenttest"):
        assert _figure(output, f"ms per case ({side})") > 0
        assert re.search(rf"^ms per case \({re.escape(side)}\)\s+[\d.]+\s+passes: [\d.]+, [\d.]+$", output,
                         re.MULTILINE), output
    sdk = _figure(output, "overhead ms per case (openai-agents)")
    native = _figure(output, "overhead ms per case (native)")
    assert _figure(output, "openai-agents over native") == pytest.approx(sdk - native, abs=0.011)
    assert re.search(r"^stub\s+subprocess pid \d+", output, re.MULTILINE)
    # The case seal's share (issue 33): the ledger ran on every harness model request, the audit hook on its events.
    for runtime in ("openai-agents", "native"):
        assert _figure(output, f"ledger ms per case ({runtime})") > 0
        assert _figure(output, f"seal hook ms per case ({runtime})") > 0
