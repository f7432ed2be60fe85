"""Agents, suites and cases as YAML files in a team's repository (why YAML: docs/decisions/0006-files-as-source.md).

    DIR/
        agents/<agent>.yaml            one agent; its instruction inline or in the file `instruction_file` names
        agents/<agent>.md              (export writes every instruction to its own file, beside the agent's)
        suites/<suite>/suite.yaml      one suite
        suites/<suite>/cases/*.yaml    its cases, one per file
        recordings/<suite>/            recorded model answers (runs/tapes/files.py), for `agenttest run --mode replay`

`files_apply` makes the database match the files, all or nothing; `files_export` writes them from the database so
that export → apply into an empty database → export gives the same bytes. The shape of each file is its JSON Schema
(cases/schema.py); the checks that need the database are those every other door uses (cases/validation/,
agenthost/validation.py), so a file is refused for exactly what the API would refuse.
"""

from __future__ import annotations

import io
import json
import re
import sys
import zipfile
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction
from django.utils.text import slugify

from agenthost.seams import (
    Agent,
    AgentDocument,
    agent_create,
    agent_problems,
    agent_update,
    mcp_cached_listings,
    mcp_servers_named,
    team_code_refused,
    unstorable_paths,
)
from cases.models import Case, Suite
from cases.schema import (
    AssertionEntry,
    CaseFile,
    MockEntry,
    SimulatedUserEntry,
    SuiteFile,
    schema_problems,
)
from cases.services import (
    case_create,
    case_disable,
    case_to_document,
    case_update,
    suite_create,
    suite_to_document,
    suite_update,
)
from cases.snapshot_files import SNAPSHOT_TYPE, SNAPSHOTS, snapshot_text, snapshots_attach
from cases.snapshot_files import SUFFIX as SNAPSHOT_SUFFIX
from cases.validation.case_documents import clean_case_document
from cases.validation.problems import CaseValidationError
from common.inputs import INT_RANGE_PROBLEM, MAX_JSON_DEPTH, UNSTORABLE_MESSAGE, json_value_issue
from common.model_keys import split_model_key
from common.schemas import defaults

AGENTS, SUITES, CASES, SUITE_FILE = "agents", "suites", "cases", "suite.yaml"
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class FileProblem:
    """One thing wrong with the files: the file (relative to DIR), the key path inside it, and what is wrong."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}" if self.field else f"{self.file}: {self.message}"


class FilesRejected(Exception):
    """The files cannot be applied; nothing was changed. `problems` lists every reason."""

    def __init__(self, problems: list[FileProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(problem) for problem in problems))


# --- YAML ---------------------------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """YAML as a reviewer reads it: `no`, `on` and `2024-05-01` stay text (only true/false are booleans), and a key
    written twice is an error rather than the last one silently winning."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is written twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in ("tag:yaml.org,2002:timestamp",
                                                                           "tag:yaml.org,2002:bool")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|false)$"), list("tf")
)
# `1e-05` and `1.5e3` are numbers, as in YAML 1.2 and JSON (YAML 1.1 wants a dot and a signed exponent, and would
# read them as text).
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+.0123456789"))


class _Dumper(yaml.SafeDumper):
    pass


# Text such as "1e5" is quoted when written, since _Loader reads it plain as a number.
_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+.0123456789"))


# What YAML reads as a line break or drops (NEL, the Unicode separators, CR, a BOM) and control characters: text
# holding any of them is written double-quoted, where each is an escape, or it would not read back the same.
_ESCAPED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line text (instructions, tool results, user messages) as a literal block: it reads and diffs line by line.
    style = '"' if _ESCAPED.search(value) else ("|" if "\n" in value else None)
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def yaml_text(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=10**9, default_flow_style=False)


def _read_yaml(path: Path, name: str) -> tuple[Any, FileProblem | None]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None, FileProblem(name, "", "is not UTF-8 text")
    try:
        # Checked on the parser's events, before anything is built: building is what an alias bomb, a deep nesting
        # or a huge integer makes expensive or crash.
        if (found := _event_problem(text)) is not None:
            return None, FileProblem(name, *found)
        return yaml.load(text, Loader=_Loader), None  # a SafeLoader: plain data only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc)
        return None, FileProblem(name, "", f"is not valid YAML: {where}{what}")
    except (ValueError, RecursionError, OverflowError) as exc:
        # What the event checks leave to the constructor should never raise; if it does, the file is still named.
        return None, FileProblem(name, "", f"cannot be read as agenttest data ({type(exc).__name__}: {exc})")


