"""`agenttest worker [celery worker options]`: the run worker, consuming the `runs` queue one task at a time."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from agenttest.cli import exec_command, worker_command


class Command(BaseCommand):
    help = (
        "Start the Celery worker for runs: -Q runs --concurrency 1 unless given; any other celery worker option "
        "passes through (see `agenttest worker --help`)."
    )

    def run_from_argv(self, argv: list[str]) -> None:
        # Celery parses its own options: Django's parser would refuse every one it does not know.
        exec_command(worker_command(argv[2:]))
