"""`agenttest check`: Django's system checks, then, when they did not look at mocks, where to look (issue 36).

The system checks run at the start of every command (every `agenttest` command, `runserver`'s reloads), so they read
no database and apply no files: listing the mocks a tool's schema now refuses reads every case and asks every agent
for its tools (a runtime agent's in a child process). Django keeps its own database checks behind `--database`, and
so does cases.W001 (cases/checks.py). Plain `check` therefore says so, and names the two doors that do list them: the
flag for the database's cases, `apply DIR --dry-run` for a repository's files (it refuses each such mock as
`file: mocks[i].path: message`, through the same check as every other door)."""

from __future__ import annotations

from typing import Any

from django.core.management.commands import check

from cases.checks import MOCKS_TAG

MOCKS_NOT_CHECKED = (
    "Mocks were not checked against their tools' schemas (that reads every case): `agenttest check --database "
    "default` lists those of the database's cases; `agenttest apply DIR --dry-run` those of a repository's files."
)


class Command(check.Command):
    # Each label is a string; django-stubs declares each a list of strings.
    def handle(self, *app_labels: str, **options: Any) -> None:  # type: ignore[override]
        super().handle(*app_labels, **options)  # type: ignore[arg-type]
        tags = options.get("tags") or []
        if not options.get("databases") and not options.get("list_tags") and (not tags or MOCKS_TAG in tags):
            self.stdout.write(MOCKS_NOT_CHECKED)
