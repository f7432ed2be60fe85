"""The embedded broker (kombu's SQLAlchemy transport on a SQLite file) under real worker and publisher processes.

Why this transport: docs/decisions/0001-embedded-broker.md. Every worker and publisher here is a real subprocess
started from the project's own settings, pointed at a broker file in the test's temporary directory.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from pathlib import Path

import pytest
from kombu import Connection

from common.broker import BrokerUnavailable, broker_ping, broker_publish
from tests.broker_tasks import record
from tests.workers import WAIT_SECONDS, publishing_to_fixture  # noqa: F401  (the fixture)

BASE_DIR = Path(__file__).resolve().parent.parent
CELERY = str(Path(sys.executable).with_name("celery"))
QUEUE = "broker-tests"
PUBLISH = "import json, sys; from tests.broker_tasks import publish; publish(**json.loads(sys.argv[1]))"


class EmbeddedBroker:
    """One test's broker file, task log and the processes started against them (all killed at teardown)."""

    def __init__(self, root: Path, broker_url: str) -> None:
        self.root = root
        self.broker_url = broker_url
        self.log = root / "tasks.log"
        self.processes: list[subprocess.Popen] = []
        self.worker_logs: list[Path] = []
        # Celery reads CELERY_* variables as its own options: a developer's shell must not redirect these processes.
        self.env = {name: value for name, value in os.environ.items() if not name.startswith("CELERY_")}
        self.env.update(
            AGENTTEST_BROKER_URL=broker_url,
            AGENTTEST_DEBUG="1",
            AGENTTEST_VAR_DIR=str(root),
            PYTHONPATH=str(BASE_DIR),
        )

    def start_worker(self, pool: str = "prefork", cwd: Path = BASE_DIR) -> subprocess.Popen:
        """By default the shape of the runs worker: prefork, concurrency 1, acks_late and prefetch 1 from settings.

        Such a worker takes at most one message per polling interval (1 s): the child's ack lands while the consumer
        sleeps. A solo worker runs the task inline and fetches the next message at once.
        """
        number = len(self.worker_logs)
        output = self.root / f"worker-{number}.log"
        self.worker_logs.append(output)
        command = [CELERY, "-A", "agenttest", "worker", "--include", "tests.broker_tasks", "-Q", QUEUE, "--pool", pool]
        command += ["--concurrency", "1", "--loglevel", "INFO", "--hostname", f"w{number}@%h"]
        with output.open("wb") as sink:
            return self._start(command, cwd=cwd, stdout=sink)

    def start_publisher(
        self, tokens: list[str], threads: int = 1, hold_until: Path | None = None, pause: float = 0.0
    ) -> subprocess.Popen:
        arguments = {"log_path": str(self.log), "queue": QUEUE, "tokens": tokens, "threads": threads, "pause": pause}
        if hold_until is not None:
            arguments["hold_until"] = str(hold_until)
        command = [sys.executable, "-c", PUBLISH, json.dumps(arguments)]
        return self._start(command, cwd=BASE_DIR, stdout=subprocess.PIPE)

    def publish(self, tokens: list[str], threads: int = 1, hold_until: Path | None = None) -> None:
        finish_publisher(self.start_publisher(tokens, threads, hold_until))

    def events(self) -> list[tuple[str, str, int]]:
        """(`started` or `done`, token, pid of the process that ran the task), in the order they happened."""
        if not self.log.exists():
            return []
        return [(kind, token, int(pid)) for kind, token, pid in map(str.split, self.log.read_text().splitlines())]

    def done(self) -> Counter[str]:
        return Counter(token for kind, token, _ in self.events() if kind == "done")

    def started(self) -> Counter[str]:
        return Counter(token for kind, token, _ in self.events() if kind == "started")

    def stored_messages(self) -> list[tuple[bool, str]]:
        """(visible, token) for every message row kombu keeps in the broker file, oldest first."""
        with closing(sqlite3.connect(self.root / "broker.sqlite3")) as db:
            rows = db.execute("SELECT visible, payload FROM kombu_message ORDER BY id").fetchall()
        return [(bool(visible), token_of(payload)) for visible, payload in rows]

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                logs = "\n".join(path.read_text(errors="replace")[-3000:] for path in self.worker_logs)
                pytest.fail(f"waited {timeout} s for {what}; worker output:\n{logs}")
            time.sleep(0.05)

    def kill_all(self) -> None:
        for process in self.processes:
            # Each process leads its own session, so this reaches a prefork worker's children too and nothing else.
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=WAIT_SECONDS)
            if process.stdout:
                process.stdout.close()

    def _start(self, command: list[str], cwd: Path, stdout: object) -> subprocess.Popen:
        process = subprocess.Popen(
            command, cwd=cwd, env=self.env, stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes.append(process)
        return process


def finish_publisher(publisher: subprocess.Popen) -> None:
    output, _ = publisher.communicate(timeout=WAIT_SECONDS)
    assert publisher.returncode == 0, output.decode(errors="replace")


def token_of(payload: str) -> str:
    """The token argument of a stored `record` message (Celery message protocol 2: body is [args, kwargs, embed])."""
    args, _kwargs, _embed = json.loads(base64.b64decode(json.loads(payload)["body"]))
    return args[1]


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker(tmp_path, f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}")
    yield broker
    broker.kill_all()


@pytest.mark.slow
def test_it_runs_every_message_exactly_once_while_publishers_race_the_worker(embedded):
    # Solo, so 300 messages take seconds rather than 300 polling intervals; the broker's part is the same.
    worker = embedded.start_worker(pool="solo")
    embedded.publish(["warm-up"])
    embedded.wait_until(lambda: embedded.done()["warm-up"] == 1, WAIT_SECONDS, "the worker to run its first task")

    # 3 processes x 2 threads, each thread publishing for 2.5 s: longer than the worker's polling interval, so the
    # worker's transactions interleave with the publishers' inserts.
    batches = [[f"p{publisher}-{number}" for number in range(100)] for publisher in range(3)]
    publishers = [embedded.start_publisher(batch, threads=2, pause=0.05) for batch in batches]
    for publisher in publishers:
        finish_publisher(publisher)
    consumed_while_publishing = len(embedded.done()) > 1
    expected = {"warm-up", *(token for batch in batches for token in batch)}
    embedded.wait_until(lambda: len(embedded.done()) >= len(expected), WAIT_SECONDS, f"{len(expected)} tasks to finish")

    assert consumed_while_publishing, "the worker consumed nothing while the publishers ran"
    assert embedded.done() == Counter(expected)
    assert embedded.started() == Counter(expected)
    stored = embedded.stored_messages()
    # One row per publish, none put back or left waiting: nothing can be delivered a second time later.
    assert sorted(token for _, token in stored) == sorted(expected)
    assert not [token for visible, token in stored if visible]
    assert worker.poll() is None, "the worker died"


@pytest.mark.slow
def test_it_starts_every_worker_that_opens_a_new_broker_file_at_the_same_moment(embedded):
    # Each worker makes the new file's tables and its queue's row; kombu checks, then writes, so one that checked
    # first and wrote second stopped for good ("Unrecoverable error: IntegrityError ... UNIQUE constraint failed:
    # kombu_queue.name") — one of six workers started at once, two runs in three, before each worker declared its
    # queues at its start, on a new connection after a failed try (common.broker.broker_declare). A pinned CI run
    # met it as a browser test's run left Pending: "No live worker serves isolation group default".
    workers = [embedded.start_worker(pool="solo") for _ in range(6)]

    def all_started() -> bool:
        return all(worker.poll() is not None or "ready." in log.read_text(errors="replace")
                   for worker, log in zip(workers, embedded.worker_logs, strict=True))

    embedded.wait_until(all_started, WAIT_SECONDS, "the six workers to start")
    tokens = [f"t{number}" for number in range(12)]
    embedded.publish(tokens)
    embedded.wait_until(lambda: sum(embedded.done().values()) >= len(tokens), WAIT_SECONDS, "the tasks to run")

    assert [number for number, worker in enumerate(workers) if worker.poll() is not None] == [], "a worker exited"
    assert embedded.done() == Counter(tokens)


@pytest.mark.slow
def test_it_keeps_messages_published_while_no_worker_runs_until_one_starts(embedded):
    tokens = [f"queued-{number}" for number in range(5)]
    embedded.publish(tokens, threads=5)

    assert embedded.done() == Counter()
    assert sorted(token for visible, token in embedded.stored_messages() if visible) == sorted(tokens)

    worker = embedded.start_worker()
    embedded.wait_until(lambda: len(embedded.done()) >= len(tokens), WAIT_SECONDS, "the queued tasks to finish")

    assert embedded.done() == Counter(tokens)
    assert worker.poll() is None, "the worker died"


@pytest.mark.slow
def test_it_never_redelivers_a_message_whose_worker_was_killed_mid_task(embedded):
    release = embedded.root / "release"
    embedded.publish(["interrupted"], hold_until=release)
    first = embedded.start_worker()
    embedded.wait_until(lambda: embedded.started()["interrupted"] == 1, WAIT_SECONDS, "the held task to start")

    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=WAIT_SECONDS)
    # From here a redelivered copy would run to completion at once.
    release.touch()
    second = embedded.start_worker()
    embedded.publish(["after-crash"])
    embedded.wait_until(lambda: embedded.done()["after-crash"] == 1, WAIT_SECONDS, "the new worker to run a new task")

    # kombu's SQL transport hid the row when it was fetched, and only a worker that gets to shut itself down puts
    # unacknowledged messages back: after SIGKILL the message stays hidden for good, acks_late notwithstanding.
    # The run's own database row, not the broker, has to notice (the startup sweep).
    assert embedded.started()["interrupted"] == 1
    assert embedded.done()["interrupted"] == 0
    assert (False, "interrupted") in embedded.stored_messages()
    assert second.poll() is None, "the new worker died"


