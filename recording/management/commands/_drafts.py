"""What both commands print: ids on standard output, a summary and the reviewer's warnings on standard error."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from recording.services import Drafts


def report(command: BaseCommand, drafts: Drafts, verb: str) -> None:
    created = " (created for them)" if drafts.suite_created else ""
    command.stderr.write(
        f"{verb} {len(drafts.cases)} disabled draft(s) in suite {drafts.suite.name!r}{created}; review and enable "
        "them in the admin."
    )
    for case in drafts.cases:
        command.stderr.write(f"  #{case.pk} {case.name}")
        for warning in case.warnings:
            command.stderr.write(f"    warning: {warning}")
        command.stdout.write(str(case.pk))