ALIAS_MESSAGE = (
    "uses a YAML anchor or alias ({what}): agenttest files allow neither, so that every value is read where it "
    "stands and a small file cannot expand into a huge one; write the value out"
)
TAG_MESSAGE = (
    "uses {what}: agenttest files hold plain data only — text, numbers, true/false, null, lists and mappings"
)
_YAML_TAG = "tag:yaml.org,2002:"
_INT_TAG, _MERGE_TAG = f"{_YAML_TAG}int", f"{_YAML_TAG}merge"
# What JSON holds: every other tag (!!binary, !!set, !!timestamp, !!omap, …) builds a value no database column of
# JSON stores.
_PLAIN_TAGS = frozenset(f"{_YAML_TAG}{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq"))


@dataclass
class _Open:
    """A mapping or list the parser is inside of."""

    path: str
    is_mapping: bool
    index: int = 0
    key: str = ""
    expecting_key: bool = True
    key_lines: dict[str, int] = field(default_factory=dict)

    def enter(self) -> tuple[str, bool]:
        """The key path of the node that starts next in here, and whether it is a key."""
        if not self.is_mapping:
            self.index += 1
            return _join(self.path, self.index - 1), False
        key_next = self.expecting_key
        self.expecting_key = not key_next
        return (self.path, True) if key_next else (_join(self.path, self.key), False)


def _event_problem(text: str) -> tuple[str, str] | None:
    """(key path, message) for the first thing in the YAML text that agenttest refuses before building any value:
    an anchor or alias, a tag of something other than plain data, nesting deeper than MAX_JSON_DEPTH, a key written
    twice in one mapping, a key that is not plain text, or a whole number too long to convert. Walks the parser's
    events, which neither expand aliases nor recurse."""
    loader = _Loader(text)
    opened: list[_Open] = []
    try:
        while not isinstance(event := loader.get_event(), yaml.StreamEndEvent):
            if isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                opened.pop()
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            path, is_key = opened[-1].enter() if opened else ("", False)
            if is_key and isinstance(event, yaml.ScalarEvent):
                here = opened[-1]
                path = _join(here.path, event.value)
                # The parser's events always carry their marks; the stubs allow an event made without.
                line = event.start_mark.line + 1  # type: ignore[union-attr]
                if event.value in here.key_lines:
                    return path, (f"the key is written twice (lines {here.key_lines[event.value]} and "
                                  f"{line}); YAML would silently keep only the last")
                here.key, here.key_lines[event.value] = event.value, line
            if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
                marker = "*" if isinstance(event, yaml.AliasEvent) else "&"
                return path, ALIAS_MESSAGE.format(what=f"{marker}{event.anchor}")
            if is_key and not isinstance(event, yaml.ScalarEvent):
                return path, "a key must be plain text, not a list or a mapping"
            tag = event.tag
            if isinstance(event, yaml.ScalarEvent) and tag in (None, "!"):
                tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
            if tag not in (None, "!", *_PLAIN_TAGS):
                what = "a merge key (<<)" if tag == _MERGE_TAG else f"the tag {tag.replace(_YAML_TAG, '!!')}"
                return path, TAG_MESSAGE.format(what=what)
            if isinstance(event, yaml.ScalarEvent):
                if tag == _INT_TAG and len(event.value.lstrip("+-").replace("_", "")) > sys.get_int_max_str_digits():
                    return path, INT_RANGE_PROBLEM
            elif isinstance(event, yaml.CollectionStartEvent):
                if len(opened) >= MAX_JSON_DEPTH:
                    # The path down to the limit would be 64 steps long: its first few say where.
                    return f"{opened[min(len(opened) - 1, 6)].path}…", f"nested more than {MAX_JSON_DEPTH} levels deep"
                opened.append(_Open(path, isinstance(event, yaml.MappingStartEvent)))
    finally:
        loader.dispose()
    return None


def _join(path: str, key: str | int) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))


# --- Reading a directory ------------------------------------------------------------------------------------------


@dataclass
class _Source:
    file: str
    data: dict[str, Any]


@dataclass
class _SuiteSource(_Source):
    cases: list[_Source] = field(default_factory=list)


