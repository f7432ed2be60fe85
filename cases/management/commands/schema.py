"""`agenttest schema [agent|suite|case] [--output-dir DIR]`: the JSON Schema of each kind of file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from cases.schema import KINDS, schema_for


def schema_text(kind: str) -> str:
    return json.dumps(schema_for(kind), indent=2, ensure_ascii=False) + "\n"


class Command(BaseCommand):
    help = (
        "Print the JSON Schema of agent, suite or case files (all three as one JSON object without a kind), or write "
        "them as <kind>.schema.json into --output-dir, for an editor to complete and check the files."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", nargs="?", choices=KINDS, help="Which kind of file; default: all three.")
        parser.add_argument("--output-dir", metavar="DIR", help="Write <kind>.schema.json files there instead.")

    def handle(self, *args: Any, **options: Any) -> None:
        kinds = [options["kind"]] if options["kind"] else list(KINDS)
        if options["output_dir"]:
            directory = Path(options["output_dir"])
            directory.mkdir(parents=True, exist_ok=True)
            for kind in kinds:
                (directory / f"{kind}.schema.json").write_text(schema_text(kind), encoding="utf-8")
                self.stdout.write(f"wrote {directory / f'{kind}.schema.json'}")
        elif options["kind"]:
            self.stdout.write(schema_text(options["kind"]), ending="")
        else:
            self.stdout.write(json.dumps({kind: schema_for(kind) for kind in kinds}, indent=2) + "\n", ending="")