@pytest.mark.slow
def test_it_finishes_the_running_task_before_a_worker_stops_on_sigterm(embedded):
    release = embedded.root / "release"
    embedded.publish(["in-flight"], hold_until=release)
    worker = embedded.start_worker()
    embedded.wait_until(lambda: embedded.started()["in-flight"] == 1, WAIT_SECONDS, "the held task to start")

    worker.send_signal(signal.SIGTERM)
    time.sleep(1)
    assert worker.poll() is None, "the worker stopped without waiting for its task"
    release.touch()

    assert worker.wait(timeout=WAIT_SECONDS) == 0
    assert embedded.done() == Counter({"in-flight": 1})
    assert embedded.stored_messages() == [(False, "in-flight")]


@pytest.mark.slow
def test_it_shows_the_filesystem_transport_losing_a_half_written_message_and_its_worker(tmp_path):
    # The behaviour we avoid. kombu's filesystem transport creates a message file under its final name and only
    # then writes it, and a consumer takes any file with that name: between the two steps it reads a partial
    # message. Truncating a real message file puts the consumer in exactly that moment, every time.
    broker = EmbeddedBroker(tmp_path, "filesystem://")
    # The settings give this transport no folders, so it uses data_in/, data_out/ and control/ in the working dir.
    for folder in ("data_in", "data_out", "control"):
        (tmp_path / folder).mkdir()
    # The publisher here names every folder, control/ too: left out, it would write into this process's working
    # directory, the repository.
    folders = {
        "data_folder_in": str(tmp_path / "data_in"),
        "data_folder_out": str(tmp_path / "data_in"),
        "control_folder": str(tmp_path / "control"),
    }
    with Connection("filesystem://", transport_options=folders) as connection:
        record.apply_async((str(broker.log), "half-written"), queue=QUEUE, connection=connection)
        # File names start with the publish time in milliseconds; the consumer takes them in name order.
        time.sleep(0.01)
        record.apply_async((str(broker.log), "intact"), queue=QUEUE, connection=connection)
    assert (tmp_path / "control" / f"{QUEUE}.exchange").is_file()
    assert not (Path.cwd() / "control").exists()
    half_written, intact = sorted((tmp_path / "data_in").iterdir())
    assert [token_of(half_written.read_text()), token_of(intact.read_text())] == ["half-written", "intact"]
    half_written.write_bytes(half_written.read_bytes()[: half_written.stat().st_size // 2])

    try:
        worker = broker.start_worker(cwd=tmp_path)
        broker.wait_until(
            lambda: worker.poll() is not None, WAIT_SECONDS, "the worker to die of the half-written message"
        )
    finally:
        broker.kill_all()

    assert worker.returncode != 0
    assert "Unrecoverable error: JSONDecodeError" in broker.worker_logs[0].read_text()
    assert not half_written.exists(), "the broken message is deleted before it is decoded: it is lost"
    assert intact.exists(), "the worker died before it reached the next message"
    assert broker.done() == Counter()


def test_it_pings_the_embedded_sqlite_broker(tmp_path):
    broker_ping(2.0, f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}")


def test_it_pings_redis():
    broker_ping(2.0, "redis://127.0.0.1:6379/15")


def test_it_pings_the_configured_broker_by_default(settings, tmp_path):
    settings.CELERY_BROKER_URL = f"sqla+sqlite:///{tmp_path / 'missing' / 'broker.sqlite3'}"

    with pytest.raises(BrokerUnavailable, match="unable to open database file"):
        broker_ping(2.0)


def test_it_fails_fast_and_clearly_when_nothing_listens_on_the_redis_port():
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable) as failure:
        broker_ping(2.0, "redis://:s3cret@127.0.0.1:1/0")

    # Far less than kombu's retries with back-off (forever by default) would take, whatever the machine's load.
    assert time.monotonic() - started < WAIT_SECONDS / 4
    message = str(failure.value)
    assert message.startswith("the message broker at redis://:**@127.0.0.1:1/0 did not answer: ")
    assert "refused" in message
    assert "s3cret" not in message


def test_it_gives_up_on_a_redis_server_that_accepts_but_never_answers():
    with closing(socket.create_server(("127.0.0.1", 0))) as silent:
        accepted: list[socket.socket] = []
        threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True).start()
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable, match="did not answer: Timeout"):
            broker_ping(1.0, f"redis://127.0.0.1:{silent.getsockname()[1]}/0")
        elapsed = time.monotonic() - started
        for connection in accepted:
            connection.close()

    # Not waiting for an answer that never comes: the ping's own timeout, and what a loaded machine adds to it.
    assert elapsed < WAIT_SECONDS / 4


