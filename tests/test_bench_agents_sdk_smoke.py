"""The Agents SDK overhead benchmark runs end to end and prints its figures (a smoke test: no timing is asserted)."""

from __future__ import annotations

import re

import pytest

from tests.bench_runs import bench_report, report_figure

# The bench makes a scratch database of its own (on the PostgreSQL server DATABASE_URL names, if it names one).
pytestmark = pytest.mark.own_database


@pytest.mark.slow
def test_it_prints_the_agents_sdk_overhead_beside_the_native_runtimes_for_a_small_suite():
    output = bench_report("agents_sdk_overhead.py", "--cases", "3", "--turns", "2", "--repeat", "2")

    assert report_figure(output, "cases") == 3
    assert report_figure(output, "turns per case") == 2
    assert report_figure(output, "timed passes") == 2
    for side in ("SDK bare", "SDK under agenttest", "native bare loop", "native under agenttest"):
        assert report_figure(output, f"ms per case ({side})") > 0
        assert re.search(rf"^ms per case \({re.escape(side)}\)\s+[\d.]+\s+passes: [\d.]+, [\d.]+$", output,
                         re.MULTILINE), output
    sdk = report_figure(output, "overhead ms per case (openai-agents)")
    native = report_figure(output, "overhead ms per case (native)")
    assert report_figure(output, "openai-agents over native") == pytest.approx(sdk - native, abs=0.011)
    assert re.search(r"^stub\s+subprocess pid \d+", output, re.MULTILINE)
    # The case seal's share (issue 33): the ledger ran on every harness model request, the audit hook on its events.
    for runtime in ("openai-agents", "native"):
        assert report_figure(output, f"ledger ms per case ({runtime})") > 0
        assert report_figure(output, f"seal hook ms per case ({runtime})") > 0