@dataclass
class _Tree:
    agents: list[_Source] = field(default_factory=list)
    suites: list[_SuiteSource] = field(default_factory=list)
    problems: list[FileProblem] = field(default_factory=list)


def _yaml_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(path for path in directory.iterdir() if path.suffix in YAML_SUFFIXES and path.is_file())


def _load(root: Path, path: Path, kind: str, problems: list[FileProblem]) -> _Source | None:
    name = path.relative_to(root).as_posix()
    data, problem = _read_yaml(path, name)
    if problem is None and data is None:
        problem = FileProblem(name, "", f"is empty: a {kind} file holds a mapping of keys")
    elif problem is None and not isinstance(data, dict):
        words: dict[type, str] = {list: "a list", str: "text"}
        what = words.get(type(data), "a single value")
        problem = FileProblem(name, "", f"holds {what} where a {kind} file holds a mapping of keys (name: …)")
    if problem is not None:
        problems.append(problem)
        return None
    found = [FileProblem(name, where, message) for where, message in schema_problems(kind, data)]
    if not found and (issue := json_value_issue(data)) is not None:
        # What the database could not store (NaN, 2**64, NUL), refused as the API refuses it in a JSON body.
        where, message = issue
        found = [FileProblem(name, "" if where == "(top level)" else where, message)]
    problems.extend(found)
    if found:
        return None
    data.pop("$schema", None)
    return _Source(file=name, data=data)


def _read_tree(root: Path) -> _Tree:
    tree = _Tree()
    if not root.is_dir():
        tree.problems.append(FileProblem(str(root), "", "is not a directory"))
        return tree
    for path in _yaml_files(root / AGENTS):
        source = _load(root, path, "agent", tree.problems)
        if source is not None and _instruction(root, path, source, tree.problems):
            tree.agents.append(source)
    suites_dir = root / SUITES
    for directory in sorted(suites_dir.iterdir()) if suites_dir.is_dir() else []:
        if not directory.is_dir():
            continue
        if not (directory / SUITE_FILE).is_file():
            tree.problems.append(FileProblem(directory.relative_to(root).as_posix(), "", f"has no {SUITE_FILE}"))
            continue
        source = _load(root, directory / SUITE_FILE, "suite", tree.problems)
        paths = _yaml_files(directory / CASES)
        cases = [_load(root, path, "case", tree.problems) for path in paths]
        tree.problems += [
            FileProblem(*problem)
            for problem in snapshots_attach(
                root, directory, [(path, case.data if case else None) for path, case in zip(paths, cases, strict=True)]
            )
        ]
        if source is not None:
            suite = _SuiteSource(file=source.file, data=source.data)
            suite.cases = [case for case in cases if case is not None]
            tree.suites.append(suite)
    if not tree.agents and not tree.suites and not tree.problems:
        tree.problems.append(FileProblem(str(root), "", f"holds no {AGENTS}/*.yaml and no {SUITES}/*/{SUITE_FILE}"))
    _duplicates(tree.agents, "agent", tree.problems)
    _duplicates(tree.suites, "suite", tree.problems)
    for suite in tree.suites:
        _duplicates(suite.cases, f"case of suite {suite.data['name']!r}", tree.problems)
    return tree


def _instruction(root: Path, path: Path, source: _Source, problems: list[FileProblem]) -> bool:
    """Reads `instruction_file` into `instruction`: exactly one of the two must be given."""
    data = source.data
    if "instruction" not in data and "instruction_file" not in data and data.get("runtime", "native") != "native":
        # The team's code at `entry` holds the instruction of an agent with its own runtime.
        data["instruction"] = ""
        return True
    if ("instruction" in data) == ("instruction_file" in data):
        problems.append(FileProblem(
            source.file, "instruction", "give either `instruction` (the text) or `instruction_file` (a file beside "
            "this one), not " + ("both" if "instruction" in data else "neither"),
        ))
        return False
    if "instruction_file" in data:
        beside = (path.parent / data.pop("instruction_file")).resolve()
        relative = beside.relative_to(root.resolve()).as_posix() if beside.is_relative_to(root.resolve()) else ""
        if not relative or not beside.is_file():
            why = "is outside the directory" if not relative else "does not exist"
            problems.append(FileProblem(source.file, "instruction_file", f"{beside.name!r} {why}"))
            return False
        try:
            # newline="": the instruction is exactly the file's text, a CR included.
            with beside.open(encoding="utf-8", newline="") as handle:
                data["instruction"] = handle.read()
        except UnicodeDecodeError:
            problems.append(FileProblem(source.file, "instruction_file", f"{relative} is not UTF-8 text"))
            return False
    if unstorable_paths(data["instruction"], "instruction"):
        problems.append(FileProblem(source.file, "instruction", UNSTORABLE_MESSAGE))
        return False
    return True


