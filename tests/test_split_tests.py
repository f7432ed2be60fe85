"""scripts/split_tests.py: the test files of each process of a pass (scripts/test), whole files in groups about
equally long, so a process imports only the test modules it runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

BASE_DIR = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("split_tests", BASE_DIR / "scripts" / "split_tests.py")
assert _spec and _spec.loader
split_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(split_tests)

names = st.from_regex(r"tests/[a-z]{1,3}/test_[a-z]{1,4}\.py", fullmatch=True)


@given(
    files=st.lists(names, unique=True, max_size=40),
    seconds=st.lists(st.floats(min_value=0, max_value=500), max_size=40),
    count=st.integers(min_value=1, max_value=6),
)
def test_it_puts_every_file_in_exactly_one_group(files, seconds, count):
    known = dict(zip(files, seconds, strict=False))

    groups = split_tests.groups_of(files, known, count)

    assert len(groups) == count
    assert sorted(path for group in groups for path in group) == sorted(files)


@given(seconds=st.lists(st.floats(min_value=0.1, max_value=100), min_size=8, max_size=60))
def test_it_keeps_no_group_longer_than_the_shortest_by_more_than_its_longest_file(seconds):
    files = [f"tests/test_{index}.py" for index in range(len(seconds))]
    known = dict(zip(files, seconds, strict=True))

    totals = [sum(known[path] for path in group) for group in split_tests.groups_of(files, known, 4)]

    assert max(totals) - min(totals) <= max(seconds) + 1e-9


def test_it_spreads_the_files_of_no_known_duration_over_the_groups():
    known = {"tests/test_long.py": 100.0}
    files = ["tests/test_long.py", *(f"tests/test_new_{index}.py" for index in range(9))]

    groups = split_tests.groups_of(files, known, 4)

    assert sorted(len(group) for group in groups) == [2, 2, 3, 3]


def test_it_lists_each_test_file_of_the_checkout_in_one_process_and_leaves_out_what_it_is_told():
    listed = []
    for group in (1, 2, 3):
        done = subprocess.run(
            [sys.executable, "scripts/split_tests.py", "tests/durations/postgres.json", "3", str(group),
             "--ignore", "tests/demo", "--ignore", "tests/browser"],
            cwd=BASE_DIR, capture_output=True, text=True, check=True,
        )
        listed += done.stdout.split()

    expected = sorted(
        path.relative_to(BASE_DIR).as_posix() for path in (BASE_DIR / "tests").rglob("test_*.py")
        if not path.relative_to(BASE_DIR).as_posix().startswith(("tests/demo/", "tests/browser/"))
    )
    assert sorted(listed) == expected
    assert "tests/test_split_tests.py" in listed


def test_it_refuses_a_group_out_of_range():
    done = subprocess.run(
        [sys.executable, "scripts/split_tests.py", "tests/durations/postgres.json", "4", "5"],
        cwd=BASE_DIR, capture_output=True, text=True,
    )

    assert done.returncode == 2
    assert "group must be between 1 and 4, got 5" in done.stderr
