"""Leases are on the database's clock, never an executor's: a real Celery worker whose clock is 20 s behind or ahead
(libfaketime preloaded into the worker process — nothing of ours is patched) keeps its healthy run, and its run is
taken over within a lease period once it dies. Lease times written and compared by the database hold at sub-second
precision on SQLite and PostgreSQL, next to datetimes stored from Python.

The model is the local OpenAI-compatible stub, answering after a pause taken in this process: libfaketime 0.9.10
with a real monotonic clock breaks the skewed process's own time.sleep (EINVAL from clock_nanosleep), and without one
its timed waits, so the skewed worker must not be the one that sleeps."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.db.models.functions import Now
from hypothesis import given, settings, strategies
from kombu import Connection

from agenthost.models import Agent
from agenthost.testing.openai_stub import OpenAIStub, echo_reply
from cases.models import Assertion, Case, Mock, Suite, Turn
from common.queues import group_queue
from runs.models import CaseResult, Run, RunLock
from runs.services import run_create, run_sweep_expired, run_trigger
from runs.tasks import execute_run
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.runs.conftest import SCRIPTED
from tests.runs.test_lease import broker
from tests.workers import REDIS_URL, group_worker, wait_for

__all__ = ["broker"]

pytestmark = [pytest.mark.django_db(transaction=True)]
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
SKEW = 20
# SQLite has no clock of its own: its CURRENT_TIMESTAMP is the clock of the process running the statement, and only
# processes of one machine can share its file — one clock. Skewing one process's clock splits what cannot be split, so
# these tests belong to the PostgreSQL pass (tests/conftest.py deselects them on SQLite).
on_a_database_server = pytest.mark.database_server


STUB = "stub:gpt-4o-mini"
MODEL_PAUSE = 0.25
# Longer than test_lease's 3 s: a faketime'd worker on a CI machine running ten test processes went 3 s, and once
# 6 s, without its heartbeat thread getting to renew, and a healthy run was swept. A run of BEHIND_CASES cases, each
# two model calls of MODEL_PAUSE, outlives two leases on the fastest machine.
LEASE_SECONDS = 10
BEHIND_CASES = 44


@pytest.fixture
def worker_env(settings, tmp_path) -> Iterator[dict[str, str]]:
    """The stub model, answering the echo rules a quarter of a second after each request, for this process and the
    workers; a short lease."""

    def slow_echo(body: dict) -> object:
        time.sleep(MODEL_PAUSE)
        return echo_reply(body)

    with OpenAIStub() as stub:
        stub.respond_with(slow_echo)
        settings.AGENTTEST_PROVIDERS = {
            **settings.AGENTTEST_PROVIDERS,
            "stub": {"kind": "openai", "base_url": stub.base_url, "api_key_env": "", "timeout": 10.0,
                     "max_retries": 0, "models": [{"name": "gpt-4o-mini", "input_price": 0, "output_price": 0}]},
        }
        providers = tmp_path / "providers.toml"
        providers.write_text(
            f'[providers.stub]\nkind = "openai"\nbase_url = "{stub.base_url}"\napi_key_env = ""\nmax_retries = 0\n\n'
            '[[providers.stub.models]]\nname = "gpt-4o-mini"\n'
        )
        yield {"AGENTTEST_PROVIDERS_FILE": str(providers), "AGENTTEST_RUN_LEASE_SECONDS": str(LEASE_SECONDS)}


def skewed_suite(name: str, cases: int) -> Suite:
    """Cases in isolation group "skewed", each two model calls (a tool call, then an answer) on the stub."""
    agent = Agent.objects.create(
        name=f"{name}-agent", instruction="Help.", provider="stub", model="gpt-4o-mini",
        functions=[{"name": "find_order"}],
    )
    suite = Suite.objects.create(name=name, agent=agent, isolation_group="skewed", case_timeout_seconds=30)
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"case {index:02d}")
        turn = Turn.objects.create(case=case, user_message=f"Please find_order {1040 + index}")
        Mock.objects.create(case=case, function_name="find_order", result='{"status": "shipped"}')
        Assertion.objects.create(case=case, turn=turn, type="toolCalled", params={"function": "find_order"})
    return suite


def skewed_clock(seconds: int) -> dict[str, str]:
    """The environment that runs a process with its wall clock `seconds` off (libfaketime, Debian's faketime)."""
    assert LIBFAKETIME.exists(), "libfaketime is missing: scripts/test installs Debian's faketime package"
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"{seconds:+d}", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def dispatch(run_id: int) -> None:
    group = Run.objects.get(pk=run_id).isolation_group
    with Connection(REDIS_URL) as connection:
        execute_run.apply_async(args=[run_id], queue=group_queue(group), connection=connection, retry=False)


def wait_ready(*logs: Path) -> None:
    for log in logs:
        wait_for(
            lambda log=log: " ready." in log.read_text(errors="replace"), what="a worker to start",
            log_path=log,
        )


def first_result_clock_offset(run: Run, log_path: Path) -> float:
    """How far the executor's clock is from the database's: waits for the run's first result and compares its
    created_at (the executor's time) with the database's now, read at once. The result was written before it was
    seen, so the offset is the skew less the few tenths of a second of polling, however slow the run was before it."""
    wait_for(lambda: CaseResult.objects.filter(run=run).exists(), what="a first result", log_path=log_path)
    seen = Run.objects.filter(pk=run.pk).annotate(now=Now()).values_list("now", flat=True).get()
    first = CaseResult.objects.filter(run=run).order_by("pk").values_list("created_at", flat=True).first()
    assert first is not None
    return (first - seen).total_seconds()


@pytest.mark.slow
@on_a_database_server
def test_it_leaves_a_healthy_run_to_its_executor_whose_clock_is_20_s_behind(broker, worker_env, tmp_path):
    suite = skewed_suite("behind", cases=BEHIND_CASES)
    sweeper, executor = tmp_path / "sweeper.log", tmp_path / "executor.log"
    with (
        group_worker(broker, sweeper, groups="default", name="sweeper", **worker_env),
        group_worker(broker, executor, groups="skewed", name="behind", **worker_env, **skewed_clock(-SKEW)),
    ):
        wait_ready(sweeper, executor)
        run = run_trigger(suite=suite, model_keys=[STUB], dispatch=dispatch)
        offset = first_result_clock_offset(run, executor)
        wait_for(lambda: Run.objects.get(pk=run.pk).is_finished, what="the run", log_path=executor)
    run.refresh_from_db()
    assert run.status == Run.Status.PASSED, run.reason
    assert run.reason == f"all {BEHIND_CASES} results passed"
    assert CaseResult.objects.filter(run=run).count() == BEHIND_CASES
    assert (run.finished_at - run.started_at).total_seconds() > 2 * LEASE_SECONDS, "the run outlived its first lease"
    assert offset < -SKEW + 5, "the executor's clock really was behind"


@pytest.mark.slow
@on_a_database_server
def test_it_takes_a_dead_executors_run_within_a_lease_period_though_its_clock_was_20_s_ahead(
    broker, worker_env, tmp_path
):
    suite = skewed_suite("ahead", cases=20)
    sweeper, executor = tmp_path / "sweeper.log", tmp_path / "executor.log"
    with (
        group_worker(broker, sweeper, groups="default", name="sweeper", **worker_env),
        group_worker(broker, executor, groups="skewed", name="ahead", **worker_env, **skewed_clock(SKEW)) as ahead,
    ):
        wait_ready(sweeper, executor)
        run = run_trigger(suite=suite, model_keys=[STUB], dispatch=dispatch)
        offset = first_result_clock_offset(run, executor)
        os.killpg(ahead.pid, signal.SIGKILL)
        ahead.wait(10)
        killed = time.monotonic()
        wait_for(
            lambda: Run.objects.get(pk=run.pk).is_finished, timeout=2 * LEASE_SECONDS + 3,
            what="the sweeper to take the dead executor's run", log_path=sweeper,
        )
        swept_after = time.monotonic() - killed
    run.refresh_from_db()
    kept = CaseResult.objects.filter(run=run).count()
    assert run.status == Run.Status.ERROR and run.reason == (
        "the executor of this run stopped (its worker was killed, restarted or hung, so its lease expired); "
        f"{kept} of 20 results were kept"
    )
    assert swept_after < 2 * LEASE_SECONDS + 3
    assert not RunLock.objects.filter(group="skewed", run__isnull=False).exists(), "its run lock is free"
    assert offset > SKEW - 5, "the executor's clock really was ahead"


# Offsets from the database's now, in milliseconds: far enough from 0 that the few milliseconds between writing a
# lease and sweeping cannot cross it. Python-written values are the machine's clock, the database's on one machine.
offsets = strategies.one_of(
    strategies.integers(min_value=-5000, max_value=-150), strategies.integers(min_value=400, max_value=5000)
)


@given(offset_ms=offsets, source=strategies.sampled_from(["database", "stored", "stored-whole-second"]))
@settings(max_examples=40, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
def test_it_sweeps_a_lease_exactly_when_the_database_says_it_expired(order_suite, scripted_model, offset_ms, source):
    run = Run.objects.filter(suite=order_suite).first() or run_create(suite=order_suite, model_keys=[SCRIPTED])

    def database_now() -> datetime:
        return Run.objects.filter(pk=run.pk).annotate(now=Now()).values_list("now", flat=True).get()

    offset = timedelta(milliseconds=offset_ms)
    if source == "database":
        expires = Now() + offset
    elif source == "stored":
        # A datetime stored from Python, as Django writes one (on SQLite: microseconds, "12:00:05.123456").
        expires = database_now() + offset
    else:
        # Stored without a fraction of a second on SQLite ("12:00:05"), beside the database's "12:00:05.000".
        whole = database_now().replace(microsecond=0) + timedelta(seconds=round(offset_ms / 1000) or 1)
        expires, offset = whole, whole - database_now()
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, lease_owner="elsewhere", lease_expires_at=expires)
    swept = run_sweep_expired()
    if abs(offset) < timedelta(milliseconds=150):
        return
    assert swept == ([run.pk] if offset < timedelta(0) else []), (offset, Run.objects.get(pk=run.pk).lease_expires_at)
