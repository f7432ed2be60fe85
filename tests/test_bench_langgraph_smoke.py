"""The LangGraph overhead benchmark runs end to end and prints its figures (a smoke test: no timing is asserted)."""

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
def test_it_prints_the_langgraph_overhead_beside_the_graph_run_bare_for_a_small_suite():
    command = [sys.executable, "bench/langgraph_overhead.py", "--cases", "3", "--turns", "2", "--repeat", "2"]
    database_url = os.environ.get("DATABASE_URL", "")
    if database_url.startswith(("postgres://", "postgresql://")):
        command += ["--database-url", database_url]
    done = subprocess.run(command, cwd=BASE_DIR, capture_output=True, text=True, timeout=240, check=False)
    output = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{output}\nstderr:\n{done.stderr}"

    assert (_figure(output, "cases"), _figure(output, "turns per case"), _figure(output, "timed passes")) == (3, 2, 2)
    for side in ("graph bare", "graph under agenttest", "native bare loop", "native under agenttest"):
        assert re.search(rf"^ms per case \({re.escape(side)}\)\s+[\d.]+\s+passes: [\d.]+, [\d.]+$", output,
                         re.MULTILINE), output
    graph = _figure(output, "overhead ms per case (langgraph)")
    native = _figure(output, "overhead ms per case (native)")
    assert _figure(output, "langgraph over native") == pytest.approx(graph - native, abs=0.011)
    # The case seal ran on the graph's harness side: its ledger on every model request, its hook on audited events.
    assert _figure(output, "ledger ms per case (langgraph)") > 0
    assert _figure(output, "seal hook ms per case (langgraph)") > 0
