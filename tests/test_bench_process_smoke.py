"""The process agent benchmark runs end to end and prints its table (a smoke test: no timing is asserted)."""

from __future__ import annotations

import re

import pytest

from tests.bench_runs import bench_report

# The bench makes a scratch database of its own (on the PostgreSQL server DATABASE_URL names, if it names one).
pytestmark = pytest.mark.own_database

NUMBER = r"(-?[\d.]+)"


@pytest.mark.slow
def test_it_prints_a_process_agents_cost_per_case_beside_the_same_agent_in_process():
    output = bench_report("process_overhead.py", "--quick")

    for variant in ("model only", "model + tool"):
        measured = {}
        for runtime in ("python (in-process)", "process (sealed)", "process (sealed, ACP)"):
            match = re.search(rf"^{re.escape(variant)}\s+{re.escape(runtime)}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}$",
                              output, re.MULTILINE)
            assert match, f"no {variant} / {runtime} row:\n{output}"
            measured[runtime] = float(match.group(1)), float(match.group(2))
        python_wall, python_cpu = measured["python (in-process)"]
        for name, runtime in (("process", "process (sealed)"), ("ACP", "process (sealed, ACP)")):
            cost = re.search(rf"^start cost per case \({re.escape(variant)}, {name}\)\s+{NUMBER} ms wall, "
                             rf"{NUMBER} ms CPU$", output, re.MULTILINE)
            assert cost, output
            process_wall, process_cpu = measured[runtime]
            assert float(cost.group(1)) == pytest.approx(process_wall - python_wall, abs=0.11)
            assert float(cost.group(2)) == pytest.approx(process_cpu - python_cpu, abs=0.11)
            ratio = re.search(rf"^{name} ÷ python \({re.escape(variant)}\)\s+{NUMBER}x wall, {NUMBER}x CPU$", output,
                              re.MULTILINE)
            assert ratio, output
            # One pass each: the ratio is that pass's, so it matches the table's figures.
            assert float(ratio.group(1)) == pytest.approx(process_wall / python_wall, rel=0.02)
