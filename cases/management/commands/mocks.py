"""`agenttest mocks verify [DIR] [--suite NAME…] [--update] [--summary FILE.md]`: each mock of an effect-free tool
re-run against the real tool, outside any test (cases/verification.py); exit 1 when a mock drifted or its tool failed,
naming the mock, its case and each path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agenthost.seams import mcp_refresh
from cases.files import CASES, FilesRejected, files_apply, files_mcp_servers, files_render
from cases.models import Case, Suite
from cases.verification import Verdict, VerifyReport, mocks_verify


class Command(BaseCommand):
    help = "Verify mocks against their real tools: effect-free tools are called on each mock's arguments."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        verify = actions.add_parser(
            "verify",
            help="Call each effect-free tool for real on its mocks' arguments and compare the answers with the "
            "mocks' results; side-effecting tools are never called (listed unverifiable).",
        )
        verify.add_argument("directory", nargs="?", help="A team's directory (agents/, suites/): applied first, as "
                            "`agenttest run DIR` does; default: the database's suites.")
        verify.add_argument("--suite", action="append", default=[], metavar="NAME", help="Only this suite (repeat).")
        verify.add_argument("--update", action="store_true", help="Rewrite each drifted mock's result with the real "
                            "tool's answer (in DIR, the suite's files are written again as `agenttest export` "
                            "writes them); review the change before committing it.")
        verify.add_argument("--summary", metavar="FILE", help="Write a Markdown summary (for a CI job's summary).")

    def handle(self, *args: Any, **options: Any) -> None:
        directory = Path(options["directory"]) if options["directory"] else None
        self.case_files: dict[str, str] = {}
        suites = self._suites(directory, options["suite"])
        report = mocks_verify(suites=suites, update=options["update"])
        if directory is not None:
            self._rewrite(directory, report)
        self._print(report)
        if options["summary"]:
            Path(options["summary"]).write_text(report.summary(), encoding="utf-8")
        if report.failing:
            raise CommandError(
                f"{len(report.failing)} mock(s) no longer tell the truth about their tools (listed above)", returncode=1
            )

    def _suites(self, directory: Path | None, names: list[str]) -> list[Suite]:
        if directory is not None:
            call_command("migrate", verbosity=0, interactive=False)
            for server, problem in mcp_refresh(files_mcp_servers(directory=directory)).items():
                self.stderr.write(f"warning: MCP server {server!r} was not listed: {problem}")
            try:
                report = files_apply(directory=directory)
            except FilesRejected as exc:
                raise CommandError(f"the files cannot be applied ({len(exc.problems)} problem(s)):\n{exc}") from None
            known = [change.name for change in report.changes if change.kind == "suite"]
            self.case_files = {change.name: change.file for change in report.changes if change.kind == "case"}
        else:
            known = list(Suite.objects.values_list("name", flat=True))
        missing = [name for name in names if name not in known]
        if missing:
            raise CommandError(f"no suite named {', '.join(map(repr, missing))}; suites: {', '.join(known) or 'none'}")
        chosen = names or known
        return list(Suite.objects.select_related("agent").filter(name__in=chosen).order_by("name"))

    def _rewrite(self, directory: Path, report: VerifyReport) -> None:
        """Each case file whose mocks --update rewrote, written again where it is, as `agenttest export` writes it."""
        for case_id in dict.fromkeys(check.case_id for check in report.checks if check.updated):
            case = Case.objects.select_related("suite__agent").get(pk=case_id)
            relative = self.case_files.get(f"{case.suite.name} / {case.name}")
            if not relative:
                continue
            rendered = files_render(suites=[case.suite], cases=[case])
            [text] = [text for path, text in rendered.items() if Path(path).parent.name == CASES]
            (directory / relative).write_text(text, encoding="utf-8")
            self.stdout.write(f"Rewrote {relative}.")

    def _print(self, report: VerifyReport) -> None:
        for check in report.checks:
            stream = self.stderr if check in report.failing else self.stdout
            for line in check.lines():
                stream.write(line)
        counts = ", ".join(f"{len(report.with_verdict(verdict))} {verdict.label.lower()}" for verdict in Verdict)
        self.stdout.write(f"{len(report.checks)} mock(s): {counts}.")

