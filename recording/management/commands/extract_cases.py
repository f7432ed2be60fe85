"""`python manage.py extract_cases ID --model provider:model [--suite S]`: one disabled draft per user goal.

Prints each draft's id on its own line on standard output; what happened goes to standard error."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from recording.management.commands._drafts import report
from recording.services import RecordingError, conversation_find, extraction_create, suite_find


class Command(BaseCommand):
    help = "Split a conversation into one disabled draft case per user goal, with an AI model; prints the draft ids."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation", help="Conversation id.")
        parser.add_argument(
            "--model", default="",
            help="The extraction model, provider:model. It is sent only each turn's user message and the names of "
            "the tools called. Default: settings.AGENTTEST_EXTRACTION_MODEL; a one-turn conversation needs none.",
        )
        parser.add_argument(
            "--suite", default="",
            help="Suite id or name. Default: the one suite that tests the conversation's agent (a suite "
            "'Recorded: <agent>' is created when none does; when several do, choose one).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            conversation = conversation_find(conversation_id=options["conversation"])
            suite = suite_find(ref=options["suite"]) if options["suite"] else None
            drafts = extraction_create(conversation=conversation, suite=suite, model_key=options["model"])
        except RecordingError as exc:
            raise CommandError(str(exc)) from None
        report(self, drafts, "Extracted")
