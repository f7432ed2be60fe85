"""The demo's pages in a real browser: the browser tests' fixtures (tests/browser/conftest.py — Chromium, signing in,
a run queue with a real worker), and the demo suite on the demo's simulated models."""

from __future__ import annotations

import pytest

from cases.models import Suite
from tests.browser.conftest import (  # noqa: F401 — fixtures
    _one_chromium,
    chromium,
    run_queue,
    save_screenshot,
    sign_in,
)

CAREFUL, HASTY = "simulated:sim-careful", "simulated:sim-hasty"


@pytest.fixture
def demo_suite(demo_agents) -> Suite:
    from agenttest_demo.suite import demo_suite_ensure

    suite, _ = demo_suite_ensure()
    return suite
