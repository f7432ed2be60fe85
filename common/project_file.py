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

The file's shape is `ProjectFile` below, checked by the one schema engine (common/schemas.py); what needs the disk
(a directory that exists, the providers and MCP files named) is checked once the shape holds.

Keys sit at the top level (not under an [agenttest] table) so that the same keys could one day live under
[tool.agenttest] of a pyproject.toml, as ruff.toml's do under [tool.ruff]. Every relative path is relative to the
file's directory. Environment variables override the file (settings.py): AGENTTEST_PLUGINS, AGENTTEST_PROVIDERS_FILE,
AGENTTEST_MCP_FILE, AGENTTEST_VAR_DIR.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from django.core.exceptions import ImproperlyConfigured
from pydantic import ConfigDict, Field

from common.inputs import path_of
from common.mcp_config import load_mcp_servers, normalise, validate_mcp_servers
from common.model_keys import MODEL_KEY_PATTERN
from common.provider_config import load_providers, normalise_providers, validate_providers
from common.schemas import BLANK, Parts, Strict, checker, messages_for

FILE_NAME = "agenttest.toml"
CONFIG_VARIABLE = "AGENTTEST_CONFIG"
# A directory holding one of these is a repository's root: discovery looks no higher.
REPOSITORY_MARKERS = (".git", ".hg")
# runs.models.Run.Mode's values (common imports no app); tests/test_project_file.py pins that they agree.
RUN_MODES = ("live", "record", "replay")

_RUN_PATHS = ("junit", "summary", "results")


# --- The file's shape, checked by the one schema engine (common/schemas.py) ----------------------------------------
# Messages name the key and show the value given, cut short ({shown}); a list is named whole, never one of its items
# (`_shape_problems`).
_PATH_MESSAGE = "must be a path (relative to this file's directory), got {shown}"
# Not blank, and no NUL: no file has one in its name.
_PATH = r"^[^\x00]*[^\s\x00][^\x00]*$"
_PLUGINS = 'must be a list of importable module paths (e.g. ["shop.tools"]), got {shown}'
_NAMES = "must be a list of names, got {shown}"
# The run command drops the space around a model key, as around a suite's name. Blank is the names' rule's to say.
_SPACED_MODEL_KEY = rf"^\s*(?:{MODEL_KEY_PATTERN.removeprefix('^').removesuffix('$')})?\s*$"
_EACH_MODEL_KEY = 'each must be a provider:model key (e.g. "local:gpt-4o-mini"), got {item}'
_TRIALS = "must be a whole number ≥ 1, got {shown}"
_MODE = f"must be one of {', '.join(RUN_MODES)}, got {{shown}}"
_PROVIDERS = "must hold at least one [providers.<name>] table (kind, base_url, models, …)"

ModulePath = Annotated[str, Field(
    pattern=r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$", json_schema_extra=messages_for(type=_PLUGINS, pattern=_PLUGINS),
)]
Name = Annotated[str, Field(pattern=BLANK, json_schema_extra=messages_for(type=_NAMES, pattern=_NAMES))]
ModelKey = Annotated[str, Field(pattern=BLANK, json_schema_extra={
    "allOf": [{"pattern": _SPACED_MODEL_KEY, **messages_for(pattern=_EACH_MODEL_KEY)}],
    **messages_for(type=_NAMES, pattern=_NAMES),
})]


def _absent(**rules: Any) -> Any:
    # A key that may be left out: when written it follows `rules`, and null is not among them (TOML has none).
    return Field(None, **rules)


def _a_path(description: str) -> Any:
    return _absent(pattern=_PATH, description=description,
                   json_schema_extra=messages_for(type=_PATH_MESSAGE, pattern=_PATH_MESSAGE))


