"""Recordings as files a team commits next to its agent code, and back.

A suite's recordings live in one directory:

    recordings/order-support-demo/
        recordings.json                                        the manifest: suite, and per file its case and model
        order-status-is-looked-up.simulated-sim-careful.jsonl  line 1 a header (suite, case, model, entries,
        …                                                      recorded_at); then one line per entry, in call order

Import checks the whole directory before it writes anything and rejects it with one message per file at fault: a file
the manifest lists that is not there (missing), a file whose header, entries or case disagree with the manifest or
the suite (mismatched), and a `.jsonl` file the manifest does not list (orphaned).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from cases.models import Case, Suite
from runs.models import Recording, Run
from runs.replay import ANSWER, ERROR, KINDS, request_hash

FORMAT = 1
MANIFEST = "recordings.json"


class RecordingFilesRejected(Exception):
    """The directory cannot be imported; `problems` has one message per file at fault."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(f"{len(problems)} problem(s): " + "; ".join(problems))
        self.problems = problems


def recording_save(*, case_id: int, model: str, entries: list[dict[str, Any]], run: Run | None = None) -> Recording:
    """Keep (or replace) the recording of a case on a model."""
    recording, _ = Recording.objects.update_or_create(
        case_id=case_id,
        model=model,
        defaults={"entries": entries, "run": run, "source": Recording.Source.RUN, "recorded_at": timezone.now()},
    )
    return recording


def default_directory(suite: Suite) -> Path:
    return Path("recordings") / slugify(suite.name)


@dataclass
class ExportReport:
    directory: Path
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def recordings_export(*, suite: Suite, directory: Path, models: list[str] | None = None) -> ExportReport:
    """Write the suite's recordings (optionally of some models only) and their manifest. Other `.jsonl` files in
    the directory are removed: the directory holds one suite's recordings, and a file left behind would be
    rejected as orphaned on import."""
    recordings = Recording.objects.filter(case__suite=suite).select_related("case").order_by("case__name", "model")
    if models:
        recordings = recordings.filter(model__in=models)
    directory.mkdir(parents=True, exist_ok=True)
    report = ExportReport(directory=directory)
    listed: list[dict[str, Any]] = []
    used: set[str] = set()
    for recording in recordings:
        name = _file_name(recording.case.name, recording.model, used)
        header = {
            "format": FORMAT,
            "suite": suite.name,
            "case": recording.case.name,
            "model": recording.model,
            "entries": len(recording.entries),
            "recorded_at": recording.recorded_at.isoformat(),
        }
        lines = [_json_line(header), *(_json_line(entry) for entry in recording.entries)]
        (directory / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        listed.append({"case": recording.case.name, "model": recording.model, "file": name})
        report.written.append(name)
    for path in sorted(directory.glob("*.jsonl")):
        if path.name not in used:
            path.unlink()
            report.removed.append(path.name)
    manifest = {"format": FORMAT, "suite": suite.name, "recordings": listed}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return report


def _file_name(case_name: str, model: str, used: set[str]) -> str:
    stem = f"{slugify(case_name) or 'case'}.{slugify(model.replace(':', '-')) or 'model'}"
    name, number = f"{stem}.jsonl", 2
    while name in used:
        name, number = f"{stem}-{number}.jsonl", number + 1
    used.add(name)
    return name


def _json_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass
class _Parsed:
    case: Case
    model: str
    entries: list[dict[str, Any]]
    recorded_at: datetime


def recordings_import(*, directory: Path) -> tuple[Suite, list[Recording]]:
    """Import a directory written by recordings_export: all of it, or — when any file is at fault — nothing, with
    RecordingFilesRejected naming each file and what is wrong with it."""
    manifest, problems = _read_manifest(directory)
    if manifest is None:
        raise RecordingFilesRejected(problems)
    suite = Suite.objects.filter(name=manifest["suite"]).first()
    if suite is None:
        raise RecordingFilesRejected(
            [f"{MANIFEST}: there is no suite named {manifest['suite']!r}; create it (and its cases) first"]
        )
    cases = {case.name: case for case in suite.cases.all()}
    parsed: list[_Parsed] = []
    seen_pairs: set[tuple[str, str]] = set()
    listed: set[str] = set()
    for index, item in enumerate(manifest["recordings"]):
        if not isinstance(item, dict) or not all(isinstance(item.get(key), str) for key in ("case", "model", "file")):
            problems.append(f"{MANIFEST}: recordings[{index}] must have the strings case, model and file")
            continue
        name = item["file"]
        if Path(name).name != name or not name.endswith(".jsonl"):
            problems.append(f"{MANIFEST}: recordings[{index}] file {name!r} must name a .jsonl file in the directory")
            continue
        listed.add(name)
        pair = (item["case"], item["model"])
        if pair in seen_pairs:
            problems.append(f"{name}: mismatched — case {pair[0]!r} on {pair[1]} is listed more than once")
            continue
        seen_pairs.add(pair)
        result = _read_recording(directory / name, item, suite, cases)
        if isinstance(result, str):
            problems.append(f"{name}: {result}")
        else:
            parsed.append(result)
    problems.extend(
        f"{path.name}: orphaned — {MANIFEST} does not list it; delete it or export the recordings again"
        for path in sorted(directory.glob("*.jsonl"))
        if path.name not in listed
    )
    if problems:
        raise RecordingFilesRejected(problems)
    with transaction.atomic():
        saved = [
            Recording.objects.update_or_create(
                case=item.case,
                model=item.model,
                defaults={
                    "entries": item.entries,
                    "run": None,
                    "source": Recording.Source.IMPORT,
                    "recorded_at": item.recorded_at,
                },
            )[0]
            for item in parsed
        ]
    return suite, saved


def _read_manifest(directory: Path) -> tuple[dict[str, Any] | None, list[str]]:
    path = directory / MANIFEST
    if not directory.is_dir():
        return None, [f"{directory}: not a directory"]
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, [f"{MANIFEST}: missing — the directory has no manifest; export the recordings to create one"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, [f"{MANIFEST}: unreadable ({exc})"]
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("suite"), str)
        or not isinstance(manifest.get("recordings"), list)
    ):
        return None, [f"{MANIFEST}: must be an object with format {FORMAT}, the suite's name and a recordings list"]
    return manifest, []


