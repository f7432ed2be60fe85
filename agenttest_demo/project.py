"""The demo's agents and suites are files, as a team's are: `project/` holds them in the format `agenttest export`
writes and `agenttest apply` reads (agents/*.yaml, each with its instruction in the .md file beside it,
suites/*/suite.yaml and suites/*/cases/*.yaml). No agent, suite or case of the demo is written in Python.

The demo applies that directory through `files_apply`, the service behind `agenttest apply`, from the public plugin
module, with the one difference setting a deployment up needs: what exists is left as it is. `files_apply` makes the
database match the files, so the demo first asks it for a plan (a dry run, which changes nothing) and then applies
only the files of the agents and suites the plan would create. An admin's edits to a demo agent or suite therefore
survive a re-run of `demo_setup`; `agenttest apply agenttest_demo/project` would put the files back over them.

Without the harness apps (a host-only deployment) there is no `apply`: the agent files are read here and the missing
agents created (`demo_agents_read`), from the few keys the demo's agent files use; a key it does not know stops it.

To change a demo agent or case, edit its file (or change it in the admin and `agenttest export` into this
directory: the files are exactly what export writes), then record the demo's recordings again
(docs/record-replay.md): they are keyed by case names and replay only what the cases and agents ask.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from django.apps import apps
from django.db import transaction

from agenttest.plugin import Agent, split_model_key

PROJECT = Path(__file__).resolve().parent / "project"
AGENTS, SUITES = "agents", "suites"
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Ensured:
    """An agent or a suite of the project directory: its kind ("agent" or "suite"), its name, the file that
    defines it (relative to the directory) and whether this call created it (else it existed and was left as it is)."""

    kind: str
    name: str
    file: str
    created: bool


def harness_installed() -> bool:
    """Whether the harness's apps are installed: without them there are no suites and no `files_apply`."""
    return apps.is_installed("cases") and apps.is_installed("runs")


@transaction.atomic
def demo_project_ensure(*, suites: Collection[str] | None = None, directory: Path | None = None) -> list[Ensured]:
    """Create, by applying their files, the agents of `directory` (the demo's project directory unless given) and the
    suites of it named in `suites` (every suite when None, none when empty) that do not exist yet; leave those that
    exist as they are. Returns every agent and chosen suite of the files, in the order `apply` reports them. Raises
    the plugin module's FilesRejected, naming each problem, when the files cannot be applied: then nothing was
    changed. Needs the harness apps."""
    from agenttest.plugin import files_apply

    directory = PROJECT if directory is None else directory
    with tempfile.TemporaryDirectory(prefix="agenttest-demo-") as scratch:
        planned = directory
        if suites is not None and not suites:
            # Agents only: the plan need not check every case.
            agent_files = [path.relative_to(directory).as_posix() for path in sorted((directory / AGENTS).iterdir())
                           if path.name.endswith(YAML_SUFFIXES)]
            planned = _copy(directory, Path(scratch) / "plan", agent_files)
        plan = files_apply(directory=planned, dry_run=True)
        found = [
            Ensured(kind=change.kind, name=change.name, file=change.file, created=change.action == "created")
            for change in plan.changes
            if change.kind == "agent" or (change.kind == "suite" and (suites is None or change.name in suites))
        ]
        missing = [item.file for item in found if item.created]
        if missing:
            files_apply(directory=_copy(directory, Path(scratch) / "apply", missing))
    return found


def _copy(directory: Path, scratch: Path, files: list[str]) -> Path:
    """`scratch`, holding only `files` of `directory` and what they need beside them: the agents' instruction files,
    a suite's whole folder (its cases)."""
    for relative in files:
        source = directory / relative
        if source.parent.name == AGENTS:
            if not (scratch / AGENTS).exists():
                # The instruction files; of the agent files, only those asked for.
                shutil.copytree(source.parent, scratch / AGENTS, ignore=lambda _, names: [
                    name for name in names if name.endswith(YAML_SUFFIXES)
                ])
            shutil.copyfile(source, scratch / AGENTS / source.name)
        else:
            shutil.copytree(source.parent, scratch / SUITES / source.parent.name)
    return scratch


# --- A host-only deployment: no harness, so no `files_apply` ------------------------------------------------------

# The keys of the demo's agent files this reading knows; `apply` reads every other key of the format.
_READ_KEYS = {"name", "description", "model", "temperature", "instruction_file", "functions", "sub_agents"}


def _yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: an agent file holds a mapping of keys")
    return data


@transaction.atomic
def demo_agents_read(directory: Path | None = None) -> list[tuple[Agent, bool]]:
    """Create the agents of `directory`'s agent files that do not exist yet, as `apply` would create them; those
    that exist are left as they are."""
    directory = PROJECT if directory is None else directory
    results: list[tuple[Agent, bool]] = []
    linked: list[tuple[Agent, list[str]]] = []
    for path in sorted((directory / AGENTS).glob("*.yaml")):
        data = _yaml(path)
        unknown = sorted(set(data) - _READ_KEYS)
        if unknown:
            raise ValueError(f"{path}: without the harness the demo reads no {', '.join(unknown)} of an agent file")
        name = str(data["name"]).strip()
        existing = Agent.objects.filter(name=name).first()
        if existing is not None:
            results.append((existing, False))
            continue
        key = split_model_key(data.get("model"))
        if key is None:
            raise ValueError(f"{path}: model: {data.get('model')!r} is not a model key (provider:model)")
        provider, model = key
        # newline="": the instruction is exactly the file's text, as `apply` reads it.
        with (path.parent / data["instruction_file"]).open(encoding="utf-8", newline="") as handle:
            instruction = handle.read()
        agent = Agent.objects.create(
            name=name,
            description=data.get("description", ""),
            instruction=instruction,
            provider=provider,
            model=model,
            temperature=float(data.get("temperature", 0.0)),
            functions=[{"name": item} if isinstance(item, str) else item for item in data.get("functions", [])],
        )
        results.append((agent, True))
        linked.append((agent, [str(item).strip() for item in data.get("sub_agents", [])]))
    # Sub-agents may come in any order of the files: every agent exists before any is linked.
    for agent, sub_agents in linked:
        agent.sub_agents.set(Agent.objects.filter(name__in=sub_agents))
    return results
