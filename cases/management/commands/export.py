"""`agenttest export DIR [--suite NAME ...]`: write agents, suites and cases as the files `apply` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cases.files import files_export
from cases.models import Suite


class Command(BaseCommand):
    help = (
        "Write every suite (or those named), its cases — drafts included, as enabled: false — and the agents they "
        "reach as YAML files in DIR. Exporting twice writes the same bytes; so does export, apply into an empty "
        "database, export."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory")
        parser.add_argument("--suite", action="append", default=[], metavar="NAME", help="Only this suite (repeat).")

    def handle(self, *args: Any, **options: Any) -> None:
        suites = Suite.objects.select_related("agent")
        if options["suite"]:
            missing = [name for name in options["suite"] if not suites.filter(name=name).exists()]
            if missing:
                known = ", ".join(suites.values_list("name", flat=True)) or "none"
                raise CommandError(f"no suite named {', '.join(map(repr, missing))}; suites: {known}")
            suites = suites.filter(name__in=options["suite"])
        report = files_export(directory=Path(options["directory"]), suites=list(suites))
        for relative in report.removed:
            self.stdout.write(f"removed {relative}")
        self.stdout.write(f"Wrote {len(report.written)} file(s) to {options['directory']}.")
