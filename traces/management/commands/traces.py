"""Traces without opening a port: `agenttest traces import FILE...` and `agenttest traces sweep`.

import reads OTLP/JSON files as the OpenTelemetry Collector's file exporter writes them — one ExportTraceServiceRequest
per line (JSON Lines) — or one pretty-printed request, with the receiver's validation and limits (each line at most
AGENTTEST_TRACES_MAX_BODY_BYTES). Each file is stored whole or not at all: a bad line is named (file:line) and nothing
of its file is stored; the other files are imported, and the command exits with code 2. Spans refused one by one
(an invalid id) are named too, as the receiver's partial success does, and the rest of their file is stored.

The conversations the imported spans make (traces.dialects) become agenttest conversations, bound to the agent
given with --agent or to the agent the trace names (gen_ai.agent.name, else service.name), ready to record into a
draft; one that binds to no agent, or whose spans carry no message content, is named with the reason (exit code 0:
its spans are stored, and importing again with --agent binds it).

sweep deletes the conversations past AGENTTEST_TRACES_RETENTION_DAYS (the workers also do it every hour): their spans,
the imported conversations and messages, the drafts recorded from them never enabled; an enabled case is kept without
its trace ids. `purge --service NAME` or `purge --conversation KEY` deletes the same now, whatever its age.

token create|revoke|list manages ingest-only tokens: `token create NAME [--service SERVICE]` prints the key once, on a
line of its own (standard output; what to do with it on standard error); `token revoke ID` refuses it from then on.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from agenthost.seams import Agent
from common.inputs import parse_id
from traces.conversations import trace_conversations_import
from traces.models import IngestToken
from traces.otlp import JSON, OtlpRefused, request_decode
from traces.services import (
    StoreReport,
    ingest_token_create,
    ingest_token_revoke,
    spans_store,
    spans_sweep_expired,
    traces_purge,
)

_KEYS_SHOWN = 10


class BadFile(Exception):
    pass


def _days(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"must be a whole number of days, got {text!r}")
    return int(text)


def _id(text: str) -> int:
    number = parse_id(text)
    if number is None:
        raise argparse.ArgumentTypeError(f"must be a token's id (a whole number), got {text[:40]!r}")
    return number


class Command(BaseCommand):
    help = "Import OTLP/JSON trace files (the collector's file exporter's output), or sweep expired spans."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        imported = actions.add_parser(
            "import", help="Store the spans of OTLP/JSON files: JSON Lines of ExportTraceServiceRequest, or one."
        )
        imported.add_argument("files", nargs="+", metavar="FILE")
        imported.add_argument(
            "--agent", default=None,
            help="Bind the imported conversations to this agent (by name) instead of the agent their trace names.",
        )
        sweep = actions.add_parser("sweep", help="Delete conversations past the retention period.")
        sweep.add_argument(
            "--days", type=_days, default=None,
            help="Keep this many days instead of AGENTTEST_TRACES_RETENTION_DAYS (0 keeps everything).",
        )

        purge = actions.add_parser(
            "purge", help="Delete now everything held of one service's or one conversation's traces."
        )
        which = purge.add_mutually_exclusive_group(required=True)
        which.add_argument("--service", help="Every conversation with a span of this service.name.")
        which.add_argument("--conversation", help="One conversation, by its key (as the traces page lists it).")
        token = actions.add_parser("token", help="Make, revoke or list ingest-only tokens (POST /v1/traces only).")
        token_actions = token.add_subparsers(dest="token_action", required=True)
        create = token_actions.add_parser("create", help="Make a token and print its key, this once.")
        create.add_argument("name", help="Who holds it, e.g. 'shop production'.")
        create.add_argument("--service", default="", help="Take only spans of this service.name with it.")
        revoke = token_actions.add_parser("revoke", help="Refuse a token's key from now on.")
        revoke.add_argument("id", type=_id, help="The token's id, as `token list` shows it.")
        token_actions.add_parser("list", help="The tokens, without their keys (never kept).")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "token":
            self._token(options)
            return
        if options["action"] == "sweep":
            report = spans_sweep_expired(retention_days=options["days"])
            self.stdout.write(f"past the retention period: {report}")
            return
        if options["action"] == "purge":
            service, key = (options["service"] or "").strip(), (options["conversation"] or "").strip()
            if not (service or key):
                raise CommandError(f"--{'service' if options['service'] is not None else 'conversation'}: must not "
                                   "be blank", returncode=2)
            report = traces_purge(service=service) if service else traces_purge(keys=[key])
            self.stdout.write(str(report))
            return
        agent = None
        if options["agent"] is not None:
            agent = Agent.objects.filter(name=options["agent"]).first()
            if agent is None:
                raise CommandError(f"--agent: no agent is named {options['agent']!r}", returncode=2)
        bad = [name for name in options["files"] if not self._import(Path(name), agent)]
        if bad:
            raise CommandError(
                f"nothing stored from {len(bad)} file(s) with bad input: {', '.join(bad)}", returncode=2
            )

    def _token(self, options: dict[str, Any]) -> None:
        if options["token_action"] == "create":
            try:
                issued = ingest_token_create(name=options["name"], service_name=options["service"])
            except ValueError as exc:
                raise CommandError(str(exc), returncode=2) from None
            self.stderr.write(
                f"ingest token #{issued.token.pk} {issued.token.name!r}"
                f"{f' for service {issued.token.service_name!r}' if issued.token.service_name else ''}; its key, "
                "shown this once (set it as OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<key>):"
            )
            self.stdout.write(issued.key)
        elif options["token_action"] == "revoke":
            token = IngestToken.objects.filter(pk=options["id"]).first()
            if token is None:
                raise CommandError(f"id: no ingest token #{options['id']}", returncode=2)
            token = ingest_token_revoke(token=token)
            self.stdout.write(f"ingest token #{token.pk} {token.name!r} revoked at {token.revoked_at:%Y-%m-%d %H:%M}")
        else:
            for token in IngestToken.objects.all():
                state = f"revoked {token.revoked_at:%Y-%m-%d}" if token.revoked_at else "active"
                self.stdout.write(
                    f"#{token.pk}\t{token.key_prefix}…\t{token.name}\t{token.service_name or '(any service)'}\t{state}"
                )

    def _import(self, path: Path, agent: Agent | None) -> bool:
        reports: list[StoreReport] = []
        try:
            with transaction.atomic():
                for line, body in _requests(path):
                    try:
                        decoded = request_decode(body=body, content_type=JSON)
                    except OtlpRefused as exc:
                        raise BadFile(f"{path}:{line}: {exc}") from None
                    reports.append(spans_store(decoded=decoded))
                    if decoded.rejected:
                        self.stderr.write(f"{path}:{line}: {decoded.rejection_message()}")
        except (BadFile, OSError) as exc:
            self.stderr.write(f"rejected: {exc}")
            return False
        keys = sorted({key for report in reports for key in report.conversations})
        shown = ", ".join(keys[:_KEYS_SHOWN]) + (f", and {len(keys) - _KEYS_SHOWN} more" if len(keys) > _KEYS_SHOWN
                                                 else "")
        self.stdout.write(
            f"{path}: {sum(report.new for report in reports)} new span(s), "
            f"{sum(report.duplicate for report in reports)} duplicate(s), "
            f"{sum(report.rejected for report in reports)} rejected; "
            f"{len(keys)} conversation(s){': ' + shown if keys else ''}"
        )
        for outcome in trace_conversations_import(keys=keys, agent=agent):
            if outcome.conversation is not None:
                conversation = outcome.conversation
                self.stdout.write(
                    f"  {outcome.key}: conversation #{conversation.pk} with agent {conversation.agent.name!r} "
                    f"(bound by {conversation.bound_by}), {conversation.message_count} message(s)"
                )
            else:
                self.stdout.write(f"  {outcome.key}: not imported as a conversation: {outcome.refused}")
        return True


def _requests(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, request text) of each request in the file: one per non-blank line of JSON Lines, or the whole
    file when it is one document written over several lines."""
    limit = settings.AGENTTEST_TRACES_MAX_BODY_BYTES
    with path.open("rb") as handle:
        first = _first_content_line(handle, limit, path)
        if first is None:
            return
        number, text = first
        stripped = text.strip()
        if not (stripped.startswith(b"{") and stripped.endswith(b"}")):
            # One document over several lines: the whole file is the request.
            rest = handle.read(limit + 1 - len(text))
            if len(text) + len(rest) > limit:
                raise BadFile(f"{path}: a document of more than {limit} bytes (AGENTTEST_TRACES_MAX_BODY_BYTES)")
            yield number, text + rest
            return
        yield number, text
        while True:
            number += 1
            text = _line(handle, limit, path, number)
            if not text:
                return
            if text.strip():
                yield number, text


def _first_content_line(handle: Any, limit: int, path: Path) -> tuple[int, bytes] | None:
    number = 0
    while True:
        number += 1
        text = _line(handle, limit, path, number)
        if not text:
            return None
        if text.strip():
            return number, text


def _line(handle: Any, limit: int, path: Path, number: int) -> bytes:
    text = handle.readline(limit + 1)
    if len(text) > limit:
        raise BadFile(f"{path}:{number}: a line of more than {limit} bytes (AGENTTEST_TRACES_MAX_BODY_BYTES)")
    return text
