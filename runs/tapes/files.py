"""Recordings as files a team commits next to its agent code, and back.

A suite's recordings live in one directory:

    recordings/order-support-demo/
        recordings.json                                        the manifest: suite, per file its case and model,
                                                               and the MCP servers' tool listings the suite used
        order-status-is-looked-up.simulated-sim-careful.jsonl  line 1 a header (suite, case, model, entries,
        …                                                      recorded_at); then one line per entry, in call order

Import checks the whole directory before it writes anything and rejects it with one message per file at fault: a file
the manifest lists that is not there (missing), a file whose header, entries or case disagree with the manifest or
the suite (mismatched), and a `.jsonl` file the manifest does not list (orphaned).

The manifest's `mcp_tools` (server → {"listed_at", "tools"}) keeps the tool listings of the MCP servers the suite's
agents declare, as cached when the recordings were exported: `agenttest run DIR` takes them, so that a replay on a
fresh machine offers the model what was recorded without starting or contacting any server.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.text import slugify

from agenthost.seams import mcp_cached_listings, mcp_listing_store
from cases.models import Case, Suite
from cases.validation.callable_functions import suite_callable_functions
from common.inputs import MAX_JSON_DEPTH, json_loads, json_text_too_deep, json_value_problem, unknown_field_message
from runs.models import Recording, Run
from runs.tapes.replay import AGENT, ANSWER, ERROR, HANG, KINDS, MAX_TOKENS, PURPOSES, request_hash

FORMAT = 1
MANIFEST = "recordings.json"


class RecordingFilesRejected(Exception):
    """The directory cannot be imported; `problems` has one message per file at fault."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(f"{len(problems)} problem(s): " + "; ".join(problems))
        self.problems = problems


@transaction.atomic
def recording_save(*, case_id: int, model: str, entries: list[dict[str, Any]], run: Run | None = None) -> Recording:
    """Keep (or replace) the recording of a case on a model. A run saves it with the case's result (result_store),
    in the transaction that checks the run's lease."""
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
    manifest: dict[str, Any] = {"format": FORMAT, "suite": suite.name, "recordings": listed}
    if listings := _mcp_listings(suite):
        manifest["mcp_tools"] = listings
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return report


def _mcp_listings(suite: Suite) -> dict[str, dict[str, Any]]:
    """The cached listing of every MCP server whose tools the suite's agents declare."""
    functions = suite_callable_functions(agent=suite.agent, suite=suite)
    servers = sorted({
        mcp["server"]
        for declarations in functions.declarations.values()
        for declaration in declarations
        if isinstance(mcp := (declaration or {}).get("mcp"), dict)
    })
    return mcp_cached_listings(servers)


