"""Run lifecycle, the public services: create (validated at trigger time), trigger and resume through the queue,
execute under a lease, cancel, delete, prune and the worker-start sweep. Every transition is guarded here.

The machinery lives in the engine room, runs/engine/: run_checks.py (trigger-time checks), dispatch.py (the queue),
leases.py (claim, lease, heartbeat, run lock, sweep), planning.py (case plans), run_loop.py (the loop), budget.py
(spend against the budget) and results.py (storing results and the verdict).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from agenthost.seams import Agent, Conversation, agent_as_stored
from cases.models import Case, Suite
from runs.engine.agent_snapshots import agents_snapshot, model_config_hash, recording_versions
from runs.engine.dispatch import queue_or_undo, queue_ping, run_dispatch
from runs.engine.errors import QueueUnavailable, RunConflict, RunError
from runs.engine.freezing import result_freeze
from runs.engine.leases import (
    Lease,
    LeaseLost,
    RunLocked,
    database_now,
    lease_period,
    run_claim,
    run_sweep_expired,
    run_wait_for_lock,
    unpicked_runs,
)
from runs.engine.results import reconnecting, result_counts, run_fail
from runs.engine.run_checks import run_options_validate, run_validate
from runs.engine.run_loop import RunLoop
from runs.models import CaseResult, Run
from runs.selectors import prunable_test_conversation_ids, run_conversation_ids

__all__ = [
    "MAX_PRUNE_DAYS",
    "Lease",
    "QueueUnavailable",
    "RunConflict",
    "RunError",
    "RunLocked",
    "result_freeze",
    "run_bless",
    "run_cancel",
    "run_claim",
    "run_conversations_prune",
    "run_create",
    "run_delete",
    "run_dispatch",
    "run_execute",
    "run_prepare_resume",
    "run_requeue_lost",
    "run_resume",
    "run_sweep_expired",
    "run_sweep_interrupted",
    "run_trigger",
    "run_unbless",
    "run_validate",
    "run_wait_for_lock",
]

logger = logging.getLogger(__name__)

RESUMABLE = ("error", "cancelled")
MAX_PRUNE_DAYS = 36500
# Conversations deleted per statement: a bounded IN list, and a bounded cascade to their messages.
PRUNE_CHUNK = 100


@transaction.atomic
def run_create(
    *,
    suite: Suite,
    model_keys: list[str],
    case_filter: str = "",
    triggered_by: Any = None,
    mode: str = Run.Mode.LIVE,
    trials: int = 1,
    budget_tokens: int | None = None,
    budget_cost: Any = None,
    update_snapshots: bool = False,
) -> Run:
    run_options_validate(mode=mode, trials=trials, budget_tokens=budget_tokens, budget_cost=budget_cost)
    case_ids = run_validate(suite=suite, model_keys=model_keys, case_filter=case_filter, mode=mode)
    return Run.objects.create(
        suite=suite,
        model_keys=list(model_keys),
        case_filter=case_filter,
        case_ids=case_ids,
        mode=mode,
        trials=trials,
        budget_tokens=budget_tokens,
        budget_cost=Decimal(str(budget_cost)) if budget_cost is not None else None,
        total=len(case_ids) * len(model_keys) * trials,
        triggered_by=triggered_by,
        agent_snapshot=_agent_snapshot(suite, case_ids, model_keys=model_keys, mode=mode),
        isolation_group=suite.isolation_group,
        update_snapshots=update_snapshots,
    )


def run_trigger(
    *,
    suite: Suite,
    model_keys: list[str],
    case_filter: str = "",
    triggered_by: Any = None,
    dispatch: Callable[[int], None] | None = None,
    **options: Any,
) -> Run:
    """Create and queue a run. If the queue does not take it, nothing is left behind and QueueUnavailable says why.

    `options` are run_create's: mode, trials, budget_tokens, budget_cost."""
    run_options_validate(
        mode=options.get("mode", Run.Mode.LIVE),
        trials=options.get("trials", 1),
        budget_tokens=options.get("budget_tokens"),
        budget_cost=options.get("budget_cost"),
    )
    run_validate(suite=suite, model_keys=model_keys, case_filter=case_filter, mode=options.get("mode", Run.Mode.LIVE))
    queue_ping()
    run = run_create(suite=suite, model_keys=model_keys, case_filter=case_filter, triggered_by=triggered_by, **options)
    queue_or_undo(run=run, dispatch=dispatch, undo=run.delete)
    return run


