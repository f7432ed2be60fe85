"""The Celery queues runs travel on: one per isolation group. The worker command (agenttest/cli.py) consumes them,
dispatch publishes to them and the worker's heartbeat reads its group back from them."""

from __future__ import annotations

RUNS_QUEUE = "runs"
DEFAULT_GROUP = "default"


def group_queue(group: str) -> str:
    """The Celery queue of an isolation group's runs: `runs` for the default group (what a worker started before
    groups existed consumes), `runs.<group>` for every other."""
    return RUNS_QUEUE if group == DEFAULT_GROUP else f"{RUNS_QUEUE}.{group}"


def queue_group(queue: str) -> str | None:
    """The isolation group a queue serves, or None for a queue that carries no runs."""
    if queue == RUNS_QUEUE:
        return DEFAULT_GROUP
    prefix = f"{RUNS_QUEUE}."
    return queue[len(prefix):] or None if queue.startswith(prefix) else None
