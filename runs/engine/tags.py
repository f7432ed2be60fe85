"""The tags on the test conversations the runner opens: every one carries TEST_TAG, and a run's also its run tag.
Tags alone prove nothing (anyone may tag a conversation so); the selectors pair them with the seal."""

from __future__ import annotations

TEST_TAG = "agenttest"


def run_tag(run_id: int) -> str:
    """The tag a run's test conversations carry besides TEST_TAG (runs/engine/planning.py passes it to the runner)."""
    return f"run:{run_id}"
