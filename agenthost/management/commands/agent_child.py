"""`agent_child serve`: internal. The child server of a process that keeps the team's code out (the web process):
started by it with a socket to it as stdin, it forks the child in which each chat turn or entry check of the team's
code runs (agenthost/runtimes/fork_server.py, agenthost/runtimes/child.py), until that socket closes."""

from __future__ import annotations

import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agenthost.runtimes.child import SERVE, child_work, extend_import_path
from agenthost.runtimes.fork_server import serve


class Command(BaseCommand):
    help = "Internal: forks the processes that run a runtime agent's chat turns and entry checks for the web process."
    # Started by a process that has run them; the server's children never open what they check (the database).
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("mode", choices=[SERVE])

    def handle(self, *args: Any, **options: Any) -> None:
        extend_import_path()
        serve(socket.socket(fileno=0), child_work)