def _duplicates(sources: Iterable[_Source], what: str, problems: list[FileProblem]) -> None:
    first: dict[str, str] = {}
    for source in sources:
        name = source.data["name"].strip()
        if name in first:
            problems.append(FileProblem(source.file, "name", f"{name!r} is also the name of the {what} in "
                                                             f"{first[name]}"))
        else:
            first[name] = source.file


# A file leaves out what equals the default; the defaults are the schema's.
SUITE_DEFAULTS = defaults(SuiteFile)
AGENT_DEFAULTS = defaults(AgentDocument)
CASE_DEFAULTS = defaults(CaseFile)
CASE_ORDER = ("name", "description", "enabled", "source", "type", "entry_agent", "priority", "tags", "initial_state",
              "tables", "history", "turns", "simulated_user", "assertions", "mocks", "warnings")
MOCK_DEFAULTS = defaults(MockEntry)
SIMULATED_USER_DEFAULTS = defaults(SimulatedUserEntry)
ASSERTION_DEFAULTS = defaults(AssertionEntry)


# --- From files to service arguments, and back --------------------------------------------------------------------


def _agent_fields(data: dict[str, Any]) -> dict[str, Any]:
    provider, model = split_model_key(data["model"]) or ("", "")
    return {
        "name": data["name"].strip(),
        "description": data.get("description", ""),
        "instruction": data["instruction"],
        "provider": provider,
        "model": model,
        "temperature": None if data.get("temperature", 0.0) is None else float(data.get("temperature", 0.0)),
        "max_steps": data.get("max_steps"),
        "functions": [{"name": item} if isinstance(item, str) else item for item in data.get("functions", [])],
        "rules": data.get("rules", []),
        "runtime": data.get("runtime", "native"),
        "entry": data.get("entry", ""),
        "deps": data.get("deps", ""),
        "outside_effects": data.get("outside_effects", {}),
        "command": data.get("command", ""),
        "args": data.get("args", []),
        "cwd": data.get("cwd", ""),
        "env": data.get("env", []),
        "protocol": data.get("protocol", ""),
    }


def _agent_state(agent: Agent) -> dict[str, Any]:
    fields = ("name", "description", "instruction", "provider", "model", "temperature", "max_steps", "functions",
              "rules", "runtime", "entry", "deps", "outside_effects", "command", "args", "cwd", "env", "protocol")
    return {
        **{name: getattr(agent, name) for name in fields},
        "sub_agents": sorted(agent.sub_agents.values_list("name", flat=True)),
    }


def _case_document(data: dict[str, Any], existing: Case | None) -> dict[str, Any]:
    document = dict(data)
    document["mocks"] = [
        {**mock, "result": _result_text(mock["result"])} if "result" in mock else mock
        for mock in data.get("mocks", [])
    ]
    # Conversation ids belong to one installation, so files do not carry them; applying keeps the case's own link.
    document["source_conversation"] = existing.source_conversation_id if existing is not None else None
    return document


def _result_text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def _result_value(text: str) -> Any:
    """A tool result written as JSON text is exported as the structure it is, when writing it back as JSON gives the
    very same text: the file reads well and applying it stores the same bytes."""
    if text[:1] not in ("{", "["):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if json.dumps(value, ensure_ascii=False) == text else text


# --- Apply --------------------------------------------------------------------------------------------------------


@dataclass
class Change:
    kind: str
    name: str
    action: str  # created, changed, unchanged, disabled, not in files
    file: str = ""

    def __str__(self) -> str:
        where = f" ({self.file})" if self.file else ""
        return f"{self.action:>10}  {self.kind} {self.name!r}{where}"


@dataclass
class ApplyReport:
    changes: list[Change] = field(default_factory=list)
    dry_run: bool = False

    def count(self, action: str) -> int:
        return sum(1 for change in self.changes if change.action == action)


class _Rollback(Exception):
    pass


