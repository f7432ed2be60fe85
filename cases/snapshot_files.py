"""A case's snapshot in the team's files (issue 39 item 5, decision 0046): what a process agent's program said over its
protocol, normalised, kept beside the suite as `suites/<suite>/snapshots/<case file's stem>.jsonl` — one JSON object
per line, keys sorted, so a change reads as a line diff in review.

A case file asserts `snapshotMatches` with no parameters; applying the files reads the case's snapshot into the
assertion's `expected` (no file: no snapshot yet, and the assertion fails saying how to write one). `agenttest run
DIR --update-snapshots` writes the files; nothing else does. A file with no case asserting snapshotMatches beside it
is refused, as is an `expected` written into the case file itself: the snapshot has one place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cases.schema import SNAPSHOT_ENTRIES_MAX
from common.inputs import json_loads, json_value_issue

SNAPSHOTS = "snapshots"
SUFFIX = ".jsonl"
SNAPSHOT_TYPE = "snapshotMatches"
# A file past this is no transcript of a case: it is refused before it is read.
MAX_FILE_BYTES = 4 * 1024 * 1024

# (file, where, message): cases/files.py makes them its FileProblems.
Problem = tuple[str, str, str]


def snapshot_lines(entries: Iterable[dict[str, Any]]) -> list[str]:
    """Entries as a snapshot file holds them: one JSON object per line, keys sorted."""
    return [json.dumps(entry, ensure_ascii=False, sort_keys=True) for entry in entries]


def snapshot_text(entries: Iterable[dict[str, Any]]) -> str:
    return "".join(f"{line}\n" for line in snapshot_lines(entries))


def asserts_snapshot(case: dict[str, Any]) -> bool:
    return any(isinstance(item, dict) and item.get("type") == SNAPSHOT_TYPE for item in case.get("assertions") or [])


def snapshot_read(path: Path, name: str) -> tuple[list[dict[str, Any]] | None, list[Problem]]:
    """The entries of one snapshot file, or the problems that keep it from being one."""
    if path.stat().st_size > MAX_FILE_BYTES:
        return None, [(name, "", f"is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB: it is no case's snapshot")]
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return None, [(name, "", f"is not UTF-8 text ({exc.reason} at byte {exc.start})")]
    entries: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            entry = json_loads(line)
        except ValueError as exc:
            return None, [(name, where, f"is not JSON ({exc})")]
        if not isinstance(entry, dict):
            return None, [(name, where, f"holds {type(entry).__name__} JSON: each line of a snapshot is an object")]
        if (issue := json_value_issue(entry)) is not None:
            return None, [(name, where if issue[0] == "(top level)" else f"{where}: {issue[0]}", issue[1])]
        entries.append(entry)
    if len(entries) > SNAPSHOT_ENTRIES_MAX:
        return None, [(name, "", f"holds {len(entries)} entries; a snapshot holds at most {SNAPSHOT_ENTRIES_MAX}")]
    return entries, []


def snapshots_attach(
    root: Path, suite_directory: Path, cases: list[tuple[Path, dict[str, Any] | None]]
) -> list[Problem]:
    """Each case that asserts snapshotMatches gets its snapshot file's entries as the assertion's `expected` (in
    place); `cases` are every case file of the suite with its data (None where the file was refused). Problems: an
    `expected` in a case file, a snapshot file that cannot be read, one with no such case beside it."""
    problems: list[Problem] = []
    folder = suite_directory / SNAPSHOTS
    wanted: set[str] = set()
    unknown: set[str] = set()
    for path, data in cases:
        if data is None:
            # Refused already: whether it asserts a snapshot is not known, so its snapshot is no orphan.
            unknown.add(path.stem)
            continue
        if not asserts_snapshot(data):
            continue
        wanted.add(path.stem)
        case_name = path.relative_to(root).as_posix()
        snapshot = folder / f"{path.stem}{SUFFIX}"
        shown = snapshot.relative_to(root).as_posix()
        written = [index for index, item in enumerate(data["assertions"])
                   if item.get("type") == SNAPSHOT_TYPE and (item.get("params") or {}).get("expected") is not None]
        for index in written:
            problems.append((case_name, f"assertions[{index}].params.expected",
                             f"is kept in {shown} (written by `agenttest run DIR --update-snapshots`), not in the "
                             "case file"))
        if written or not snapshot.is_file():
            continue
        entries, found = snapshot_read(snapshot, shown)
        problems += found
        if entries is not None:
            for item in data["assertions"]:
                if item.get("type") == SNAPSHOT_TYPE:
                    item["params"] = {**(item.get("params") or {}), "expected": entries}
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            # A hidden file (.gitkeep, an editor's or a desktop's own) is nobody's snapshot and no mistake either.
            if path.name.startswith(".") or (path.suffix == SUFFIX and path.stem in wanted | unknown):
                continue
            cases_dir = suite_directory.relative_to(root).as_posix() + "/cases"
            problems.append((path.relative_to(root).as_posix(), "",
                             f"is no case's snapshot: {cases_dir}/{path.stem}.yaml does not assert snapshotMatches "
                             "(delete the file, or add the assertion to the case)" if path.suffix == SUFFIX else
                             f"is no snapshot: {SNAPSHOTS}/ holds only <case file>{SUFFIX} files"))
    return problems


def snapshot_write(suite_directory: Path, case_file_stem: str, entries: list[dict[str, Any]]) -> tuple[Path, str]:
    """Write one case's snapshot; (its path, "new", "changed" or "unchanged")."""
    path = suite_directory / SNAPSHOTS / f"{case_file_stem}{SUFFIX}"
    text = snapshot_text(entries)
    existed = path.is_file()
    if existed and path.read_bytes() == text.encode("utf-8"):
        return path, "unchanged"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)
    return path, "changed" if existed else "new"
