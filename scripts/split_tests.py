"""The test files one process of a pass runs (scripts/test): every test file under tests/, each in exactly one of
GROUPS groups, the groups about equally long by the durations file.

    python scripts/split_tests.py tests/durations/postgres.json 4 2 --ignore tests/demo --ignore tests/browser

Whole files, not single tests (as pytest-split splits): a process imports only the test modules it runs. Each of
the suite's processes used to collect all of them, about 22 CPU seconds each (the frameworks, Playwright, hypothesis'
strategies), to run a quarter. A file the durations file does not know counts as taking no time — most are files
whose every test the pass deselects (a PostgreSQL pass runs no test that asks for no database), a new file until the
durations are measured again — and such files go to the groups with the fewest files.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

TESTS = Path("tests")


def test_files(ignore: list[str]) -> list[str]:
    """Every file pytest collects under tests/ (pyproject's `python_files`), but those under `ignore`."""
    ignored = [Path(path) for path in ignore]
    return sorted(
        path.as_posix() for path in TESTS.rglob("test_*.py")
        if not any(path == skip or skip in path.parents for skip in ignored)
    )


def file_durations(durations: dict[str, float]) -> dict[str, float]:
    by_file: dict[str, float] = defaultdict(float)
    for test, seconds in durations.items():
        by_file[test.split("::", 1)[0]] += seconds
    return dict(by_file)


def groups_of(files: list[str], known: dict[str, float], count: int) -> list[list[str]]:
    """`files` in `count` groups of about equal total duration: the longest file first, each to the group that is
    shortest so far; then the files of no known duration, each to the group with the fewest files. Each group's
    files in their usual (sorted) order."""
    totals = [0.0] * count
    groups: list[list[str]] = [[] for _ in range(count)]
    for path in sorted(files, key=lambda name: (-known.get(name, 0.0), name)):
        seconds = known.get(path, 0.0)
        if seconds:
            chosen = min(range(count), key=lambda index: (totals[index], len(groups[index]), index))
        else:
            chosen = min(range(count), key=lambda index: (len(groups[index]), totals[index], index))
        groups[chosen].append(path)
        totals[chosen] += seconds
    return [sorted(group) for group in groups]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The test files of one process of a pass.")
    parser.add_argument("durations", type=Path, help="pytest-split's durations file: seconds by test id")
    parser.add_argument("groups", type=int)
    parser.add_argument("group", type=int, help="1 to GROUPS")
    parser.add_argument("--ignore", action="append", default=[], help="a directory or file left out (repeatable)")
    options = parser.parse_args(argv)
    if not 1 <= options.group <= options.groups:
        parser.error(f"group must be between 1 and {options.groups}, got {options.group}")
    known = file_durations(json.loads(options.durations.read_text()))
    for path in groups_of(test_files(options.ignore), known, options.groups)[options.group - 1]:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
