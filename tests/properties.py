"""Hypothesis as the suite uses it: no verdict depends on how fast the machine is (issue 40).

The profile in tests/conftest.py turns off the deadline and the "too slow" health check, which time each example's
generation and run: a loaded machine is slow at both. A test that names its own health checks replaces the
profile's list, so it names this one."""

from __future__ import annotations

from hypothesis import HealthCheck

# Function-scoped fixtures (a database, settings) shared by a property's examples on purpose, and never "too slow".
SUPPRESSED_WITH_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
