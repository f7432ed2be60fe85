"""A run's hold on its executor and on the run lock: the claim, the lease and its heartbeat, and the sweep.

A run is held by the executor that claimed it: a lease with a heartbeat in the database, renewed every third of
AGENTTEST_RUN_LEASE_SECONDS. Every write of a run's results and verdict is conditional on the lease, so an executor
that lost it writes nothing more. Only an expired lease is swept. Runs of one isolation group never overlap: the
group's run lock (RunLock) is taken with the run and let go with its verdict or its sweep.

Every lease time is the database's (`Now()` inside the conditional update or filter), never an executor's clock:
executors and sweepers run on different machines, and a clock 20 s behind would otherwise have its healthy run swept
(or, ahead, keep a dead executor's lock for the skew on top of the lease). On SQLite, which one machine's processes
share, the database's time is that machine's clock.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Q, QuerySet
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from runs.engine.errors import RunConflict
from runs.models import CaseResult, Run, RunLock

logger = logging.getLogger(__name__)


class RunLocked(RunConflict):
    """Another run holds the run lock; `retry_after` is how long a queued run waits before it asks again."""

    def __init__(self, *, holder_id: int | None, started_at: Any) -> None:
        started = started_at.isoformat(timespec="seconds") if started_at else "not started yet"
        super().__init__(f"run #{holder_id} holds the run lock (started {started}); wait for it or cancel it")
        self.holder_id = holder_id
        self.retry_after = run_retry_after()
        self.waiting_note = ""


class LeaseLost(Exception):
    """This executor no longer holds its run (its lease expired and the run was swept or taken over): it must stop
    and write nothing more — no result, no verdict."""


def _lease_seconds() -> float:
    return float(settings.AGENTTEST_RUN_LEASE_SECONDS)


def run_retry_after() -> float:
    """Seconds before a run that could not be claimed yet asks again: well within a lease period."""
    return max(1.0, min(5.0, _lease_seconds() / 3))


def lease_period() -> timedelta:
    return timedelta(seconds=_lease_seconds())


def lease_end() -> CombinedExpression:
    """When a lease taken or renewed now runs out, in the database's time."""
    return Now() + lease_period()


def database_now() -> datetime:
    """The database's current time (what `Now()` is in a statement), for arithmetic a filter cannot express."""
    compiler = Run.objects.none().query.get_compiler(connection=connection)
    sql, params = compiler.compile(Now())
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", list(params))
        value = cursor.fetchone()[0]
    if isinstance(value, str):
        # SQLite answers text in UTC, as Django stores datetimes there.
        value = parse_datetime(value)
    aware: datetime = value if timezone.is_aware(value) else value.replace(tzinfo=UTC)
    return aware


def _expired() -> Q:
    # A Running row without a lease predates leases (or its executor never got to renew): nobody holds it.
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=Now())


class Lease:
    """An executor's hold on the run it claimed and on the run lock. A heartbeat thread, on its own connection,
    renews both every third of AGENTTEST_RUN_LEASE_SECONDS; a renewal that finds the run no longer held sets `lost`."""

    def __init__(self, *, run_id: int, owner: str, group: str) -> None:
        self.run_id = run_id
        self.owner = owner
        self.group = group
        self.lost = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def held(self) -> QuerySet[Run]:
        """The run, only while this executor holds it: a write through this is conditional on the lease."""
        return Run.objects.filter(pk=self.run_id, lease_owner=self.owner)

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"run #{self.run_id} is no longer held by this executor")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, name=f"agenttest-lease-{self.run_id}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def renew(self) -> bool:
        with transaction.atomic():
            held = self.held().filter(status=Run.Status.RUNNING).update(lease_expires_at=lease_end())
            if held:
                RunLock.objects.filter(group=self.group, run_id=self.run_id).update(expires_at=lease_end())
        return bool(held)

    def _beat(self) -> None:
        try:
            while not self._stopping.wait(_lease_seconds() / 3):
                try:
                    if not self.renew():
                        self.lost.set()
                        return
                except DatabaseError:
                    # Not lost yet: the lease runs out only if the database stays away longer than it lasts.
                    logger.warning("could not renew the lease of run %s; retrying", self.run_id, exc_info=True)
                    connection.close()
        finally:
            connection.close()


def _executor_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"[:200]


def _lock_holder_error(group: str) -> RunLocked:
    lock = RunLock.objects.filter(group=group).select_related("run").first()
    holder = lock.run if lock is not None else None
    return RunLocked(holder_id=holder.pk if holder else None, started_at=holder.started_at if holder else None)


