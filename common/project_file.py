"""The project file, `agenttest.toml`: one file in a team's repository that says what every `agenttest` command run
there needs — its plugins, its model providers, its MCP servers and the defaults of `agenttest run`.

A pure module (no Django models, no app) in the shared room, read by settings.py before any app loads, and by the
`agenttest` command before Django starts, so a bad file ends the command with its problems and exit code 2.

Which file: `AGENTTEST_CONFIG` names one (relative to the working directory; `/dev/null` reads none); unset, the
nearest `agenttest.toml` from the working directory upward, stopping at the repository root (a directory holding
`.git` or `.hg`), as black finds its pyproject.toml — a file above the repository is not the repository's.

    plugins = ["order_tools"]             # modules importable from this file's directory
    providers_file = "providers.toml"     # or [providers.<name>] tables here, in the providers file's shape
    mcp_file = "mcp.toml"                 # or [mcp_servers.<name>] tables here, in the MCP file's shape
    var_dir = "var"                       # the database and broker files (the default: var/ beside this file)

    [run]                                 # defaults of `agenttest run`; its options override them
    directory = "."                       # agents/, suites/, recordings/
    suites = ["order-support"]
    models = ["local:gpt-4o-mini"]
    cases = ""                            # a name substring, or tag:<tag>
    mode = "replay"                       # live, record or replay
    trials = 1
    junit = "junit.xml"
    summary = "summary.md"
    results = "results.json"

Keys sit at the top level (not under an [agenttest] table) so that the same keys could one day live under
[tool.agenttest] of a pyproject.toml, as ruff.toml's do under [tool.ruff]. Every relative path is relative to the
file's directory. Environment variables override the file (settings.py): AGENTTEST_PLUGINS, AGENTTEST_PROVIDERS_FILE,
AGENTTEST_MCP_FILE, AGENTTEST_VAR_DIR.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from common.mcp_config import load_mcp_servers, normalise, validate_mcp_servers
from common.model_keys import split_model_key
from common.provider_config import load_providers, normalise_providers, validate_providers

FILE_NAME = "agenttest.toml"
CONFIG_VARIABLE = "AGENTTEST_CONFIG"
# A directory holding one of these is a repository's root: discovery looks no higher.
REPOSITORY_MARKERS = (".git", ".hg")
# runs.models.Run.Mode's values (common imports no app); tests/test_project_file.py pins that they agree.
RUN_MODES = ("live", "record", "replay")

_TOP_KEYS = ("plugins", "providers_file", "providers", "mcp_file", "mcp_servers", "var_dir", "run")
_RUN_KEYS = ("directory", "suites", "models", "cases", "mode", "trials", "junit", "summary", "results")
_RUN_PATHS = ("junit", "summary", "results")
_MODULE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


class ProjectFileError(ImproperlyConfigured):
    """A project file that cannot be used: every problem, each naming the file and the key."""

    def __init__(self, path: Path | str, problems: list[str]) -> None:
        self.path = str(path)
        self.problems = problems
        super().__init__(str(self))

    def lines(self) -> list[str]:
        return [f"{self.path}: {problem}" for problem in self.problems]

    def __str__(self) -> str:
        return "\n".join(self.lines())


@dataclass(frozen=True)
class Project:
    """A project file as read: paths absolute, providers and MCP servers validated and normalised (None: not given)."""

    path: Path
    plugins: list[str] = field(default_factory=list)
    providers: dict[str, dict[str, Any]] | None = None
    # The file the providers were read from (the project file itself for [providers.*] tables): paths in a
    # provider's options are relative to its directory.
    providers_file: Path | None = None
    mcp_servers: dict[str, dict[str, Any]] | None = None
    run: dict[str, Any] = field(default_factory=dict)
    # Where the project's database and broker files live: the file's var_dir, else var/ beside the file — never the
    # agenttest checkout's, which an editable install would otherwise share with every project (issue 37).
    var_dir_given: Path | None = None

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def var_dir(self) -> Path:
        return self.var_dir_given or self.directory / "var"


def project_file_find(start: Path) -> Path | None:
    """The nearest agenttest.toml in `start` or above it, looking no higher than the repository's root."""
    for directory in (start, *start.parents):
        candidate = directory / FILE_NAME
        if candidate.is_file():
            return candidate
        if any((directory / marker).exists() for marker in REPOSITORY_MARKERS):
            return None
    return None