def _read_recording(path: Path, item: dict[str, Any], suite: Suite, cases: dict[str, Case]) -> _Parsed | str:
    """The file's recording, or what is wrong with it."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return f"missing — {MANIFEST} lists it for case {item['case']!r} on {item['model']}"
    except (OSError, UnicodeDecodeError) as exc:
        return f"unreadable ({exc})"
    values = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except json.JSONDecodeError as exc:
            return f"line {number} is not JSON ({exc.msg})"
    if not values or not isinstance(values[0], dict) or values[0].get("format") != FORMAT:
        return f"mismatched — line 1 must be the header of a format {FORMAT} recording"
    header, entries = values[0], values[1:]
    said = (header.get("suite"), header.get("case"), header.get("model"))
    if said != (suite.name, item["case"], item["model"]):
        return (
            f"mismatched — {MANIFEST} lists it for case {item['case']!r} on {item['model']} of suite "
            f"{suite.name!r}, but its header says case {said[1]!r} on {said[2]} of suite {said[0]!r}"
        )
    if header.get("entries") != len(entries):
        return f"mismatched — its header says {header.get('entries')!r} entries, but it has {len(entries)}"
    case = cases.get(item["case"])
    if case is None:
        return f"mismatched — suite {suite.name!r} has no case named {item['case']!r}"
    for number, entry in enumerate(entries, start=1):
        problem = _entry_problem(entry)
        if problem:
            return f"entry {number}: {problem}"
    try:
        recorded_at = datetime.fromisoformat(str(header.get("recorded_at")))
    except ValueError:
        return "mismatched — the header's recorded_at is not an ISO 8601 time"
    if timezone.is_naive(recorded_at):
        recorded_at = timezone.make_aware(recorded_at, timezone.get_default_timezone())
    return _Parsed(case=case, model=item["model"], entries=entries, recorded_at=recorded_at)


_HASH = re.compile(r"^[0-9a-f]{64}$")


def _entry_problem(entry: Any) -> str:
    if not isinstance(entry, dict):
        return "must be a JSON object"
    kind = entry.get("kind")
    if kind not in KINDS:
        return f"kind must be one of {', '.join(KINDS)}, got {kind!r}"
    if not isinstance(entry.get("request"), dict) or not _HASH.match(str(entry.get("request_hash", ""))):
        return "needs the normalised request and its request_hash"
    if request_hash(entry["request"]) != entry["request_hash"]:
        return "mismatched — its request_hash is not the hash of its request (was the request edited?)"
    if kind == ANSWER:
        response = entry.get("response")
        calls = response.get("tool_calls") if isinstance(response, dict) else None
        if not isinstance(response, dict) or not isinstance(response.get("text", ""), str) or not isinstance(
            calls or [], list
        ):
            return "an answer needs a response with text and a tool_calls list"
        for call in calls or []:
            if not isinstance(call, dict) or not all(isinstance(call.get(k), str) for k in ("id", "name", "arguments")):
                return "each tool call needs the strings id, name and arguments"
    if kind == ERROR:
        error = entry.get("error")
        if not isinstance(error, dict) or not isinstance(error.get("code"), str) or not isinstance(
            error.get("message"), str
        ):
            return "an error needs an error with the strings code and message"
    return ""
