"""`agenttest serve [gunicorn options]`: the production web server, as the Procfile's web process runs it."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from agenttest.cli import exec_command, serve_command


class Command(BaseCommand):
    help = (
        "Serve agenttest with gunicorn and agenttest.gunicorn_conf, on 127.0.0.1:8000 (0.0.0.0:$PORT when PORT is "
        "set) unless --bind is given; any other gunicorn option passes through (see `agenttest serve --help`)."
    )

    def run_from_argv(self, argv: list[str]) -> None:
        # gunicorn parses its own options: Django's parser would refuse every one it does not know.
        exec_command(serve_command(argv[2:]))