def recorded_mcp_listings(*, directories: list[Path]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The MCP tool listings the manifests in `directories` keep (server → {"listed_at", "tools"}; the latest where
    two disagree), and a problem per `mcp_tools` entry that is not one. A directory without a readable manifest has
    none."""
    listings: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for directory in directories:
        path = directory / MANIFEST
        if not path.is_file():
            continue
        manifest, _ = _read_manifest(directory)
        if manifest is None:
            continue  # importing the directory names what is wrong with it
        given = manifest.get("mcp_tools", {})
        if not isinstance(given, dict):
            problems.append(f"{path}: mcp_tools must be an object of server → {{listed_at, tools}}")
            continue
        for server, listing in given.items():
            where = f"{path}: mcp_tools.{server}"
            listed_at = _listed_at(listing)
            if listed_at is None or not isinstance(listing.get("tools"), list):
                problems.append(f"{where} must be an object with listed_at (an ISO time with its offset) and tools")
                continue
            kept = listings.get(server)
            if kept is None or listed_at > kept["listed_at"]:
                listings[server] = {"listed_at": listed_at, "tools": listing["tools"], "file": str(path)}
    return listings, problems


def _listed_at(listing: Any) -> datetime | None:
    if not isinstance(listing, dict) or not isinstance(listing.get("listed_at"), str):
        return None
    try:
        moment = datetime.fromisoformat(listing["listed_at"])
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def recorded_mcp_listings_store(*, listings: dict[str, dict[str, Any]]) -> list[str]:
    """Cache each recorded listing of a server this database has none of; a problem per listing refused."""
    cached = set(mcp_cached_listings(list(listings)))
    problems = []
    for server, listing in listings.items():
        if server in cached:
            continue
        refused = mcp_listing_store(server=server, tools=listing["tools"], listed_at=listing["listed_at"])
        if refused:
            problems.append(f"{listing['file']}: mcp_tools.{server}: {refused}")
    return problems


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
    try:
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
    except (DatabaseError, ValueError) as exc:
        # The checks above should leave the database nothing to refuse; if it still does, the transaction has
        # rolled back every file, and that is said as a rejection rather than a traceback.
        raise RecordingFilesRejected([f"the database refused the recordings ({type(exc).__name__}: {exc})"]) from None
    return suite, saved


def _read_manifest(directory: Path) -> tuple[dict[str, Any] | None, list[str]]:
    path = directory / MANIFEST
    if not directory.is_dir():
        return None, [f"{directory}: not a directory"]
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, [f"{MANIFEST}: missing — the directory has no manifest; export the recordings to create one"]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [f"{MANIFEST}: unreadable ({exc})"]
    manifest = _decoded(text)
    if isinstance(manifest, _Undecodable):
        return None, [f"{MANIFEST}: unreadable ({manifest.problem})"]
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("suite"), str)
        or not isinstance(manifest.get("recordings"), list)
    ):
        return None, [f"{MANIFEST}: must be an object with format {FORMAT}, the suite's name and a recordings list"]
    if problem := _unknown(manifest, _MANIFEST_KEYS):
        return None, [f"{MANIFEST}: {problem}"]
    problems = [
        f"{MANIFEST}: recordings[{index}]: {problem}"
        for index, item in enumerate(manifest["recordings"])
        if isinstance(item, dict) and (problem := _unknown(item, _MANIFEST_ITEM_KEYS))
    ]
    if problems:
        return None, problems
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
        value = _decoded(line)
        if isinstance(value, _Undecodable):
            return f"line {number} {value.problem}"
        values.append(value)
    if not values or not isinstance(values[0], dict) or values[0].get("format") != FORMAT:
        return f"mismatched — line 1 must be the header of a format {FORMAT} recording"
    header, entries = values[0], values[1:]
    if problem := _unknown(header, _HEADER_KEYS):
        return f"line 1 (the header): {problem}"
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
    # The runner sums a case's tokens into columns that hold less than 2**31; so must the whole tape.
    tokens = sum(_entry_tokens(entry) for entry in entries)
    if tokens > MAX_TOKENS:
        return f"its entries use {tokens} tokens in all; a recording of one case holds at most {MAX_TOKENS}"
    try:
        recorded_at = datetime.fromisoformat(str(header.get("recorded_at")))
    except ValueError:
        return "mismatched — the header's recorded_at is not an ISO 8601 time"
    if timezone.is_naive(recorded_at):
        recorded_at = timezone.make_aware(recorded_at, timezone.get_default_timezone())
    return _Parsed(case=case, model=item["model"], entries=entries, recorded_at=recorded_at)


_HASH = re.compile(r"^[0-9a-f]{64}$")

# What a recording may hold, as recordings_export writes it (runs/tapes/replay.py describes an entry). Anything else is
# refused by name: the file is hand-editable, and an unknown key is a misspelling or a format this version does not
# read, never something to drop silently.
_MANIFEST_KEYS = ("format", "suite", "recordings", "mcp_tools")
_MANIFEST_ITEM_KEYS = ("case", "model", "file")
_HEADER_KEYS = ("format", "suite", "case", "model", "entries", "recorded_at")
_ENTRY_KEYS = ("purpose", "turn", "step", "agent", "scope", "model", "request_hash", "request", "kind")
_KIND_KEYS = {ANSWER: ("response", "latency_ms"), ERROR: ("error",), HANG: ()}
_REQUEST_KEYS = ("model", "temperature", "messages", "tools", "settings", "response_schema", "api")
_RESPONSE_KEYS = ("text", "tool_calls", "finish_reason", "usage", "model", "refusal", "output")
_CALL_KEYS = ("id", "name", "arguments")
_USAGE_KEYS = ("input_tokens", "output_tokens")
# Parts of the two counts above (never added to them): cached input and reasoning tokens.
_USAGE_DETAIL_KEYS = ("cached_input_tokens", "reasoning_tokens")
_ERROR_KEYS = ("code", "message", "partial_text")

# Bounds far beyond any real recording and within what replaying it stores: a model's text and a tool call's
# arguments, a label (agent, scope, model, id, name, code), a turn or step number, one call's latency (a day; a hang
# is recorded as such long before).
MAX_TEXT_CHARS = 1_000_000
MAX_LABEL_CHARS = 1_000
MAX_POSITION = 2**31 - 1
MAX_LATENCY_MS = 86_400_000
# One JSONL line: a request carries the conversation so far, which stays far below this.
MAX_LINE_CHARS = 20_000_000
# An entry wraps an agent's tool schemas (each up to MAX_JSON_DEPTH deep, agent validation) in a few levels of its
# own; twice that is still far from Python's recursion limit.
TAPE_JSON_DEPTH = 2 * MAX_JSON_DEPTH


class _Undecodable:
    def __init__(self, problem: str) -> None:
        self.problem = problem


def _decoded(text: str) -> Any:
    """One JSON document of the directory, or _Undecodable saying why not — never an exception: nesting that would
    exhaust the recursion limit is found in the text, an integer too long for int() decodes to a value
    json_value_problem refuses, and so do NaN, infinities and lone surrogates."""
    if len(text) > MAX_LINE_CHARS:
        return _Undecodable(f"is longer than {MAX_LINE_CHARS} characters")
    if json_text_too_deep(text, limit=TAPE_JSON_DEPTH):
        return _Undecodable(f"is nested more than {TAPE_JSON_DEPTH} levels deep")
    try:
        value = json_loads(text)
    except json.JSONDecodeError as exc:
        return _Undecodable(f"is not JSON ({exc.msg})")
    if (problem := json_value_problem(value, limit=TAPE_JSON_DEPTH)) is not None:
        return _Undecodable(f"cannot be stored: {problem}")
    return value


def _unknown(value: dict[str, Any], known: tuple[str, ...], where: str = "") -> str:
    extra = [key for key in value if key not in known]
    return f"{where}{unknown_field_message(extra[0], sorted(known))}" if extra else ""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}…"


def _text(value: dict[str, Any], key: str, where: str, *, limit: int, required: bool = False,
          nullable: bool = False) -> str:
    if key not in value:
        return f"{where}{key} is missing" if required else ""
    item = value[key]
    if item is None and nullable:
        return ""
    if not isinstance(item, str):
        return f"{where}{key} must be a string, got {_shown(item)}"
    if len(item) > limit:
        return f"{where}{key} is longer than {limit} characters"
    return ""


def _whole(value: dict[str, Any], key: str, where: str, *, maximum: int, required: bool = False,
           nullable: bool = False) -> str:
    if key not in value:
        return f"{where}{key} is missing" if required else ""
    item = value[key]
    if item is None and nullable:
        return ""
    if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= maximum:
        return f"{where}{key} must be a whole number from 0 to {maximum}, got {_shown(item)}"
    return ""


def _entry_problem(entry: Any) -> str:
    """What is wrong with one tape entry, or "". Every field is typed and bounded and an unknown one is refused: a
    replay serves the entry as the model's answer and stores its text and sums its numbers into the case's result,
    so whatever the runner or the database cannot take has to stop here — not crash a replay run later."""
    if not isinstance(entry, dict):
        return "must be a JSON object"
    kind = entry.get("kind")
    if kind not in KINDS:
        return f"kind must be one of {', '.join(KINDS)}, got {_shown(kind)}"
    if problem := _unknown(entry, (*_ENTRY_KEYS, *_KIND_KEYS[kind])):
        return problem
    if entry.get("purpose", AGENT) not in PURPOSES:
        return f"purpose must be one of {', '.join(PURPOSES)}, got {_shown(entry['purpose'])}"
    problem = (
        _whole(entry, "turn", "", maximum=MAX_POSITION, nullable=True)
        or _whole(entry, "step", "", maximum=MAX_POSITION, nullable=True)
        or _text(entry, "agent", "", limit=MAX_LABEL_CHARS)
        or _text(entry, "scope", "", limit=MAX_LABEL_CHARS)
        or _text(entry, "model", "", limit=MAX_LABEL_CHARS)
    )
    if problem:
        return problem
    request = entry.get("request")
    if not isinstance(request, dict) or not _HASH.match(str(entry.get("request_hash", ""))):
        return "needs the normalised request and its request_hash"
    if problem := _request_problem(request):
        return problem
    if request_hash(request) != entry["request_hash"]:
        return "mismatched — its request_hash is not the hash of its request (was the request edited?)"
    if kind == ANSWER:
        return _answer_problem(entry)
    if kind == ERROR:
        return _error_problem(entry.get("error"))
    return ""


def _request_problem(request: dict[str, Any]) -> str:
    temperature = request.get("temperature")
    if problem := _unknown(request, _REQUEST_KEYS, "request: "):
        return problem
    if problem := _text(request, "model", "request.", limit=MAX_LABEL_CHARS):
        return problem
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, int | float)):
        return f"request.temperature must be a number, got {_shown(temperature)}"
    for key in ("messages", "tools"):
        if not isinstance(request.get(key, []), list):
            return f"request.{key} must be a list"
    if not isinstance(request.get("settings", {}), dict):
        return "request.settings must be an object of chat-completions parameters"
    if request.get("api", "responses") != "responses":
        return (
            f"request.api must be 'responses' (a chat-completions request names no api), got {_shown(request['api'])}"
        )
    return ""


def _answer_problem(entry: dict[str, Any]) -> str:
    response = entry.get("response")
    if not isinstance(response, dict):
        return "an answer needs a response with text and a tool_calls list"
    latency = entry.get("latency_ms", 0)
    if isinstance(latency, bool) or not isinstance(latency, int | float) or not 0 <= latency <= MAX_LATENCY_MS:
        return f"latency_ms must be a number of milliseconds from 0 to {MAX_LATENCY_MS}, got {_shown(latency)}"
    problem = (
        _unknown(response, _RESPONSE_KEYS, "response: ")
        or _text(response, "text", "response.", limit=MAX_TEXT_CHARS, nullable=True)
        or _text(response, "finish_reason", "response.", limit=MAX_LABEL_CHARS, nullable=True)
        or _text(response, "model", "response.", limit=MAX_LABEL_CHARS, nullable=True)
        or _text(response, "refusal", "response.", limit=MAX_TEXT_CHARS, nullable=True)
    )
    if problem:
        return problem
    output = response.get("output", [])
    if not isinstance(output, list) or not all(isinstance(item, dict) for item in output):
        return "response.output must be a list of the Responses API's output items (objects)"
    calls = response.get("tool_calls")
    if not isinstance(calls if calls is not None else [], list):
        return "an answer needs a response with text and a tool_calls list"
    for index, call in enumerate(calls or []):
        where = f"response.tool_calls[{index}]"
        if not isinstance(call, dict) or not all(isinstance(call.get(k), str) for k in _CALL_KEYS):
            return "each tool call needs the strings id, name and arguments"
        problem = (
            _unknown(call, _CALL_KEYS, f"{where}: ")
            or _text(call, "id", f"{where}.", limit=MAX_LABEL_CHARS)
            or _text(call, "name", f"{where}.", limit=MAX_LABEL_CHARS)
            or _text(call, "arguments", f"{where}.", limit=MAX_TEXT_CHARS)
        )
        if problem:
            return problem
    usage = response.get("usage")
    if usage is None:
        return ""
    if not isinstance(usage, dict):
        return f"response.usage must be an object with {' and '.join(_USAGE_KEYS)}"
    return (
        _unknown(usage, _USAGE_KEYS + _USAGE_DETAIL_KEYS, "response.usage: ")
        or _whole(usage, "input_tokens", "response.usage.", maximum=MAX_TOKENS)
        or _whole(usage, "output_tokens", "response.usage.", maximum=MAX_TOKENS)
        or _whole(usage, "cached_input_tokens", "response.usage.", maximum=MAX_TOKENS)
        or _whole(usage, "reasoning_tokens", "response.usage.", maximum=MAX_TOKENS)
    )


def _error_problem(error: Any) -> str:
    if not isinstance(error, dict) or not isinstance(error.get("code"), str) or not isinstance(
        error.get("message"), str
    ):
        return "an error needs an error with the strings code and message"
    return (
        _unknown(error, _ERROR_KEYS, "error: ")
        or _text(error, "code", "error.", limit=MAX_LABEL_CHARS)
        or _text(error, "message", "error.", limit=MAX_TEXT_CHARS)
        or _text(error, "partial_text", "error.", limit=MAX_TEXT_CHARS, nullable=True)
    )


def _entry_tokens(entry: dict[str, Any]) -> int:
    """An entry's tokens, once _entry_problem has passed it."""
    usage = (entry.get("response") or {}).get("usage") or {}
    return sum(usage.get(key, 0) for key in _USAGE_KEYS)