class RunDefaults(Strict):
    """[run]: the defaults of `agenttest run`; its options override them."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=messages_for(
        type="must be a table ([run]) of defaults for `agenttest run`, got {shown}",
        additionalProperties="unknown key ({near}[run] keys: {known})",
    ))

    directory: str = _a_path("Where agents/, suites/ and recordings/ are.")
    suites: list[Name] = Field([], json_schema_extra=messages_for(type=_NAMES))
    models: list[ModelKey] = Field([], json_schema_extra=messages_for(type=_NAMES))
    cases: str = Field("", description="A name substring, or tag:<tag>.", json_schema_extra=messages_for(
        type="must be a string (a name substring, or tag:<tag>), got {shown}",
    ))
    # The tuple's names, read by pydantic at run time; the checker takes only literal values.
    mode: Literal[RUN_MODES] = _absent(json_schema_extra=messages_for(  # type: ignore[valid-type]
        type=_MODE, enum=_MODE,
    ))
    trials: int = Field(1, ge=1, json_schema_extra=messages_for(type=_TRIALS, minimum=_TRIALS))
    junit: str = _a_path("The JUnit XML report.")
    summary: str = _a_path("The Markdown summary.")
    results: str = _a_path("The JSON results.")


class ProjectFile(Strict):
    """agenttest.toml: what every `agenttest` command run in the project needs."""

    model_config = ConfigDict(extra="forbid", title="agenttest project", json_schema_extra=messages_for(
        additionalProperties="unknown key ({near}keys: {known})",
    ))

    plugins: list[ModulePath] = Field(
        [], description="Modules importable from this file's directory.",
        json_schema_extra=messages_for(type=_PLUGINS),
    )
    providers_file: str = _a_path("A providers file (instead of [providers.<name>] tables).")
    providers: dict[str, Any] = _absent(
        min_length=1, description="[providers.<name>] tables, each in the providers file's shape "
        "(common/provider_config.py checks them).",
        json_schema_extra=messages_for(type=_PROVIDERS, minProperties=_PROVIDERS),
    )
    mcp_file: str = _a_path("An MCP server file (instead of [mcp_servers.<name>] tables).")
    mcp_servers: Any = Field(
        None, description="[mcp_servers.<name>] tables, the MCP file's servers (common/mcp_config.py checks them).",
    )
    var_dir: str = _a_path("The database and broker files; absent: var/ beside this file.")
    run: RunDefaults = _absent()


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
    problems = _shape_problems(data)
    if problems:
        raise ProjectFileError(path, problems)
    directory = path.parent
    providers, providers_file = _providers(data, directory, problems)
    mcp_servers = _mcp_servers(data, directory, problems)
    run = _run(data.get("run", {}), directory, problems)
    var_dir = _path(data["var_dir"], directory) if "var_dir" in data else None
    if var_dir is not None and var_dir.exists() and not var_dir.is_dir():
        problems.append(f"var_dir: {var_dir} is a file, not a directory")
    if problems:
        raise ProjectFileError(path, problems)
    return Project(path=path, plugins=list(data.get("plugins", [])), providers=providers,
                   providers_file=providers_file if providers_file else (path if providers is not None else None),
                   mcp_servers=mcp_servers, run=run, var_dir_given=var_dir)


def _shape_problems(data: dict[str, Any]) -> list[str]:
    """Every way the file breaks its shape, in the file's words: `run.mode: must be one of …`. A problem of a list's
    item is the list's, said once: the file's messages always named the list."""
    def words(parts: Parts, value: Any) -> dict[str, str]:
        named: Any = data
        for part in _named(parts):
            named = named[part]
        return {"shown": _shown(named), "item": _shown(value)}

    said: dict[str, str] = {}
    for parts, message in checker(ProjectFile).findings(data, words=words):
        said.setdefault(path_of(_named(parts)), message)
    return [f"{path}: {message}" for path, message in said.items()]


def _named(parts: Parts) -> Parts:
    while parts and isinstance(parts[-1], int):
        parts = parts[:-1]
    return parts


def _providers(data: dict[str, Any], directory: Path, problems: list[str]
               ) -> tuple[dict[str, dict[str, Any]] | None, Path | None]:
    if "providers_file" in data and "providers" in data:
        problems.append("providers_file and [providers.<name>] tables: give one or the other")
        return None, None
    if "providers_file" in data:
        path = _path(data["providers_file"], directory)
        try:
            return load_providers(str(path)), path
        except ImproperlyConfigured as exc:
            problems.append(f"providers_file: {exc}")
            return None, None
    if "providers" not in data:
        return None, None
    table = data["providers"]
    found = validate_providers(table)
    problems.extend(f"providers: {problem}" for problem in found)
    return (None if found else normalise_providers(table)), None


def _mcp_servers(data: dict[str, Any], directory: Path, problems: list[str]) -> dict[str, dict[str, Any]] | None:
    if "mcp_file" in data and "mcp_servers" in data:
        problems.append("mcp_file and [mcp_servers.<name>] tables: give one or the other")
        return None
    if "mcp_file" in data:
        try:
            return load_mcp_servers(str(_path(data["mcp_file"], directory)))
        except ImproperlyConfigured as exc:
            problems.append(f"mcp_file: {exc}")
            return None
    if "mcp_servers" not in data:
        return None
    table = data["mcp_servers"]
    found = validate_mcp_servers(table)
    problems.extend(f"mcp_servers: {problem}" for problem in found)
    return None if found else {name: normalise(spec, directory=str(directory)) for name, spec in table.items()}


def _run(table: dict[str, Any], directory: Path, problems: list[str]) -> dict[str, Any]:
    run: dict[str, Any] = {}
    if "directory" in table:
        path = _path(table["directory"], directory)
        if not path.is_dir():
            problems.append(f"run.directory: {path} is not a directory (it holds agents/, suites/, recordings/)")
        else:
            run["directory"] = path
    run.update({key: [item.strip() for item in table[key]] for key in ("suites", "models") if key in table})
    run.update({key: table[key] for key in ("cases", "mode", "trials") if key in table})
    run.update({key: _path(table[key], directory) for key in _RUN_PATHS if key in table})
    return run


def _path(value: str, directory: Path) -> Path:
    return Path(os.path.normpath(directory / value))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}…"
