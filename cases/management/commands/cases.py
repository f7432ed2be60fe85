"""Export a suite with its cases to JSON, and import such a file: `cases export SUITE [--output FILE]`,
`cases import FILE [--suite NAME] [--replace]`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cases.models import Suite
from cases.services import suite_export, suite_import
from cases.validation.problems import CaseValidationError
from common.inputs import INT_RANGE_PROBLEM, MAX_JSON_DEPTH, int_out_of_range_path, json_loads, json_text_too_deep


class Command(BaseCommand):
    help = "Export a suite and its cases as JSON, or import such a file (all or nothing)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        export = actions.add_parser("export", help="Write a suite and all its cases as JSON.")
        export.add_argument("suite", help="Suite name.")
        export.add_argument("--output", "-o", help="File to write; default: standard output.")
        load = actions.add_parser(
            "import",
            help="Read a file written by export. Every case is validated first; on any problem nothing is stored.",
        )
        load.add_argument("file", help='JSON file: {"suite": {...}, "cases": [...]}.')
        load.add_argument(
            "--suite", default="",
            help="Import into this suite (default: the file's suite name). A missing suite is created from the "
            "file's suite settings; an existing one keeps its own.",
        )
        load.add_argument(
            "--replace", action="store_true",
            help="A case whose name the suite already has is replaced in place; without it that is a problem. "
            "Cases the file does not name are left alone.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "export":
            self._export(options["suite"], options["output"])
        else:
            self._import(options["file"], options["suite"], options["replace"])

    def _export(self, name: str, output: str | None) -> None:
        suite = Suite.objects.select_related("agent").filter(name=name).first()
        if suite is None:
            known = ", ".join(Suite.objects.values_list("name", flat=True)) or "none"
            raise CommandError(f"no suite named {name!r}; suites: {known}")
        text = json.dumps(suite_export(suite=suite), indent=2, ensure_ascii=False) + "\n"
        if output:
            Path(output).write_text(text, encoding="utf-8")
            self.stderr.write(f"Wrote suite {name!r} to {output}.")
        else:
            self.stdout.write(text, ending="")

    def _import(self, path: str, suite_name: str, replace: bool) -> None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path} is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
        if json_text_too_deep(text):
            # Decoding it would exhaust Python's recursion limit before it could be refused.
            raise CommandError(f"{path} nests JSON more than {MAX_JSON_DEPTH} levels deep; nothing was imported.")
        try:
            # Not json.loads: an integer of more than 4,300 digits made int() raise ValueError, a traceback.
            document = json_loads(text)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
        if (where := int_out_of_range_path(document, bound=None)) is not None:
            # An integer of more than 4,300 digits, which validation (and json.dumps) could not handle; one merely
            # beyond a column's range is for validation to name, with its case.
            # Validation names NaN, lone surrogates and NUL itself, with the case they are in.
            raise CommandError(f"{path} holds an integer agenttest cannot store at {where}: {INT_RANGE_PROBLEM}; "
                               "nothing was imported.")
        try:
            result = suite_import(document=document, suite_name=suite_name, replace=replace)
        except CaseValidationError as exc:
            for problem in exc.problems:
                case = f"case {problem.case!r}, " if problem.case else ""
                self.stderr.write(f"{case}{problem.field}: {problem.message}")
            raise CommandError(f"{len(exc.problems)} problem(s) in {path}; nothing was imported.") from exc
        verb = "Created" if result.suite_created else "Imported into"
        self.stdout.write(self.style.SUCCESS(f"{verb} suite {result.suite.name!r}: {len(result.cases)} case(s)."))