class RunWaiting(RunLocked):
    """An earlier-triggered run of the same isolation group is still Pending: runs of a group start in the order
    they were triggered, whichever worker gets which message first."""

    def __init__(self, *, earlier_id: int) -> None:
        RunConflict.__init__(
            self,
            f"run #{earlier_id} of the same isolation group was triggered earlier and has not finished; runs of a "
            "group start in trigger order (start a worker serving the group, or cancel that run)",
        )
        self.holder_id = earlier_id
        self.retry_after = 1.0
        self.waiting_note = f"waiting for run #{earlier_id}, triggered earlier in the same isolation group"


def run_claim(*, run_id: int, group: str | None = None, in_order: bool = True) -> Lease | None:
    """Claim a Pending run for this executor: take its isolation group's run lock (free, or held by an expired
    lease) and the run in one transaction, each with a conditional update. None when the run is not Pending (a
    duplicate delivery, a cancel, a delete); RunLocked when another run holds the lock, RunWaiting when an earlier
    run of the group is still Pending — then nothing changed. `in_order=False` (an inline run, executed by the
    command that created it rather than queued) skips only the trigger-order wait; the run lock still holds."""
    run_sweep_expired()
    if group is None:
        group = Run.objects.filter(pk=run_id).values_list("isolation_group", flat=True).first() or RunLock.DEFAULT_GROUP
    RunLock.objects.get_or_create(group=group)
    owner = _executor_id()
    with transaction.atomic():
        if not Run.objects.filter(pk=run_id, status=Run.Status.PENDING).exists():
            return None
        earlier = in_order and (
            Run.objects.filter(status=Run.Status.PENDING, isolation_group=group, pk__lt=run_id)
            .order_by("pk")
            .values_list("pk", flat=True)
            .first()
        )
        if earlier:
            raise RunWaiting(earlier_id=earlier)
        free = Q(run__isnull=True) | Q(expires_at__isnull=True) | Q(expires_at__lte=Now())
        if not RunLock.objects.filter(free, group=group).update(run_id=run_id, expires_at=lease_end()):
            raise _lock_holder_error(group)
        claimed = Run.objects.filter(pk=run_id, status=Run.Status.PENDING).update(
            status=Run.Status.RUNNING, started_at=Now(), current="", lease_owner=owner, lease_expires_at=lease_end()
        )
        if claimed != 1:
            transaction.set_rollback(True)
            return None
    return Lease(run_id=run_id, owner=owner, group=group)


def run_wait_for_lock(*, run_id: int, holder_id: int | None, note: str = "") -> None:
    """Say on a Pending run why it has not started. A worker had the run in hand just now and sends it again: it
    counts as picked up (see run_requeue_lost)."""
    Run.objects.filter(pk=run_id, status=Run.Status.PENDING).update(
        current=note or f"waiting for run #{holder_id} to finish (it holds the run lock)",
        queued_at=Now(),
        requeued_at=None,
    )


def unpicked_runs(*, groups: list[str] | None = None) -> QuerySet[Run]:
    """Pending runs (of `groups`) that no worker has had in hand for a lease period while nothing held their group's
    run lock: their message was most likely lost. A run queued behind a live holder is expected to wait."""
    held = RunLock.objects.filter(run__isnull=False, expires_at__gt=Now()).values("group")
    runs = Run.objects.filter(status=Run.Status.PENDING, queued_at__lte=Now() - lease_period()).exclude(
        isolation_group__in=held
    )
    return runs if groups is None else runs.filter(isolation_group__in=groups)


def run_sweep_expired() -> list[int]:
    """Every Running run whose lease expired (its executor was killed or hung) becomes Error, keeping every finished
    result, and lets go of the run lock. A run whose executor still renews its lease is never touched."""
    swept = []
    for run_id in Run.objects.filter(_expired(), status=Run.Status.RUNNING).values_list("pk", flat=True):
        with transaction.atomic():
            # Clearing the owner first makes every later write of a stalled executor fail its lease check.
            if not Run.objects.filter(_expired(), pk=run_id, status=Run.Status.RUNNING).update(
                status=Run.Status.ERROR, finished_at=Now(), current="", lease_owner="", lease_expires_at=None
            ):
                continue
            run = Run.objects.get(pk=run_id)
            kept = CaseResult.objects.filter(run_id=run_id).count()
            Run.objects.filter(pk=run_id).update(
                reason=(
                    "the executor of this run stopped (its worker was killed, restarted or hung, so its lease "
                    f"expired); {kept} of {run.total} results were kept"
                )
            )
            RunLock.objects.filter(run_id=run_id).update(run=None, expires_at=None)
        swept.append(run_id)
    return swept
