"""A Celery task for tests/test_embedded_broker.py only: each run leaves lines in a file, so a test can count them.

Workers load it with `celery -A agenttest worker --include tests.broker_tasks`; publishers call `publish` in a
subprocess whose environment points at the test's own broker.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agenttest.celery import app

# A held task gives up after this long, so a test that forgets to release it cannot leave a worker busy forever.
HOLD_LIMIT_SECONDS = 60


@app.task
def record(log_path: str, token: str, hold_until: str = "") -> None:
    """Append `started <token> <pid>`, wait for the file `hold_until` (if any) to exist, append `done <token> <pid>`."""
    _append(log_path, f"started {token} {os.getpid()}")
    deadline = time.monotonic() + HOLD_LIMIT_SECONDS
    while hold_until and not Path(hold_until).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    _append(log_path, f"done {token} {os.getpid()}")


def publish(
    log_path: str, queue: str, tokens: list[str], threads: int = 1, hold_until: str = "", pause: float = 0.0
) -> None:
    """Publish one `record` message per token from `threads` threads at once, as concurrent web requests would.

    Each thread waits `pause` seconds after each message, to stretch publishing over a chosen length of time.
    """

    def send(token: str) -> None:
        record.apply_async((log_path, token, hold_until), queue=queue)
        time.sleep(pause)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        # list() re-raises the first failed publish here instead of dropping it.
        list(pool.map(send, tokens))


def _append(path: str, line: str) -> None:
    # One write to an O_APPEND descriptor per line: lines from different processes never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)
