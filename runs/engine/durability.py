"""Which of a run's commits must reach the disk before the run goes on, and which need not.

A run keeps every finished result through a crash: its CaseResult — transcript, tool calls, assertions — is written
in one transaction, together with the case's test conversation (its messages and state, held in memory while the
case ran: agenthost.services.conversation_open), and PostgreSQL flushes it to its write-ahead log before the commit
returns (the default). What a case writes on the way — only its conversation's row, at its start — and a bare "now
running …" line need not each wait for a flush of their own: on PostgreSQL they commit with
`synchronous_commit = off`, which keeps every transaction atomic and the database consistent after a crash, and may
lose only the last few hundred milliseconds of such commits. Because the log is written in order, the result's own
synchronous commit flushes every earlier one too. A crash before a case's result is stored loses that unfinished
case's turns, which a resume runs again anyway.

SQLite runs in WAL mode with synchronous=NORMAL (settings.py), where no commit waits for the disk: nothing changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction


def relax_case_commits() -> None:
    """On the calling thread's connection (a case thread's), let commits return before their log flush."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return
    connection.ensure_connection()
    raw = connection.connection
    if getattr(connection, "_agenttest_relaxed", None) is raw:
        return
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit TO off")
    # A mark of agenttest's own on Django's connection object, which declares no such attribute.
    connection._agenttest_relaxed = raw  # type: ignore[attr-defined]


@contextmanager
def relaxed_commit() -> Iterator[None]:
    """One transaction whose commit need not wait for the disk (PostgreSQL), for writes a crash may lose."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO off")
        yield
