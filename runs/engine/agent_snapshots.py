"""What a run's agents were when it was triggered: every agent the run can reach (the suite's agent, the agents its
cases enter at, and every sub-agent any of them routes to), so a comparison can name the agent whose instruction,
model, settings, tools or code changed — most instruction edits of a multi-agent setup are to a sub-agent.

For an agent whose runtime is the team's own code the instruction is in that code: the snapshot keeps a hash of the
code its entry point comes from (the entry's top-level package, or its module), read as files and never imported —
the team's code does not run in the web process that triggers a run."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings

from agenthost.seams import agent_as_stored
from common.model_keys import split_model_key
from runs.models import Recording

NATIVE = "native"
# A package bigger than this is not a team's agent code (a vendored dependency, a virtualenv): not hashed.
MAX_CODE_FILES = 2000


def agents_snapshot(*, entry: Any, case_entry_agents: Iterable[Any] = ()) -> dict[str, dict[str, Any]]:
    """Agent name → what it was (agent_snapshot), for every agent reached from `entry` and `case_entry_agents`
    (agenthost Agent rows) through their sub-agents, the entry first."""
    snapshots: dict[str, dict[str, Any]] = {}
    pending = [entry, *case_entry_agents]
    while pending:
        agent = pending.pop(0)
        if agent is None or agent.name in snapshots:
            continue
        subs = list(agent.sub_agents.all())
        snapshots[agent.name] = agent_snapshot(agent, entry_agent_name=entry.name, sub_agents=subs)
        pending.extend(subs)
    return snapshots


def agent_snapshot(agent: Any, *, entry_agent_name: str, sub_agents: list[Any] | None = None) -> dict[str, Any]:
    loaded = agent_as_stored(agent)
    snapshot: dict[str, Any] = {
        "instruction": agent.instruction,
        "instruction_hash": hashlib.sha256(agent.instruction.encode()).hexdigest(),
        "model": agent.model_key,
        "temperature": agent.temperature,
        "max_steps": loaded.max_steps,
        "functions": loaded.tools(entry_agent_name=entry_agent_name),
        "rules": loaded.rules,
        "sub_agents": [sub.name for sub in (sub_agents if sub_agents is not None else agent.sub_agents.all())],
        "runtime": loaded.runtime,
        "entry": loaded.entry,
    }
    if loaded.runtime != NATIVE and loaded.entry:
        snapshot["code_hash"] = entry_code_hash(loaded.entry)
    return snapshot


def entry_code_hash(entry: str) -> str:
    """A hash of the files of the code `entry` ("module:attribute") comes from: its top-level package's Python files
    (so an edit to a helper module counts), or its module's file. "" when it is not found on the import path."""
    top = entry.partition(":")[0].split(".")[0]
    for directory in _search_path():
        package, module = directory / top, directory / f"{top}.py"
        if (package / "__init__.py").is_file():
            files = sorted(path for path in package.rglob("*.py") if "__pycache__" not in path.parts)
            if len(files) > MAX_CODE_FILES:
                return ""
            return _hash_files(package, files)
        if module.is_file():
            return _hash_files(directory, [module])
    return ""


def _search_path() -> list[Path]:
    # Where load_entry imports from: the installed packages, then the project's directory and the working directory.
    found = [*sys.path, getattr(settings, "AGENTTEST_PROJECT_DIR", ""), os.getcwd()]
    return [Path(entry) for entry in dict.fromkeys(item or os.getcwd() for item in found) if Path(entry).is_dir()]


def _hash_files(root: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def model_config_hash(key: str) -> str:
    """A hash of what configures the model `key` ("provider:model"): its provider's settings (never a key) and the
    model's own entry. "" for a model no provider configures (a replay of a model this machine does not have)."""
    provider, model = split_model_key(key) or ("", "")
    config = settings.AGENTTEST_PROVIDERS.get(provider)
    if not isinstance(config, dict):
        return ""
    shared = {name: value for name, value in config.items() if name not in ("api_key", "models")}
    own = [item for item in config.get("models") or [] if isinstance(item, dict) and item.get("name") == model]
    text = json.dumps({"provider": shared, "model": own}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def recording_versions(*, case_ids: list[int], model_keys: list[str]) -> dict[str, str]:
    """"<case id> <model>" → when the recording a replay serves was last written: a recording written again between
    two replays reads as changed. One query, the answers themselves not read."""
    rows = Recording.objects.filter(case_id__in=case_ids, model__in=model_keys).values_list(
        "case_id", "model", "updated_at"
    )
    return {f"{case_id} {model}": updated_at.isoformat() for case_id, model, updated_at in rows}
