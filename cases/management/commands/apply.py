"""`agenttest apply DIR [--dry-run] [--prune]`: make the database match the agent, suite and case files in DIR."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from cases.files import ApplyReport, FilesRejected, files_apply


def print_report(command: BaseCommand, report: ApplyReport) -> None:
    for change in report.changes:
        command.stdout.write(str(change))
    counts = ", ".join(
        f"{report.count(action)} {action}"
        for action in ("created", "changed", "unchanged", "disabled", "not in files")
        if report.count(action)
    )
    verb = "would be" if report.dry_run else "were"
    command.stdout.write(f"{'Plan' if report.dry_run else 'Applied'}: {counts or 'nothing'}"
                         f"{' (nothing changed: --dry-run)' if report.dry_run else ''}.")
    if report.count("not in files"):
        command.stdout.write(f"Cases marked 'not in files' {verb} kept as they are; --prune disables them.")


class Command(BaseCommand):
    help = (
        "Create or change agents, suites and cases to match the YAML files in DIR (agents/*.yaml, "
        "suites/*/suite.yaml, suites/*/cases/*.yaml). All or nothing: on any problem every problem is printed with "
        "its file and key path, nothing is changed and the exit code is 2."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", help="The directory holding agents/ and suites/.")
        parser.add_argument("--dry-run", action="store_true", help="Print the plan; change nothing.")
        parser.add_argument(
            "--prune", action="store_true",
            help="Disable (never delete) the cases of the files' suites that no file names any more.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = files_apply(
                directory=Path(options["directory"]), dry_run=options["dry_run"], prune=options["prune"]
            )
        except FilesRejected as exc:
            self.stderr.write(f"Nothing was changed: {len(exc.problems)} problem(s).")
            for problem in exc.problems:
                self.stderr.write(str(problem))
            raise SystemExit(2) from None
        print_report(self, report)