def files_apply(*, directory: Path, dry_run: bool = False, prune: bool = False) -> ApplyReport:
    """Make the database match the files in `directory`: agents, suites and cases are created or changed to what the
    files say, and with `prune` the cases of those suites that no file names are disabled (never deleted). All or
    nothing: raises FilesRejected naming every problem, and then nothing was changed. `dry_run` works the plan out
    and changes nothing."""
    tree = _read_tree(directory)
    if tree.problems:
        raise FilesRejected(tree.problems)
    report = ApplyReport(dry_run=dry_run)
    problems: list[FileProblem] = []
    # A plan imports none of the team's code (importing a module runs it): the checks that need an agent's entry
    # point are a real apply's.
    refused = team_code_refused("a dry run imports none of the team's code") if dry_run else nullcontext()
    try:
        with refused, transaction.atomic():
            _apply_agents(tree.agents, report, problems)
            unlisted = _unlisted_servers(tree.agents)
            for suite_source in tree.suites:
                agent = str(suite_source.data.get("agent", "")).strip()
                if unlisted.get(agent):
                    # Its cases name tools no listing here knows: checking them would only say each is not callable.
                    servers = ", ".join(repr(server) for server in unlisted[agent])
                    problems.append(FileProblem(
                        suite_source.file, "agent",
                        f"the suite and its cases were not checked: the tools of MCP server {servers} that the agent "
                        f"{agent!r} declares were never listed on this database (see its agent file)",
                    ))
                    continue
                _apply_suite(suite_source, report, problems, prune=prune)
            if problems or dry_run:
                raise _Rollback
    except _Rollback:
        pass
    if problems:
        raise FilesRejected(problems)
    return report


def files_mcp_servers(*, directory: Path) -> list[str]:
    """The MCP servers the agent files in `directory` declare tools of; none when the files cannot be read (applying
    them reports why)."""
    tree = _read_tree(directory)
    if tree.problems:
        return []
    return list(dict.fromkeys(
        server for source in tree.agents for server in mcp_servers_named(source.data.get("functions"))
    ))


def _unlisted_servers(sources: list[_Source]) -> dict[str, list[str]]:
    """Agent name → the MCP servers it declares that have no cached listing (so its tools are unknown here)."""
    named = {str(source.data.get("name", "")).strip(): mcp_servers_named(source.data.get("functions"))
             for source in sources}
    cached = set(mcp_cached_listings(sorted({server for servers in named.values() for server in servers})))
    return {agent: missing for agent, servers in named.items()
            if (missing := [server for server in servers if server not in cached])}


def _apply_agents(sources: list[_Source], report: ApplyReport, problems: list[FileProblem]) -> None:
    # Sub-agents may be defined in any order (or each other's), so every agent exists before any is linked.
    before: dict[str, dict[str, Any] | None] = {}
    written: list[tuple[_Source, Agent]] = []
    for source in sources:
        fields = _agent_fields(source.data)
        agent = Agent.objects.filter(name=fields["name"]).first()
        before[fields["name"]] = _agent_state(agent) if agent is not None else None
        if agent is None:
            agent = agent_create(sub_agents=[], **fields)
        else:
            agent = agent_update(agent=agent, **fields)
        written.append((source, agent))
    for source, agent in written:
        sub_agents = [name.strip() for name in source.data.get("sub_agents", [])]
        # Applying files contacts no MCP server (a CI replay has none): declarations are checked against the cache.
        found = agent_problems(
            name=agent.name, instruction=agent.instruction, provider=agent.provider, model=agent.model,
            functions=agent.functions, rules=agent.rules, sub_agents=sub_agents, list_servers=False,
            runtime=agent.runtime, entry=agent.entry, outside_effects=agent.outside_effects, deps=agent.deps,
            command=agent.command, args=agent.args, cwd=agent.cwd, env=agent.env, protocol=agent.protocol,
        )
        for key, messages in found.items():
            for message in messages:
                # Function and rule problems carry their own path ("functions[0].name: …"); in the file the
                # provider is half of `model`.
                where, _, text = message.partition(": ")
                if key in ("functions", "rules") and where.startswith(key) and text:
                    problems.append(FileProblem(source.file, where, text))
                else:
                    problems.append(FileProblem(source.file, "model" if key == "provider" else key, message))
        if found:
            continue
        agent_update(agent=agent, sub_agents=sub_agents)
        state = before[agent.name]
        action = "created" if state is None else ("unchanged" if state == _agent_state(agent) else "changed")
        report.changes.append(Change("agent", agent.name, action, source.file))


