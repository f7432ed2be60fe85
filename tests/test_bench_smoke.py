"""The harness-overhead benchmark runs end to end and prints its figures (a smoke test: no timing is asserted)."""

from __future__ import annotations

import re

import pytest

from tests.bench_runs import bench_report, report_figure

# The bench makes a scratch database of its own (on the PostgreSQL server DATABASE_URL names, if it names one).
pytestmark = pytest.mark.own_database


@pytest.mark.slow
def test_it_prints_overhead_queries_memory_profile_and_rss_series_for_a_small_suite():
    output = bench_report("harness_overhead.py", "--cases", "3", "--turns", "2", "--repeat", "1", "--profile",
                          "--rss-series", "2,3")

    assert report_figure(output, "cases") == 3
    assert report_figure(output, "turns per case") == 2
    assert report_figure(output, "ms per case (harness)") > 0
    assert report_figure(output, "ms per case (baseline)") > 0
    assert report_figure(output, "ms per case (direct SDK post)") > 0
    report_figure(output, "  harness over it")
    report_figure(output, "overhead ms per case")
    assert report_figure(output, "SQL queries per case") > 0
    assert report_figure(output, "commits per case") > 0
    assert report_figure(output, "DB connections opened per case") > 0
    assert report_figure(output, "peak RSS") > 0
    assert re.search(r"^stub\s+subprocess pid \d+", output, re.MULTILINE)
    assert re.search(r"^\s+\d+\.\d+\s+INSERT agenthost_message\s+\d+\.\d+ ms$", output, re.MULTILINE)
    assert "runs/services.py" in output and "(run_execute)" in output, "the profile does not show the run"
    assert "(run_send)" in output, "the profile misses the case threads"
    for size in (2, 3):
        assert re.search(rf"^\s+{size} cases: peak RSS [\d.]+ MB", output, re.MULTILINE), output
