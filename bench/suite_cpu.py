"""Where the test suite's CPU goes, test file by test file and pass by pass (issue 40).

    AGENTTEST_TEST_CPU_REPORT=/tmp/cpu bash scripts/test
    .venv/bin/python bench/suite_cpu.py /tmp/cpu [--top 40]

Each pytest process of the run writes the CPU seconds of each of its tests (its own and its subprocesses', once
waited for) to `<engine>-<pid>.json` in the directory (tests/conftest.py). This prints the total per engine, the
files that cost the most on each, and what the tests run on both engines cost: what running one of them once
would save.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def load(directory: Path) -> dict[str, dict[str, float]]:
    """CPU seconds by engine ("sqlite3", "postgresql"), then by test id; the demo's process counts as its engine."""
    by_engine: dict[str, dict[str, float]] = defaultdict(dict)
    for report in sorted(directory.glob("*.json")):
        engine = report.name.split("-", 1)[0]
        by_engine[engine].update(json.loads(report.read_text()))
    return by_engine


def by_file(tests: dict[str, float]) -> dict[str, float]:
    files: dict[str, float] = defaultdict(float)
    for test, seconds in tests.items():
        files[test.split("::", 1)[0]] += seconds
    return files


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    engines = load(args.directory)
    if not engines:
        raise SystemExit(f"no reports in {args.directory}: run the suite with AGENTTEST_TEST_CPU_REPORT set")
    for engine, tests in sorted(engines.items()):
        print(f"{engine}: {sum(tests.values()):.0f} CPU s over {len(tests)} tests")
        for path, seconds in sorted(by_file(tests).items(), key=lambda item: -item[1])[:args.top]:
            print(f"  {seconds:7.1f} s  {path}")
    if len(engines) < 2:
        return
    first, second = sorted(engines)[:2]
    both = engines[first].keys() & engines[second].keys()
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for test in both:
        entry = files[test.split("::", 1)[0]]
        entry[0] += engines[first][test]
        entry[1] += engines[second][test]
        entry[2] += 1
    print(f"run on both engines: {len(both)} tests, {sum(e[0] for e in files.values()):.0f} CPU s on {first}, "
          f"{sum(e[1] for e in files.values()):.0f} on {second}")
    for path, (one, other, count) in sorted(files.items(), key=lambda item: -min(item[1][:2]))[:args.top]:
        print(f"  {one:7.1f} s  {other:7.1f} s  {count:4d} tests  {path}")


if __name__ == "__main__":
    main()
