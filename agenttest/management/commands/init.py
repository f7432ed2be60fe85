"""`agenttest init [--force]`: write a starting, commented agenttest.toml in the current directory, filled in from
what is there — plugin modules (those importing agenttest.plugin), a providers.toml, an mcp.toml, the directory of
agents/ and suites/, and recordings/ to replay."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.project_file import FILE_NAME, ProjectFileError, project_file_find, project_file_load

_PLUGIN_IMPORT = re.compile(r"^\s*(?:from\s+agenttest\.plugin\s+import|import\s+agenttest\.plugin\b)", re.MULTILINE)
_MODEL_LINE = re.compile(r"^model:\s*[\"']?([A-Za-z0-9][\w.-]*):([^\s\"'#]+)", re.MULTILINE)
# Not a team's modules: virtualenvs, caches, dependencies, agenttest's own scratch directory.
_SKIPPED = {"node_modules", "site-packages", "var", "build", "dist"}


@dataclass
class Found:
    plugins: list[str] = field(default_factory=list)
    providers_file: str = ""
    mcp_file: str = ""
    directory: str = ""  # "" = this directory; else the subdirectory holding agents/ and suites/
    has_files: bool = False
    recordings: bool = False
    model: tuple[str, str] | None = None  # a provider:model the agents use that agenttest does not configure itself


class Command(BaseCommand):
    help = (
        "Write a starting, commented agenttest.toml in the current directory from what is there (plugin modules, "
        "providers.toml, mcp.toml, agents/ and suites/, recordings/). Refuses to overwrite one without --force."
    )
    # A broken project file above this directory, or a provider not configured yet, must not stop writing one.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true", help=f"Overwrite an existing {FILE_NAME}.")

    def handle(self, *args: Any, **options: Any) -> None:
        here = Path.cwd()
        target = here / FILE_NAME
        if target.exists() and not options["force"]:
            raise CommandError(f"{target} already exists; --force overwrites it", returncode=2)
        above = project_file_find(here.parent) if not target.exists() else None
        found = project_detect(here)
        target.write_text(project_file_text(found), encoding="utf-8")
        self.stdout.write(f"Wrote {target}:")
        for line in _summary(found):
            self.stdout.write(f"  {line}")
        if above is not None:
            self.stdout.write(f"It takes the place of {above} for every command run in {here} or below.")
        try:
            project_file_load(target)
        except ProjectFileError as exc:
            self.stderr.write("It cannot be used yet:\n" + "\n".join(f"  {line}" for line in exc.lines()))
            return
        self.stdout.write("Check it with `agenttest check`; then `agenttest run`.")


def project_detect(here: Path) -> Found:
    """What a project file for `here` should say, from the files there."""
    found = Found(plugins=_plugin_modules(here))
    found.providers_file = "providers.toml" if (here / "providers.toml").is_file() else ""
    found.mcp_file = next((name for name in ("mcp.toml", "mcp.json") if (here / name).is_file()), "")
    files = here if _holds_files(here) else next(
        (path for path in sorted(here.iterdir()) if path.is_dir() and _visible(path) and _holds_files(path)), None
    )
    if files is not None:
        found.has_files = True
        found.directory = "" if files == here else files.name
        found.recordings = (files / "recordings").is_dir()
        found.model = _unconfigured_model(files)
    return found


def project_file_text(found: Found) -> str:
    """The commented agenttest.toml for what was found: every key agenttest reads, those not found commented out.
    Top-level keys come before the first table, where TOML wants them."""
    def key(active: Any, text: str, note: str = "") -> str:
        line = text if active else f"# {text}"
        return f"{line:<40}# {note}" if note else line

    provider, model = found.model or ("local", "gpt-4o-mini")
    # The agents' model is one agenttest does not bring: its table is written out, so a replay runs at once.
    table = bool(found.model) and not found.providers_file
    lines = [
        "# agenttest.toml: what every `agenttest` command run in this directory or below reads (found like",
        "# pyproject.toml, up to the repository's root; AGENTTEST_CONFIG names another file). Environment",
        "# variables override it: AGENTTEST_PLUGINS, AGENTTEST_PROVIDERS_FILE, AGENTTEST_MCP_FILE, AGENTTEST_VAR_DIR.",
        "# Relative paths are relative to this file's directory. `agenttest check` checks it.",
        "",
        "# Plugins: modules of yours (importable from this directory) whose @tool functions agents call.",
        key(found.plugins, f"plugins = {json.dumps(found.plugins or ['shop_tools'])}"),
        "",
        "# Model providers: a providers file of [providers.<name>] tables, or the same tables here (below). With",
        "# neither, OPENAI_API_KEY configures openai:gpt-4o-mini and openai:gpt-4o.",
        key(found.providers_file, f'providers_file = "{found.providers_file or "providers.toml"}"'),
        "",
        "# MCP servers whose tools agents may declare: an MCP file of [servers.<name>] tables, or the same tables here",
        "# as [mcp_servers.<name>] (below). A server starts in this directory unless it sets cwd.",
        key(found.mcp_file, f'mcp_file = "{found.mcp_file or "mcp.toml"}"'),
        "",
        "# The database and the run queue's files of the commands run here (AGENTTEST_VAR_DIR overrides it).",
        key(False, 'var_dir = "var"', "the default: var/ beside this file"),
        "",
        key(table, f"[providers.{provider}]"),
        key(table, 'kind = "openai"'),
        key(table, 'base_url = "http://127.0.0.1:8001/v1"', "any OpenAI-compatible endpoint (OpenAI, vLLM, …)"),
        key(False, 'api_key_env = "OPENAI_API_KEY"', "the NAME of the variable holding the key, never the key"),
        "",
        key(table, f"[[providers.{provider}.models]]"),
        key(table, f'name = "{model}"'),
        key(False, "input_price = 0.15", "USD per million tokens, for the cost columns"),
        "# output_price = 0.60",
        "",
        "# [mcp_servers.parcels]",
        '# command = "python"',
        '# args = ["parcels_mcp.py"]',
        "",
        "# Defaults of `agenttest run`; its options override them.",
        "[run]",
        key(found.directory, f'directory = "{found.directory or "."}"', "agents/, suites/, recordings/"),
        key(False, 'suites = ["support"]', "default: every suite"),
        key(False, f'models = ["{provider}:{model}"]', "default: each agent's own model"),
        key(False, 'cases = "tag:smoke"', "a name substring, or tag:<tag>"),
        key(found.recordings, 'mode = "replay"', "recorded answers, no key, no network (or: --mode record)"),
        '# junit = "junit.xml"',
        '# summary = "summary.md"',
        '# results = "results.json"',
    ]
    return "\n".join(lines) + "\n"


def _summary(found: Found) -> list[str]:
    lines = [
        f"plugins: {', '.join(found.plugins)}" if found.plugins
        else "plugins: none found (no module here imports agenttest.plugin)",
    ]
    if found.providers_file:
        lines.append(f"providers: {found.providers_file}")
    elif found.model:
        lines.append(f"providers: {found.model[0]} (your agents use {found.model[0]}:{found.model[1]}): set its "
                     "base_url")
    else:
        lines.append("providers: none (OPENAI_API_KEY, or write [providers.<name>] tables)")
    if found.mcp_file:
        lines.append(f"MCP servers: {found.mcp_file}")
    if found.has_files:
        where = found.directory or "."
        lines.append(f"run: agents and suites in {where}" + (", replaying recordings/" if found.recordings else ""))
    return lines


def _plugin_modules(here: Path) -> list[str]:
    candidates = [*here.glob("*.py"), *(path for folder in sorted(here.iterdir())
                                        if folder.is_dir() and _visible(folder) for path in folder.glob("*.py"))]
    modules = []
    for path in sorted(candidates):
        parts = [*path.relative_to(here).parent.parts, path.stem]
        if parts[-1] == "__init__":
            parts.pop()
        if not parts or not all(part.isidentifier() for part in parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if _PLUGIN_IMPORT.search(text):
            modules.append(".".join(parts))
    return modules


def _unconfigured_model(files: Path) -> tuple[str, str] | None:
    for path in sorted((files / "agents").glob("*.y*ml")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        match = _MODEL_LINE.search(text)
        if match and match.group(1) not in _built_in_providers():
            return match.group(1), match.group(2)
    return None


def _built_in_providers() -> set[str]:
    # What agenttest configures without a providers file (openai with OPENAI_API_KEY, even when the key is not set
    # here; a plugin's own offline models): an agent naming one needs no table written for it.
    return {"openai", *getattr(settings, "AGENTTEST_DEFAULT_PROVIDERS", {})}


def _holds_files(path: Path) -> bool:
    return (path / "agents").is_dir() or (path / "suites").is_dir()


def _visible(folder: Path) -> bool:
    return not folder.name.startswith((".", "_")) and folder.name not in _SKIPPED and not (
        folder / "pyvenv.cfg"
    ).exists()
