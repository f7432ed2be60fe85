"""`freeze_result RESULT_ID`: make a scripted case of a result of a case with a simulated user — the user model's lines
become turns — as a disabled draft in the result's suite. Prints the new case's id on standard output, what to do next
(and the reviewer's warnings) on standard error, as the recording commands do."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.inputs import parse_id
from runs.models import CaseResult
from runs.services import RunError, result_freeze


def _result_id(text: str) -> int:
    found = parse_id(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"must be a result id (a whole number from 1), got {text!r}")
    return found


class Command(BaseCommand):
    help = (
        "Freeze a result of a case with a simulated user into a scripted case (the user's lines become turns), "
        "landing disabled in the result's suite for review."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("result", type=_result_id, metavar="RESULT_ID", help="The result to freeze (its id).")

    def handle(self, *args: Any, **options: Any) -> None:
        result = CaseResult.objects.filter(pk=options["result"]).first()
        if result is None:
            raise CommandError(f"RESULT_ID: there is no result {options['result']}")
        try:
            case = result_freeze(result=result)
        except RunError as exc:
            raise CommandError(f"RESULT_ID: {exc}") from None
        self.stderr.write(
            f"froze result #{result.pk} into the disabled draft #{case.pk} {case.name!r} in suite "
            f"{case.suite.name!r} ({case.turns.count()} turns); review and enable it in the admin."
        )
        for warning in case.warnings:
            self.stderr.write(f"  warning: {warning}")
        self.stdout.write(str(case.pk))