def test_it_reports_a_broker_file_that_is_not_a_database(tmp_path):
    broker_file = tmp_path / "broker.sqlite3"
    broker_file.write_bytes(b"this is not a SQLite database, whatever its name says" * 4)

    with pytest.raises(BrokerUnavailable, match="file is not a database"):
        broker_ping(2.0, f"sqla+sqlite:///{broker_file}")


def test_it_publishes_on_a_second_try_with_a_new_connection_when_the_first_failed(tmp_path, publishing_to):
    # A worker starting and the first trigger's publish both make the broker file's tables and the queue's row; the
    # one that checked first and wrote second fails ("table kombu_queue already exists", or UNIQUE on the row, which
    # leaves its session in a failed transaction): the run was "unavailable", a 503. Seen with six processes
    # publishing their first message at once: five of six failed so.
    broker_file = tmp_path / "broker.sqlite3"
    publishing_to(f"sqla+sqlite:///{broker_file}")
    tries: list[str] = []

    def send(connection) -> None:
        record.apply_async((str(tmp_path / "tasks.log"), f"try-{len(tries)}"), queue=QUEUE, retry=False,
                           connection=connection)
        tries.append("on its own connection" if connection else "published")
        if len(tries) == 1:
            raise RuntimeError("UNIQUE constraint failed: kombu_queue.name")

    broker_publish(send)

    assert tries == ["published", "on its own connection"]
    with closing(sqlite3.connect(broker_file)) as db:
        stored = db.execute("SELECT payload FROM kombu_message ORDER BY id").fetchall()
    assert [token_of(payload) for (payload,) in stored] == ["try-0", "try-1"]