def project_file_locate(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path | None:
    """The project file this process reads: the one AGENTTEST_CONFIG names, else the one found from `cwd` upward."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    named = environ.get(CONFIG_VARIABLE, "").strip()
    if not named:
        return project_file_find(cwd.absolute())
    if named == os.devnull:
        return None
    path = Path(os.path.normpath(cwd.absolute() / named))
    if not path.is_file():
        why = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise ProjectFileError(path, [f"named by {CONFIG_VARIABLE}, {why} (set it to {os.devnull} to read none)"])
    return path


def project_read(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Project | None:
    """The project file this process reads, read (None when there is none). ProjectFileError when it is bad."""
    path = project_file_locate(environ, cwd)
    return None if path is None else project_file_load(path)


def project_file_load(path: Path) -> Project:
    """The project file at `path` (absolute), validated: ProjectFileError lists every problem."""
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ProjectFileError(path, [f"cannot be read ({exc.strerror})"]) from None
    except UnicodeDecodeError:
        raise ProjectFileError(path, ["not valid TOML (the file is not UTF-8 text)"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ProjectFileError(path, [f"not valid TOML ({exc})"]) from None
    return project_parse(path, data)


def project_parse(path: Path, data: dict[str, Any]) -> Project:
    """The project of a parsed file at `path` (whose directory relative paths are taken from)."""
    directory = path.parent
    problems = _unknown(data, _TOP_KEYS, where="")

    plugins = data.get("plugins", [])
    if not _strings(plugins) or not all(_MODULE.match(plugin) for plugin in plugins):
        problems.append(f"plugins: must be a list of importable module paths (e.g. [\"shop.tools\"]), got "
                        f"{_shown(plugins)}")
        plugins = []

    providers, providers_file = _providers(data, directory, problems)
    mcp_servers = _mcp_servers(data, directory, problems)
    run = _run(data.get("run", {}), directory, problems)
    var_dir = _path(data["var_dir"], directory, "var_dir", problems) if "var_dir" in data else None
    if var_dir is not None and var_dir.exists() and not var_dir.is_dir():
        problems.append(f"var_dir: {var_dir} is a file, not a directory")
    if problems:
        raise ProjectFileError(path, problems)
    return Project(path=path, plugins=list(plugins), providers=providers,
                   providers_file=providers_file if providers_file else (path if providers is not None else None),
                   mcp_servers=mcp_servers, run=run, var_dir_given=var_dir)


def _providers(data: dict[str, Any], directory: Path, problems: list[str]
               ) -> tuple[dict[str, dict[str, Any]] | None, Path | None]:
    if "providers_file" in data and "providers" in data:
        problems.append("providers_file and [providers.<name>] tables: give one or the other")
        return None, None
    if "providers_file" in data:
        path = _path(data["providers_file"], directory, "providers_file", problems)
        if path is None:
            return None, None
        try:
            return load_providers(str(path)), path
        except ImproperlyConfigured as exc:
            problems.append(f"providers_file: {exc}")
            return None, None
    if "providers" not in data:
        return None, None
    table = data["providers"]
    if not isinstance(table, dict) or not table:
        problems.append("providers: must hold at least one [providers.<name>] table (kind, base_url, models, …)")
        return None, None
    found = validate_providers(table)
    problems.extend(f"providers: {problem}" for problem in found)
    return (None if found else normalise_providers(table)), None


def _mcp_servers(data: dict[str, Any], directory: Path, problems: list[str]) -> dict[str, dict[str, Any]] | None:
    if "mcp_file" in data and "mcp_servers" in data:
        problems.append("mcp_file and [mcp_servers.<name>] tables: give one or the other")
        return None
    if "mcp_file" in data:
        path = _path(data["mcp_file"], directory, "mcp_file", problems)
        if path is None:
            return None
        try:
            return load_mcp_servers(str(path))
        except ImproperlyConfigured as exc:
            problems.append(f"mcp_file: {exc}")
            return None
    if "mcp_servers" not in data:
        return None
    table = data["mcp_servers"]
    found = validate_mcp_servers(table)
    problems.extend(f"mcp_servers: {problem}" for problem in found)
    return None if found else {name: normalise(spec, directory=str(directory)) for name, spec in table.items()}


def _run(table: Any, directory: Path, problems: list[str]) -> dict[str, Any]:
    if not isinstance(table, dict):
        problems.append(f"run: must be a table ([run]) of defaults for `agenttest run`, got {_shown(table)}")
        return {}
    problems.extend(_unknown(table, _RUN_KEYS, where="run."))
    run: dict[str, Any] = {}
    if "directory" in table:
        path = _path(table["directory"], directory, "run.directory", problems)
        if path is not None and not path.is_dir():
            problems.append(f"run.directory: {path} is not a directory (it holds agents/, suites/, recordings/)")
        elif path is not None:
            run["directory"] = path
    for key in ("suites", "models"):
        if key in table:
            value = table[key]
            if not _strings(value) or not all(item.strip() for item in value):
                problems.append(f"run.{key}: must be a list of names, got {_shown(value)}")
            elif key == "models" and (bad := [item for item in value if split_model_key(item.strip()) is None]):
                problems.append(f"run.models: each must be a provider:model key (e.g. \"local:gpt-4o-mini\"), "
                                f"got {_shown(bad[0])}")
            else:
                run[key] = [item.strip() for item in value]
    if "cases" in table:
        if isinstance(table["cases"], str):
            run["cases"] = table["cases"]
        else:
            problems.append(
                f"run.cases: must be a string (a name substring, or tag:<tag>), got {_shown(table['cases'])}"
            )
    if "mode" in table:
        if table["mode"] in RUN_MODES:
            run["mode"] = table["mode"]
        else:
            problems.append(f"run.mode: must be one of {', '.join(RUN_MODES)}, got {_shown(table['mode'])}")
    if "trials" in table:
        trials = table["trials"]
        if isinstance(trials, int) and not isinstance(trials, bool) and trials >= 1:
            run["trials"] = trials
        else:
            problems.append(f"run.trials: must be a whole number ≥ 1, got {_shown(trials)}")
    for key in _RUN_PATHS:
        if key in table:
            path = _path(table[key], directory, f"run.{key}", problems)
            if path is not None:
                run[key] = path
    return run


def _path(value: Any, directory: Path, key: str, problems: list[str]) -> Path | None:
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        problems.append(f"{key}: must be a path (relative to this file's directory), got {_shown(value)}")
        return None
    return Path(os.path.normpath(directory / value))


def _unknown(table: dict[str, Any], known: tuple[str, ...], *, where: str) -> list[str]:
    problems = []
    for key in table:
        if key in known:
            continue
        near = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        section = f"[{where.rstrip('.')}] " if where else ""
        problems.append(f"{where}{key}: unknown key ({hint}{section}keys: {', '.join(known)})")
    return problems


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}…"
