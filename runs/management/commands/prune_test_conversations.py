"""`prune_test_conversations --older-than DAYS [--dry-run]`: delete the conversations that test runs created, once
they are older than DAYS days. A conversation of a run still Pending or Running is never deleted, nor one the
harness did not make: only sealed conversations count (runs/selectors.py), whatever tags a user gave theirs."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.services import MAX_PRUNE_DAYS, RunError, run_conversations_prune


def _days(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PRUNE_DAYS:
        raise argparse.ArgumentTypeError(f"must be a whole number of days from 1 to {MAX_PRUNE_DAYS}, got {text!r}")
    return int(text)


class Command(BaseCommand):
    help = (
        "Delete test conversations (sealed by a test run and tagged 'agenttest') older than --older-than DAYS days, "
        "except those of a run still in progress. --dry-run only counts them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", type=_days, required=True, metavar="DAYS", help="Age in whole days (≥ 1).")
        parser.add_argument("--dry-run", action="store_true", help="Print how many would be deleted; delete nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["older_than"]
        try:
            count = run_conversations_prune(older_than_days=days, dry_run=options["dry_run"])
        except RunError as exc:
            raise CommandError(f"--older-than: {exc}") from None
        verb = "would delete" if options["dry_run"] else "deleted"
        self.stdout.write(f"{verb} {count} test conversation(s) older than {days} day(s)")