def _apply_suite(source: _SuiteSource, report: ApplyReport, problems: list[FileProblem], *, prune: bool) -> None:
    # Every key the file leaves out has its default: a suite applied from a file is what the file says, whatever the
    # suite was before.
    data = {**SUITE_DEFAULTS, **source.data}
    name = data["name"].strip()
    suite = Suite.objects.filter(name=name).first()
    state = suite_to_document(suite=suite) if suite is not None else None
    try:
        suite = suite_update(suite=suite, data=data) if suite is not None else suite_create(data=data)
    except CaseValidationError as exc:
        problems.extend(FileProblem(source.file, problem.field, problem.message) for problem in exc.problems)
        return
    action = "created" if state is None else ("unchanged" if state == suite_to_document(suite=suite) else "changed")
    report.changes.append(Change("suite", name, action, source.file))
    existing = {case.name: case for case in Case.objects.filter(suite=suite)}
    named: set[str] = set()
    for case_source in source.cases:
        case_name = case_source.data["name"].strip()
        named.add(case_name)
        case = existing.get(case_name)
        document = _case_document(case_source.data, case)
        try:
            if case is None:
                case_create(suite=suite, document=document)
                action = "created"
            elif clean_case_document(document, suite=suite, instance=case) == case_to_document(case=case):
                action = "unchanged"
            else:
                case_update(case=case, document=document)
                action = "changed"
        except CaseValidationError as exc:
            problems.extend(FileProblem(case_source.file, problem.field, problem.message) for problem in exc.problems)
            continue
        report.changes.append(Change("case", f"{name} / {case_name}", action, case_source.file))
    for case_name, case in sorted(existing.items()):
        if case_name in named:
            continue
        if prune and case.enabled:
            case_disable(case=case)
            report.changes.append(Change("case", f"{name} / {case_name}", "disabled"))
        elif not prune:
            report.changes.append(Change("case", f"{name} / {case_name}", "not in files"))


# --- Export -------------------------------------------------------------------------------------------------------


@dataclass
class ExportReport:
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def _without_defaults(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in defaults or value != defaults[key]}


def agent_file(agent: Agent, instruction_file: str) -> dict[str, Any]:
    functions = [
        item["name"] if set(item) == {"name"} else item for item in agent.functions or [] if isinstance(item, dict)
    ]
    data = {
        "name": agent.name,
        "description": agent.description,
        "runtime": agent.runtime,
        "entry": agent.entry,
        "deps": agent.deps,
        "command": agent.command,
        "args": agent.args or [],
        "cwd": agent.cwd,
        "env": agent.env or [],
        "protocol": agent.protocol,
        "outside_effects": agent.outside_effects or {},
        "model": agent.model_key,
        "temperature": agent.temperature,
        "max_steps": agent.max_steps,
        "instruction_file": instruction_file,
        "functions": functions,
        "rules": agent.rules or [],
        "sub_agents": sorted(agent.sub_agents.values_list("name", flat=True)),
    }
    if not instruction_file:
        del data["instruction_file"]
    return _without_defaults(data, AGENT_DEFAULTS)


def suite_file(suite: Suite) -> dict[str, Any]:
    return _without_defaults(suite_to_document(suite=suite), SUITE_DEFAULTS)


def _assertion_file(item: dict[str, Any]) -> dict[str, Any]:
    return _without_defaults(item, ASSERTION_DEFAULTS)


def case_file(case: Case) -> dict[str, Any]:
    document = case_to_document(case=case)
    document.pop("source_conversation")
    document.pop("unmocked_policy")
    document["turns"] = [
        _without_defaults({**turn, "assertions": [_assertion_file(item) for item in turn["assertions"]]},
                          {"assertions": []})
        for turn in document["turns"]
    ]
    document["assertions"] = [_assertion_file(item) for item in document["assertions"]]
    if document["simulated_user"]:
        document["simulated_user"] = _without_defaults(document["simulated_user"], SIMULATED_USER_DEFAULTS)
    document["mocks"] = [
        _without_defaults(
            {**mock, "result": _result_value(mock["result"])},
            MOCK_DEFAULTS,
        )
        for mock in document["mocks"]
    ]
    return _without_defaults({key: document[key] for key in CASE_ORDER}, CASE_DEFAULTS)