@transaction.atomic
def run_prepare_resume(*, run: Run) -> Run:
    """Put an interrupted run back to Pending. Finished results stay; cancelled ones are dropped so those pairs run
    again. Only pairs without a result are executed."""
    # A run whose executor died is resumable at once, without waiting for a worker's sweep.
    run_sweep_expired()
    run = Run.objects.select_for_update().get(pk=run.pk)
    if Run.objects.filter(pk=run.pk, lease_expires_at__gt=Now()).exists():
        assert run.lease_expires_at is not None, "the lease the query just found"
        raise RunConflict(
            f"run #{run.pk} is still held by its executor (lease until "
            f"{run.lease_expires_at.isoformat(timespec='seconds')}); wait for it to stop, or cancel it"
        )
    if run.status not in RESUMABLE:
        raise RunConflict(
            f"run #{run.pk} is {run.get_status_display()}; only a run that ended in Error or Cancelled can be resumed"
        )
    CaseResult.objects.filter(run=run, status=CaseResult.Status.CANCELLED).delete()
    counts = result_counts(run=run)
    kept = sum(counts.values())
    if kept >= run.total:
        raise RunConflict(f"run #{run.pk} has a result for every case and model; there is nothing to resume")
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.PENDING,
        cancel_requested=False,
        finished_at=None,
        current="",
        reason=f"resumed with {kept} of {run.total} results kept",
        **counts,
    )
    run.refresh_from_db()
    return run


def run_resume(*, run: Run, dispatch: Callable[[int], None] | None = None) -> Run:
    """Resume an interrupted run through the queue; if the queue does not take it the run is left as it was."""
    before = Run.objects.get(pk=run.pk)
    queue_ping()
    run = run_prepare_resume(run=run)

    def undo() -> None:
        Run.objects.filter(pk=run.pk, status=Run.Status.PENDING).update(
            status=before.status, reason=before.reason, finished_at=before.finished_at
        )

    queue_or_undo(run=run, dispatch=dispatch, undo=undo)
    return run


def _agent_snapshot(suite: Suite, case_ids: list[int], *, model_keys: list[str], mode: str) -> dict[str, Any]:
    """The suite's agent at its top level (as every run has kept it); under "agents" every agent the run can reach
    (runs.engine.agent_snapshots), so a comparison names the sub-agent that changed; under "models" a hash of each
    model's configuration; and for a replay under "recordings" the version of each recording it will serve — so the
    run page can say of each flipped case whether the agent, the case, the model or a recording changed."""
    agent = suite.agent
    loaded = agent_as_stored(agent)
    entering = dict(
        Case.objects.filter(pk__in=case_ids, entry_agent__isnull=False).values_list("pk", "entry_agent__name")
    )
    entered = Agent.objects.filter(name__in=set(entering.values())).order_by("name") if entering else []
    return {
        "agent": agent.name,
        "instruction_hash": hashlib.sha256(agent.instruction.encode()).hexdigest(),
        # The text too, so a comparison can show how the instruction changed between two runs.
        "instruction": agent.instruction,
        "model": agent.model_key,
        "temperature": agent.temperature,
        "functions": loaded.tools(entry_agent_name=agent.name),
        "sub_agents": [name for name, _ in loaded.sub_agents],
        # The MCP tools as their servers last listed them, by function name: what the run's cases were offered.
        "mcp_tools": {
            item["name"]: {**item["mcp"], "description": item["description"], "parameters": item["parameters"]}
            for item in loaded.functions
            if isinstance(item.get("mcp"), dict)
        },
        "agents": (reached := agents_snapshot(entry=agent, case_entry_agents=entered)),
        # The order the run reached them in: PostgreSQL's jsonb keeps an object's keys in an order of its own.
        "agents_order": list(reached),
        # Case id → the agent it enters at, for the cases that do not start at the suite's.
        "case_entry_agents": {str(pk): name for pk, name in entering.items()},
        "models": {key: model_config_hash(key) for key in model_keys},
        **({"recordings": recording_versions(case_ids=case_ids, model_keys=model_keys)} if mode == Run.Mode.REPLAY
           else {}),
    }


