"""`agent_child turn|inspect DIR`: internal. The child process in which the team's code runs for the web process
(agenthost/runtimes/child.py): reads DIR/in.json, writes DIR/answer.json, and leaves with os._exit so that no thread
the team's code started keeps it alive."""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agenthost.runtimes.child import (
    INSPECT,
    TURN,
    child_answer,
    child_input,
    ended_here,
    extend_import_path,
    inspect_here,
    turn_here,
)


class Command(BaseCommand):
    help = "Internal: runs a runtime agent's chat turn or entry check for the web process."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("mode", choices=[TURN, INSPECT])
        parser.add_argument("directory")

    def handle(self, *args: Any, **options: Any) -> None:
        extend_import_path()
        payload = child_input(options["directory"])
        try:
            answer = turn_here(payload) if options["mode"] == TURN else inspect_here(payload)
        except (SystemExit, KeyboardInterrupt) as exc:
            # The team's code ended the process from inside (sys.exit() at import, in a tool): an answer all the same.
            answer = ended_here(payload, exc)
        child_answer(options["directory"], answer)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