def _stem(name: str, used: set[str]) -> str:
    stem, number = slugify(name) or "item", 2
    candidate = stem
    while candidate in used:
        candidate, number = f"{stem}-{number}", number + 1
    used.add(candidate)
    return candidate


def suite_directory_name(suite: Suite) -> str:
    return slugify(suite.name) or f"suite-{suite.pk}"


def files_render(*, suites: Iterable[Suite], cases: Iterable[Case] | None = None) -> dict[str, str]:
    """Every file of `suites` (or only of `cases`, with their suites) and of the agents they reach, path → text."""
    suites = list(suites)
    selected = list(cases) if cases is not None else None
    out: dict[str, str] = {}
    agents: dict[int, Agent] = {}
    waiting = [suite.agent for suite in suites]
    case_lists: dict[int, list[Case]] = {}
    for suite in suites:
        chosen = [case for case in selected if case.suite_id == suite.pk] if selected is not None else None
        case_lists[suite.pk] = chosen if chosen is not None else list(
            Case.objects.filter(suite=suite).select_related("entry_agent").prefetch_related(
                "history", "turns", "assertions", "mocks"
            ).order_by("name", "pk")
        )
        waiting += [case.entry_agent for case in case_lists[suite.pk] if case.entry_agent is not None]
    while waiting:
        agent = waiting.pop()
        if agent.pk not in agents:
            agents[agent.pk] = agent
            waiting += list(agent.sub_agents.all())
    used: set[str] = set()
    for agent in sorted(agents.values(), key=lambda item: item.name):
        stem = _stem(agent.name, used)
        if agent.runtime != "native" and not agent.instruction:
            # Its instruction is in the team's code: no instruction file to write.
            out[f"{AGENTS}/{stem}.yaml"] = yaml_text(agent_file(agent, ""))
            continue
        out[f"{AGENTS}/{stem}.yaml"] = yaml_text(agent_file(agent, f"{stem}.md"))
        out[f"{AGENTS}/{stem}.md"] = agent.instruction
    suite_names: set[str] = set()
    for suite in sorted(suites, key=lambda item: item.name):
        base = f"{SUITES}/{_stem(suite.name, suite_names)}"
        out[f"{base}/{SUITE_FILE}"] = yaml_text(suite_file(suite))
        case_names: set[str] = set()
        for case in sorted(case_lists[suite.pk], key=lambda item: item.name):
            stem = _stem(case.name, case_names)
            document = case_file(case)
            expected = [item["params"].pop("expected", None) for item in document.get("assertions", [])
                        if item["type"] == SNAPSHOT_TYPE and isinstance(item.get("params"), dict)]
            for item in document.get("assertions", []):
                if item["type"] == SNAPSHOT_TYPE and not item.get("params"):
                    item.pop("params", None)
            out[f"{base}/{CASES}/{stem}.yaml"] = yaml_text(document)
            if entries := next((entries for entries in expected if entries is not None), None):
                out[f"{base}/{SNAPSHOTS}/{stem}{SNAPSHOT_SUFFIX}"] = snapshot_text(entries)
    return out


def files_zip(files: dict[str, str]) -> bytes:
    """The files as a zip a reviewer unpacks at the root of the team's repository; fixed timestamps, so the same
    files give the same archive."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in sorted(files.items()):
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), text.encode("utf-8"))
    return buffer.getvalue()


def files_export(*, directory: Path, suites: Iterable[Suite] | None = None) -> ExportReport:
    """Write the files of `suites` (default: every suite) and their agents into `directory`. Case files (and
    snapshots) of those suites that no case wrote any more are removed: they would bring a deleted or renamed case
    back on apply."""
    chosen = list(suites) if suites is not None else list(Suite.objects.select_related("agent"))
    files = files_render(suites=chosen)
    report = ExportReport()
    for relative, text in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        report.written.append(relative)
    for cases_dir in {Path(relative).parent for relative in files if Path(relative).parent.name == CASES}:
        snapshots = sorted((directory / cases_dir.parent / SNAPSHOTS).glob(f"*{SNAPSHOT_SUFFIX}"))
        for path in [*_yaml_files(directory / cases_dir), *snapshots]:
            relative = path.relative_to(directory).as_posix()
            if relative not in files:
                path.unlink()
                report.removed.append(relative)
    return report
