"""Is the Celery broker reachable right now? Asked before a run is queued, so a dead broker is a clear 503, not a hang.

The embedded default keeps messages in SQLite through kombu's SQLAlchemy transport; production uses Redis.
See docs/decisions/0001-embedded-broker.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from celery import current_app
from django.conf import settings
from kombu import Connection
from kombu.exceptions import KombuError
from kombu.utils.url import maybe_sanitize_url

_SQL_PREFIXES = ("sqla+", "sqlalchemy+")


class BrokerUnavailable(Exception):
    """The broker did not answer; the message says which broker (password hidden) and why."""


def broker_ping(timeout: float, url: str | None = None) -> None:
    """Return when the broker at `url` (default: the configured one) answers within about `timeout` seconds.

    Raises BrokerUnavailable otherwise. Nothing is published and no queue is created.
    """
    url = url or settings.CELERY_BROKER_URL
    # SQLAlchemy only for the embedded broker's URL: a fifth of a CPU second that every process paid on start-up.
    sql = url.startswith(_SQL_PREFIXES)
    if sql:
        from sqlalchemy.exc import SQLAlchemyError

        failures: tuple[type[Exception], ...] = (KombuError, SQLAlchemyError, OSError)
    else:
        failures = (KombuError, OSError)
    try:
        if sql:
            _ping_sql(url.split("+", 1)[1], timeout)
        else:
            _ping_kombu(url, timeout)
    except failures as exc:
        # SQLAlchemy wraps the driver's error in a multi-line text with a help link; the driver's own line is enough.
        reason = getattr(exc, "orig", None) or exc
        raise BrokerUnavailable(f"the message broker at {maybe_sanitize_url(url)} did not answer: {reason}") from exc


def broker_publish(send: Callable[[Connection | None], object]) -> None:
    """Publish with `send` (an apply_async given `connection=`: None, the app's pool); on the embedded broker, once
    more on a connection of its own when the first try failed.

    Two processes opening a new embedded broker file at once (a worker starting, the first trigger) both create its
    tables and the queue's row: kombu's SQL transport checks, then writes, so one of them fails ("table kombu_queue
    already exists", or UNIQUE on the row, which leaves its channel's session in a failed transaction), and a new
    connection's second try finds both. A broker server that did not answer is not asked twice: the caller's bound on
    a publish holds."""
    try:
        send(None)
    except Exception:
        if not settings.CELERY_BROKER_URL.startswith(_SQL_PREFIXES):
            raise
        with current_app.connection_for_write() as connection:
            send(connection)


def broker_declare(app: Any, queues: Iterable[str], *, attempts: int = 3) -> None:
    """On the embedded broker, make its tables and the rows of `queues` before a worker consumes them — each try on a
    connection of its own, as broker_publish's second — so that a worker starting beside another process that makes
    them (a worker, the first trigger's publish) is not stopped by their race: its consumer took "table kombu_queue
    already exists" for a lost connection and tried again, but UNIQUE on `kombu_queue.name` for an unrecoverable
    error, and the worker exited (seen: one of six workers started at once on a new broker file, two runs in three).
    Nothing on a broker server, which declares its own."""
    if not settings.CELERY_BROKER_URL.startswith(_SQL_PREFIXES):
        return
    for attempt in range(1, attempts + 1):
        try:
            with app.connection_for_write() as connection:
                channel = connection.default_channel
                for name in queues:
                    channel.queue_declare(queue=name)
            return
        except Exception:
            if attempt == attempts:
                raise


def _ping_sql(sql_url: str, timeout: float) -> None:
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.pool import NullPool

    # kombu's SQL channel opens no database until a message moves, and caches one engine per URL for the whole
    # process; a short-lived engine of our own really touches the file and leaves the publishing engine untouched.
    connect_args = {"timeout": timeout} if sql_url.startswith("sqlite") else {}
    engine = create_engine(sql_url, connect_args=connect_args, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            # Reading the schema fails on a file that is not a database or is locked past the timeout.
            inspect(connection).get_table_names()
    finally:
        engine.dispose()


def _ping_kombu(url: str, timeout: float) -> None:
    # Redis' own socket timeouts default to "wait forever"; a server that accepts but never answers must not hang us.
    options = {"socket_connect_timeout": timeout, "socket_timeout": timeout}
    with Connection(url, connect_timeout=timeout, transport_options=options) as connection:
        # kombu hands the timeout to the socket, which takes seconds as a float; celery-types declares an int.
        connection.ensure_connection(
            max_retries=1, interval_start=0, interval_step=0, timeout=timeout  # type: ignore[arg-type]
        )
