"""Which isolation groups live workers serve: each run worker's main process renews a beat (WorkerBeat) as often as
it sweeps leases, so a Pending run whose group no live worker serves can say why it does not start."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db.models.functions import Now

from common.queues import queue_group
from runs.models import WorkerBeat


def served_groups(queues: Iterable[str]) -> list[str]:
    """The isolation groups whose queues are among `queues`, in order."""
    groups = [queue_group(queue) for queue in queues]
    return list(dict.fromkeys(group for group in groups if group))


def worker_beat(*, name: str, groups: list[str]) -> None:
    WorkerBeat.objects.update_or_create(name=name[:200], defaults={"groups": groups, "seen_at": Now()})


def worker_gone(*, name: str) -> None:
    WorkerBeat.objects.filter(name=name[:200]).delete()


def live_workers(*, group: str) -> list[str]:
    """The names of the live workers serving `group`: beats renewed within a lease period (three missed beats)."""
    # The database's time, as for leases: the beat was written with it, by a worker whose clock may be off.
    since = Now() - timedelta(seconds=float(settings.AGENTTEST_RUN_LEASE_SECONDS))
    beats = WorkerBeat.objects.filter(seen_at__gte=since).values_list("name", "groups")
    return sorted(name for name, groups in beats if group in (groups or []))