def run_execute(*, run_id: int, lease: Lease | None = None) -> Run | None:
    """Execute a queued run under its lease (claimed here unless the caller claimed it). Returns None when there was
    nothing to claim; raises RunLocked when another run holds the run lock. Any failure of the loop ends the run
    Error with a reason naming it; an executor that lost its lease stops without writing anything more."""
    lease = lease or run_claim(run_id=run_id)
    if lease is None:
        # Expected, not news: a worker re-sends every Pending run at start in case its message was lost, so one of
        # the two copies always finds the run taken (or it was cancelled or deleted meanwhile).
        logger.debug("run %s is no longer pending; this message has nothing to do", run_id)
        return None
    lease.start()
    try:
        return RunLoop(lease=lease).run()
    except LeaseLost:
        logger.warning("run %s: this executor lost its lease; it stopped without writing a verdict", run_id)
        return Run.objects.filter(pk=run_id).first()
    except Exception as exc:
        logger.exception("run %s failed", run_id)
        return reconnecting(run_fail, lease=lease, exc=exc)
    finally:
        lease.stop()


def run_cancel(*, run: Run) -> Run:
    """A pending run is cancelled at once; a running one stops between cases."""
    if run.is_finished:
        raise RunConflict(f"run #{run.pk} has already finished ({run.get_status_display()}); nothing to cancel")
    if Run.objects.filter(pk=run.pk, status=Run.Status.PENDING).update(
        status=Run.Status.CANCELLED,
        current="",
        cancel_requested=True,
        reason="cancelled before it started",
        finished_at=Now(),
    ):
        Run.objects.filter(pk=run.pk).update(cancelled=F("total"))
    else:
        Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING).update(cancel_requested=True)
    run.refresh_from_db()
    return run


BLESSABLE = ("passed", "failed")


@transaction.atomic
def run_bless(*, run: Run, by: Any = None) -> Run:
    """Make `run` its suite's blessed baseline — the known-good run later runs compare with by default — in place of
    the one blessed before. Only a run that finished with a verdict (Passed or Failed) can be: an Error or Cancelled
    run did not judge every case."""
    # The suite row serialises two blessings of one suite, so the one-per-suite constraint never fails on a race.
    Suite.objects.select_for_update().filter(pk=run.suite_id).first()
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.status not in BLESSABLE:
        raise RunConflict(
            f"run #{run.pk} is {run.get_status_display()}; only a run that finished Passed or Failed can be the "
            "blessed baseline"
        )
    Run.objects.filter(suite_id=run.suite_id, blessed_at__isnull=False).exclude(pk=run.pk).update(
        blessed_at=None, blessed_by=None
    )
    if run.blessed_at is None:
        Run.objects.filter(pk=run.pk).update(blessed_at=timezone.now(), blessed_by=by)
    run.refresh_from_db()
    return run


@transaction.atomic
def run_unbless(*, run: Run) -> Run:
    """Stop using `run` as its suite's baseline; later runs compare with their previous run again. Idempotent."""
    Run.objects.filter(pk=run.pk).update(blessed_at=None, blessed_by=None)
    run.refresh_from_db()
    return run


