"""Start a real Celery worker for the runs queue, on the test database, as production starts it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

BASE_DIR = Path(__file__).resolve().parent.parent
CELERY = str(Path(sys.executable).with_name("celery"))
# The run task, by the name the workers register it under.
EXECUTE_RUN = "runs.tasks.execute_run"
REDIS_URL = os.environ.get("AGENTTEST_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")


def test_database_url() -> str:
    """The URL of the database this test process uses (the test database, not the configured one)."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user, password = db.get("USER") or "", db.get("PASSWORD") or ""
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def worker_env(broker_url: str, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CELERY_")}
    env.update(
        DATABASE_URL=test_database_url(),
        AGENTTEST_BROKER_URL=broker_url,
        AGENTTEST_DEBUG="1",
        OPENAI_API_KEY="",
        PYTHONUNBUFFERED="1",
    )
    env.pop("AGENTTEST_PROVIDERS_FILE", None)
    env.update(extra)
    return env


def flush_redis_queue(broker_url: str) -> None:
    import redis

    redis.Redis.from_url(broker_url).flushdb()


@contextmanager
def runs_worker(broker_url: str, log_path: Path, **extra_env: str) -> Iterator[subprocess.Popen]:
    """`celery -A agenttest worker -Q runs --concurrency 1`, the production command; killed on exit."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                CELERY,
                "-A",
                "agenttest",
                "worker",
                "-Q",
                "runs",
                "--concurrency",
                "1",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"runs-{os.getpid()}@%h",
            ],
            cwd=BASE_DIR,
            env=worker_env(broker_url, **extra_env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, 9)
            process.wait(10)


# How long a test waits for what a worker or a server does: what a loaded machine needs (issue 40: two workers took
# over 60 s to start with the suite pinned to one core), under pytest's 300 s. A test waits only until it happens.
WAIT_SECONDS = 240.0


def wait_for(
    condition: Callable[[], bool], *, what: str, log_path: Path | None = None, timeout: float = WAIT_SECONDS
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    log = log_path.read_text(errors="replace")[-4000:] if log_path and log_path.exists() else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n--- worker log ---\n{log}")


@contextmanager
def group_worker(
    broker_url: str, log_path: Path, *, groups: str, name: str, **extra_env: str
) -> Iterator[subprocess.Popen]:
    """`agenttest worker --groups <groups>`, as a deployment starts a worker serving some isolation groups."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "agenttest", "worker", "--groups", groups, "--loglevel", "INFO",
                "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{name}-{os.getpid()}@%h",
            ],
            cwd=BASE_DIR,
            env=worker_env(broker_url, **extra_env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, 9)
            process.wait(10)


@pytest.fixture(name="publishing_to")
def publishing_to_fixture(settings: Any) -> Iterator[Callable[[str], None]]:
    """Point this process's publishing (the Celery app's pools) at a broker URL for the test; put back after."""
    from agenttest.celery import app

    def drop_pools() -> None:
        # The app builds its pools from broker_url on first use and keeps them (what Celery itself drops after a fork).
        app._pool = None
        app.amqp._producer_pool = None

    previous = app.conf.broker_url

    def use(url: str) -> None:
        settings.CELERY_BROKER_URL = app.conf.broker_url = url
        drop_pools()

    yield use
    app.conf.broker_url = previous
    drop_pools()


def dispatch_to(broker_url: str) -> Callable[[int], None]:
    """A run's dispatch to the workers at `broker_url` (this process's Celery app was built for another broker),
    through the product's broker_publish: on a new embedded broker file its second try, on a connection of its own,
    is what wins kombu's race with a worker creating the same queue row, as the web process's publish does (seen on a
    loaded machine: UNIQUE on kombu_queue.name, and the run refused as "queue unavailable")."""
    from celery import current_app
    from django.test import override_settings
    from kombu import Connection

    from common.broker import broker_publish

    def dispatch(run_id: int) -> None:
        def send(_app_connection: object) -> None:
            with Connection(broker_url) as connection:
                current_app.send_task(EXECUTE_RUN, args=[run_id], queue="runs", connection=connection, retry=False)

        with override_settings(CELERY_BROKER_URL=broker_url):
            broker_publish(send)

    return dispatch
