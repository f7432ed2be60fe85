"""Recordings to and from files: `recordings export SUITE [--dir DIR] [--models KEYS]` and `recordings import DIR`.

Export writes the suite's recordings as JSONL files plus a manifest, ready to commit; import reads such a directory
back — all of it or nothing — and exits with code 2 and one message per file at fault when it cannot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cases.selectors import suite_by_reference
from runs.tapes.files import RecordingFilesRejected, default_directory, recordings_export, recordings_import


class Command(BaseCommand):
    help = "Export a suite's model recordings to JSONL files to commit, or import such files (replay needs them)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        export = actions.add_parser("export", help="Write a suite's recordings to a directory.")
        export.add_argument("suite", help="The suite's name or id.")
        export.add_argument("--dir", help="Where to write; default: recordings/<suite-slug>/.")
        export.add_argument("--models", default="", help="Comma-separated provider:model keys; default: all.")
        imported = actions.add_parser("import", help="Read a directory written by export into the database.")
        imported.add_argument("directory")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "export":
            self._export(options)
        else:
            self._import(Path(options["directory"]))

    def _export(self, options: dict[str, Any]) -> None:
        reference = options["suite"]
        suite = suite_by_reference(reference)
        if suite is None:
            raise CommandError(f"no suite with the name or id {reference!r}", returncode=2)
        models = [key.strip() for key in options["models"].split(",") if key.strip()]
        directory = Path(options["dir"]) if options["dir"] else default_directory(suite)
        report = recordings_export(suite=suite, directory=directory, models=models)
        if not report.written:
            self.stderr.write(f"suite {suite.name!r} has no recordings{' of those models' if models else ''}; "
                              "run it with --mode record first")
        for name in report.removed:
            self.stdout.write(f"removed {directory / name} (no longer a recording of this suite)")
        self.stdout.write(f"wrote {len(report.written)} recording(s) of suite {suite.name!r} to {directory}")

    def _import(self, directory: Path) -> None:
        try:
            suite, saved = recordings_import(directory=directory)
        except RecordingFilesRejected as exc:
            for problem in exc.problems:
                self.stderr.write(f"rejected: {problem}")
            raise CommandError(
                f"nothing imported from {directory}: {len(exc.problems)} file problem(s)", returncode=2
            ) from None
        self.stdout.write(f"imported {len(saved)} recording(s) of suite {suite.name!r} from {directory}")
