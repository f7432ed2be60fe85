"""The harness-overhead benchmark runs end to end and prints its figures (a smoke test: no timing is asserted)."""

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
def test_it_prints_overhead_queries_memory_profile_and_rss_series_for_a_small_suite():
    command = [sys.executable, "bench/harness_overhead.py", "--cases", "3", "--turns", "2", "--repeat", "1",
               "--profile", "--rss-series", "2,3"]
    database_url = os.environ.get("DATABASE_URL", "")
    if database_url.startswith(("postgres://", "postgresql://")):
        # The PostgreSQL leg of the test suite covers the scratch-database path too.
        command += ["--database-url", database_url]
    done = subprocess.run(command, cwd=BASE_DIR, capture_output=True, text=True, timeout=240, check=False)
    output = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{output}\nstderr:\n{done.stderr}"

    assert _figure(output, "cases") == 3
    assert _figure(output, "turns per case") == 2
    assert _figure(output, "ms per case (harness)") > 0
    assert _figure(output, "ms per case (baseline)") > 0
    assert _figure(output, "ms per case (direct SDK post)") > 0
    _figure(output, "  harness over it")
    _figure(output, "overhead ms per case")
    assert _figure(output, "SQL queries per case") > 0
    assert _figure(output, "commits per case") > 0
    assert _figure(output, "DB connections opened per case") > 0
    assert _figure(output, "peak RSS") > 0
    assert re.search(r"^stub\s+subprocess pid \d+", output, re.MULTILINE)
    assert re.search(r"^\s+\d+\.\d+\s+INSERT agenthost_message\s+\d+\.\d+ ms$", output, re.MULTILINE)
    assert "runs/services.py" in output and "(run_execute)" in output, "the profile does not show the run"
    assert "(run_send)" in output, "the profile misses the case threads"
    for size in (2, 3):
        assert re.search(rf"^\s+{size} cases: peak RSS [\d.]+ MB", output, re.MULTILINE), output
