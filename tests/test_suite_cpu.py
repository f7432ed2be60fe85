"""The suite's CPU report (AGENTTEST_TEST_CPU_REPORT, tests/conftest.py) and bench/suite_cpu.py, which sums it up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.suite_cpu import main

BASE_DIR = Path(__file__).resolve().parent.parent


def test_it_writes_the_cpu_seconds_of_each_test_of_a_process_to_the_report_directory(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["AGENTTEST_TEST_CPU_REPORT"] = str(tmp_path / "cpu")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/test_suite_speed.py"],
        cwd=BASE_DIR, env=env, capture_output=True, text=True, check=False, timeout=600,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    [report] = (tmp_path / "cpu").glob("sqlite3-*.json")
    seconds = json.loads(report.read_text())
    assert seconds and all(test.startswith("tests/test_suite_speed.py::") for test in seconds)
    assert all(isinstance(value, float) and value >= 0 for value in seconds.values())


def test_it_sums_the_reports_per_engine_and_prices_the_tests_run_on_both(tmp_path, capsys):
    (tmp_path / "sqlite3-1.json").write_text(json.dumps({"tests/a.py::one": 2.0, "tests/a.py::two": 1.0,
                                                         "tests/b.py::only_here": 5.0}))
    (tmp_path / "sqlite3-2.json").write_text(json.dumps({"tests/c.py::three": 1.0}))
    (tmp_path / "postgresql-3.json").write_text(json.dumps({"tests/a.py::one": 4.0, "tests/a.py::two": 3.0}))

    main([str(tmp_path)])

    lines = capsys.readouterr().out.splitlines()
    assert "postgresql: 7 CPU s over 2 tests" in lines
    assert "sqlite3: 9 CPU s over 4 tests" in lines
    assert "run on both engines: 2 tests, 7 CPU s on postgresql, 3 on sqlite3" in lines
    assert lines[-1].split() == ["7.0", "s", "3.0", "s", "2", "tests", "tests/a.py"]
