"""The LangGraph overhead benchmark runs end to end and prints its figures (a smoke test: no timing is asserted)."""

from __future__ import annotations

import re

import pytest

from tests.bench_runs import bench_report, report_figure

# The bench makes a scratch database of its own (on the PostgreSQL server DATABASE_URL names, if it names one).
pytestmark = pytest.mark.own_database


@pytest.mark.slow
def test_it_prints_the_langgraph_overhead_beside_the_graph_run_bare_for_a_small_suite():
    output = bench_report("langgraph_overhead.py", "--cases", "3", "--turns", "2", "--repeat", "2")

    assert [report_figure(output, label) for label in ("cases", "turns per case", "timed passes")] == [3, 2, 2]
    for side in ("graph bare", "graph under agenttest", "native bare loop", "native under agenttest"):
        assert re.search(rf"^ms per case \({re.escape(side)}\)\s+[\d.]+\s+passes: [\d.]+, [\d.]+$", output,
                         re.MULTILINE), output
    graph = report_figure(output, "overhead ms per case (langgraph)")
    native = report_figure(output, "overhead ms per case (native)")
    assert report_figure(output, "langgraph over native") == pytest.approx(graph - native, abs=0.011)
    # The case seal ran on the graph's harness side: its ledger on every model request, its hook on audited events.
    assert report_figure(output, "ledger ms per case (langgraph)") > 0
    assert report_figure(output, "seal hook ms per case (langgraph)") > 0
