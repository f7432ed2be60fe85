"""`python manage.py record_conversation ID [--suite S]`: the conversation as one disabled draft case.

Prints the draft's id alone on standard output (so a script can capture it); what happened goes to standard error."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from recording.management.commands._drafts import report
from recording.services import RecordingError, conversation_find, recording_create, suite_find


class Command(BaseCommand):
    help = "Record a conversation as a disabled draft case; prints the draft's id."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation", help="Conversation id.")
        parser.add_argument(
            "--suite", default="",
            help="Suite id or name. Default: the one suite that tests the conversation's agent (a suite "
            "'Recorded: <agent>' is created when none does; when several do, choose one).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            conversation = conversation_find(conversation_id=options["conversation"])
            suite = suite_find(ref=options["suite"]) if options["suite"] else None
            drafts = recording_create(conversation=conversation, suite=suite)
        except RecordingError as exc:
            raise CommandError(str(exc)) from None
        report(self, drafts, "Recorded")
