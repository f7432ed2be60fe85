"""The suite's own rule that no verdict depends on how fast the machine is (issue 40), where it can be read from the
tests' text: Hypothesis times each example's generation and run unless told not to."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

TESTS = Path(__file__).resolve().parent
# What a test may name as its health checks: the suite's list, which keeps "too slow" off, or all of them.
UNTIMED = {"SUPPRESSED_WITH_FIXTURES", "list(HealthCheck)"}


def _timed_examples(path: str, source: str) -> list[str]:
    """Where a test's Hypothesis settings time its examples: a deadline other than None, or health checks of its own
    that leave "too slow" on (they replace the profile's list, which turns it off)."""
    found = []
    for call in ast.walk(ast.parse(source, filename=path)):
        # Hypothesis's settings under any name the tests give them (settings, hypothesis_settings, settings_profile).
        if not isinstance(call, ast.Call) or "settings" not in ast.unparse(call.func) and not ast.unparse(
            call.func
        ).endswith("register_profile"):
            continue
        for keyword in call.keywords:
            value = ast.unparse(keyword.value)
            if keyword.arg == "deadline" and value != "None":
                found.append(f"{path}:{keyword.lineno}: deadline={value}")
            if keyword.arg == "suppress_health_check" and value not in UNTIMED and "too_slow" not in value:
                found.append(f"{path}:{keyword.lineno}: suppress_health_check={value}")
    return found


def test_it_lets_no_property_test_fail_because_the_machine_is_slow():
    profile = hypothesis_settings.get_profile("agenttest")
    assert profile.deadline is None and HealthCheck.too_slow in profile.suppress_health_check
    assert hypothesis_settings.default.deadline is None
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        found.extend(_timed_examples(str(path.relative_to(TESTS.parent)), path.read_text()))
    assert found == []


def test_it_finds_a_property_test_that_times_its_examples():
    planted = (
        "@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])\n"
        "@settings(deadline=500, suppress_health_check=SUPPRESSED_WITH_FIXTURES)\n"
        "@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])\n"
        "@settings(suppress_health_check=list(HealthCheck), deadline=None)\n"
        "@settings_profile(suppress_health_check=[HealthCheck.filter_too_much])\n"
        "def test_it(): pass\n"
        "hypothesis.settings.register_profile('ci', deadline=timedelta(seconds=1))\n"
        "provider.complete(ModelRequest(model='m', deadline=time.monotonic() + 1))\n"
    )
    assert _timed_examples("tests/test_x.py", planted) == [
        "tests/test_x.py:1: suppress_health_check=[HealthCheck.function_scoped_fixture]",
        "tests/test_x.py:2: deadline=500",
        "tests/test_x.py:5: suppress_health_check=[HealthCheck.filter_too_much]",
        "tests/test_x.py:7: deadline=timedelta(seconds=1)",
    ]