@transaction.atomic
def run_delete(*, runs: list[Run]) -> tuple[list[int], list[int]]:
    """Delete runs that are not in progress, and the test conversations they made; returns (deleted ids, skipped
    running ids)."""
    skipped = [run.pk for run in runs if run.status == Run.Status.RUNNING]
    deleted = [run.pk for run in runs if run.status != Run.Status.RUNNING]
    deletable = Run.objects.filter(pk__in=deleted).exclude(status=Run.Status.RUNNING)
    conversation_ids = run_conversation_ids(run_ids=list(deletable.values_list("pk", flat=True)))
    deletable.delete()
    Conversation.objects.filter(pk__in=conversation_ids).delete()
    return deleted, skipped


@transaction.atomic
def run_conversations_prune(*, older_than_days: int, dry_run: bool = False) -> int:
    """Delete the test conversations created more than `older_than_days` days ago, except those of a run still in
    progress; returns how many were (with `dry_run`: would be) deleted."""
    if isinstance(older_than_days, bool) or not isinstance(older_than_days, int) or not (
        1 <= older_than_days <= MAX_PRUNE_DAYS
    ):
        raise RunError(
            f"the age must be a whole number of days from 1 to {MAX_PRUNE_DAYS}, got {older_than_days!r}",
            field="older_than",
        )
    ids = prunable_test_conversation_ids(cutoff=timezone.now() - timedelta(days=older_than_days))
    if not dry_run:
        for start in range(0, len(ids), PRUNE_CHUNK):
            Conversation.objects.filter(pk__in=ids[start : start + PRUNE_CHUNK]).delete()
    return len(ids)


def run_sweep_interrupted(*, dispatch: Callable[[int], None] | None = None) -> tuple[list[int], list[int]]:
    """At worker start: sweep the Running runs whose lease expired (run_sweep_expired); a Pending run may have lost
    its message — it is dispatched again (a duplicate is harmless: the claim is conditional)."""
    swept = run_sweep_expired()
    pending = list(Run.objects.filter(status=Run.Status.PENDING).values_list("pk", flat=True))
    redispatched = []
    for run_id in pending:
        Run.objects.filter(pk=run_id).update(queued_at=Coalesce("queued_at", Now()), requeued_at=Now())
        try:
            (dispatch or run_dispatch)(run_id)
            redispatched.append(run_id)
        except Exception:
            logger.exception("could not re-dispatch pending run %s", run_id)
    return swept, redispatched


# However long a run waits unpicked, it is sent again at least this often.
REQUEUE_LONGEST = timedelta(minutes=10)


def run_requeue_lost(*, groups: list[str] | None = None, dispatch: Callable[[int], None] | None = None) -> list[int]:
    """Send again every Pending run (of `groups`) that no worker has picked up for a lease period while nothing held
    its group's run lock (leases.unpicked_runs): its message was lost — a broker that restarted, a task that failed
    before its claim. The database, not the broker, says what is still to run. A duplicate message is harmless: only
    the claim of a Pending run executes it, once. A run is sent again one lease period after it was queued, then
    after twice as long each time (at most REQUEUE_LONGEST), so one waiting behind a busy worker gathers few copies.
    Returns the ids sent again."""
    now, lease = database_now(), lease_period()
    requeued = []
    for run_id, queued_at, requeued_at in unpicked_runs(groups=groups).values_list("pk", "queued_at", "requeued_at"):
        assert queued_at is not None, "unpicked_runs holds queued runs only"
        wait = lease if requeued_at is None else min(max(requeued_at - queued_at, lease), REQUEUE_LONGEST)
        if now < (requeued_at or queued_at) + wait:
            continue
        # Conditional on what was read, so of several workers sweeping at once only one sends it.
        due = Q(requeued_at__isnull=True) if requeued_at is None else Q(requeued_at__lte=Now() - wait)
        if not unpicked_runs().filter(due, pk=run_id).update(requeued_at=Now()):
            continue
        try:
            (dispatch or run_dispatch)(run_id)
        except Exception:
            logger.warning("could not queue pending run %s again; a later sweep tries again", run_id, exc_info=True)
            continue
        requeued.append(run_id)
    return requeued
