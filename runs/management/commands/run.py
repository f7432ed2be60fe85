"""`agenttest run DIR`: the files of a team's repository, run on a fresh machine — no server, no worker.

The `agenttest` command gives `run` a scratch SQLite database of its own (agenttest/cli.py); this command migrates
it, applies DIR's files, imports DIR's recordings (`recordings/<suite>/`), runs each suite in this process and writes
what CI wants: `--junit`, a Markdown `--summary` (for a pull-request comment or $GITHUB_STEP_SUMMARY) and `--results`
(JSON), which a later run reads as `--baseline` to list the cases that flipped. `--mode record` writes the recordings
back into DIR. Exit codes as run_suite: 0 passed, 1 a case failed, 2 anything else (bad files included). Every option
left out — DIR too — takes its default from [run] of the project's agenttest.toml (common/project_file.py).

MCP servers: the agents' tool listings come from the recordings' manifests (`mcp_tools`), so a replay starts and
contacts no server — one that is unreachable, or whose secret is unset, does not matter to it. Record and live mode
list the servers DIR's agents declare first (a server that cannot be listed keeps its recorded listing).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from django.conf import settings
from django.core.management.base import CommandParser

from agenthost.seams import mcp_refresh
from cases.files import Change, FilesRejected, files_apply, files_mcp_servers, suite_directory_name
from cases.models import Assertion, Suite
from cases.snapshot_files import SNAPSHOT_TYPE, snapshot_write
from common.inputs import whole_number_argument
from common.project_file import CONFIG_VARIABLE, FILE_NAME
from common.scratch_database import database_migrate
from runs.engine.numbers import format_cost, format_pass_rate, models_priced
from runs.management.commands.run_suite import EXIT_ERROR, EXIT_PASSED, _Abort, _exit_code, _InlineRun
from runs.management.commands.run_suite import Command as RunSuiteCommand
from runs.models import CaseResult, Run
from runs.selectors import run_summary, run_trials
from runs.services import RunError, run_claim, run_create
from runs.tapes.files import (
    RecordingFilesRejected,
    recorded_mcp_listings,
    recorded_mcp_listings_store,
    recordings_export,
    recordings_import,
)
from runs.web.junit import run_to_junit

RECORDINGS = "recordings"
RESULTS_FORMAT = 1


class Command(RunSuiteCommand):
    help = (
        "Apply the files in DIR to a scratch database, import its recordings and run its suites in this process. "
        "Exit code: 0 passed, 1 a case failed, 2 an error (bad files, a run or case Error)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # Every option left out takes its default from [run] of the project's agenttest.toml, then the one below.
        parser.add_argument("directory", nargs="?", help="The team's directory: agents/, suites/, recordings/ "
                            "(default: [run] directory of agenttest.toml, else the directory it is in).")
        parser.add_argument("--suite", action="append", default=[], metavar="NAME", help="Only this suite (repeat).")
        parser.add_argument("--models", default="", help="Comma-separated provider:model keys; default: the agent's.")
        parser.add_argument("--cases", default="", help="Case filter: a name substring, or tag:<tag>.")
        parser.add_argument("--mode", choices=Run.Mode.values, help=f"default: {Run.Mode.LIVE}")
        parser.add_argument("--trials", type=whole_number_argument, help="default: 1")
        parser.add_argument("--junit", metavar="FILE", help="Write JUnit XML.")
        parser.add_argument("--summary", metavar="FILE", help="Write a Markdown summary.")
        parser.add_argument("--results", metavar="FILE", help="Write the results as JSON (a later --baseline).")
        parser.add_argument("--baseline", metavar="FILE", help="A previous --results file: list what flipped.")
        parser.add_argument(
            "--update-snapshots", action="store_true",
            help="Write what each process agent's program said to its case's snapshot "
            "(suites/<suite>/snapshots/<case file>.jsonl) instead of comparing; review the diff before committing it.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            options = self._with_project_defaults(options)
            code = self._run_directory(options)
        except (_Abort, RunError) as exc:
            self.stderr.write(f"error: {exc}")
            code = EXIT_ERROR
        if code != EXIT_PASSED:
            raise SystemExit(code)

    def _with_project_defaults(self, options: dict[str, Any]) -> dict[str, Any]:
        """The command's options, each one not given taken from [run] of the project file, then the built-in default."""
        defaults = settings.AGENTTEST_RUN_DEFAULTS
        if settings.AGENTTEST_PROJECT_FILE:
            self.stdout.write(f"Project file: {settings.AGENTTEST_PROJECT_FILE}")
        directory = options["directory"] or defaults.get("directory")
        if not directory:
            raise _Abort("give the directory to run (agents/, suites/, recordings/), e.g. `agenttest run .`, or write "
                         "an agenttest.toml (`agenttest init`)")
        _warn_unread_project_file(Path(directory), self.stderr)
        return {
            **options,
            "directory": str(directory),
            "suite": options["suite"] or defaults.get("suites", []),
            "models": options["models"] or ",".join(defaults.get("models", [])),
            "cases": options["cases"] or defaults.get("cases", ""),
            "mode": options["mode"] or defaults.get("mode", Run.Mode.LIVE),
            "trials": options["trials"] if options["trials"] is not None else defaults.get("trials", 1),
            **{key: options[key] or (str(defaults[key]) if key in defaults else None)
               for key in ("junit", "summary", "results")},
        }

    def _run_directory(self, options: dict[str, Any]) -> int:
        directory = Path(options["directory"])
        baseline = _read_baseline(options["baseline"]) if options["baseline"] else None
        database_migrate()
        self._mcp_listings(directory, options["mode"])
        try:
            report = files_apply(directory=directory)
        except FilesRejected as exc:
            raise _Abort(f"the files cannot be applied ({len(exc.problems)} problem(s)):\n{exc}") from None
        self.stdout.write(f"Applied {directory}: {len(report.changes)} agent(s), suite(s) and case(s).")
        names = [change.name for change in report.changes if change.kind == "suite"]
        if options["suite"]:
            missing = [name for name in options["suite"] if name not in names]
            if missing:
                known = ", ".join(names)
                raise _Abort(f"no suite named {', '.join(map(repr, missing))} in {directory}; suites: {known}")
            names = options["suite"]
        runs: list[Run] = []
        for name in names:
            suite = Suite.objects.select_related("agent").get(name=name)
            self._import_recordings(directory, suite)
            runs.append(self._run_suite(suite, options))
        if options["update_snapshots"]:
            self._write_snapshots(directory, report.changes, runs)
        if options["mode"] == Run.Mode.RECORD:
            for run in runs:
                exported = recordings_export(suite=run.suite, directory=_recordings_dir(directory, run.suite))
                self.stdout.write(f"Wrote {len(exported.written)} recording(s) to {exported.directory}.")
        results = _results(runs)
        if options["junit"]:
            Path(options["junit"]).write_text(_junit(runs), encoding="utf-8")
        if options["results"]:
            Path(options["results"]).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", "utf-8")
        if options["summary"]:
            Path(options["summary"]).write_text(_summary(runs, results, baseline), encoding="utf-8")
        return max((_exit_code(run) for run in runs), default=EXIT_PASSED)

    def _write_snapshots(self, directory: Path, changes: list[Change], runs: list[Run]) -> None:
        """Each case's snapshot from what its program said on the run's first model, first trial (a case said
        differently elsewhere is named); a case that said nothing to keep (an Error) keeps its file as it was."""
        case_files = {change.name: Path(change.file) for change in changes if change.kind == "case" and change.file}
        counts = {"new": 0, "changed": 0, "unchanged": 0}
        for run in runs:
            order = {key: index for index, key in enumerate(run.model_keys)}
            # Every case of the run that asserts a snapshot, whether or not it got as far as its assertions.
            said: dict[str, list[tuple[CaseResult, Any]]] = {
                name: [] for name in Assertion.objects.filter(
                    case_id__in=run.case_ids, type=SNAPSHOT_TYPE, turn__isnull=True
                ).values_list("case__name", flat=True)
            }
            for result in run.results.all():
                for item in result.assertions:
                    if item.get("type") == SNAPSHOT_TYPE and item.get("scope") == "case":
                        said.setdefault(result.case_name, []).append((result, item.get("actual")))
            for case_name, seen in sorted(said.items()):
                seen.sort(key=lambda pair: (order.get(pair[0].model, len(order)), pair[0].trial))
                kept = [(result, actual) for result, actual in seen if isinstance(actual, list)]
                file = case_files.get(f"{run.suite.name} / {case_name}")
                if not kept or file is None:
                    self.stderr.write(f"warning: no snapshot written for {run.suite.name} / {case_name}: its program "
                                      "said nothing to keep (see its result)")
                    continue
                first, entries = kept[0]
                others = sorted({f"{result.model} trial {result.trial + 1}" for result, actual in kept[1:]
                                 if actual != entries})
                if others:
                    self.stderr.write(
                        f"warning: {run.suite.name} / {case_name} said something else on {', '.join(others)}; the "
                        f"snapshot holds what it said on {first.model} trial {first.trial + 1}"
                    )
                path, how = snapshot_write(directory / file.parent.parent, file.stem, entries)
                counts[how] += 1
                if how != "unchanged":
                    shown = path.relative_to(directory).as_posix()
                    self.stdout.write(f"Wrote {shown} ({how}, {len(entries)} entries).")
        self.stdout.write(
            f"Snapshots: {counts['new']} new, {counts['changed']} changed, {counts['unchanged']} unchanged; review "
            "the diff before committing them."
        )

    def _mcp_listings(self, directory: Path, mode: str) -> None:
        """Cache the MCP tool listings the agents of DIR need before its files are applied (which contacts no
        server): those kept with the recordings; in record and live mode, the servers listed now."""
        folders = sorted(path for path in (directory / RECORDINGS).glob("*") if path.is_dir())
        listings, problems = recorded_mcp_listings(directories=folders)
        problems += recorded_mcp_listings_store(listings=listings)
        if problems:
            raise _Abort("the recordings' MCP tool listings cannot be used:\n" + "\n".join(problems))
        if mode == Run.Mode.REPLAY:
            return
        for server, problem in mcp_refresh(files_mcp_servers(directory=directory)).items():
            kept = " (the listing kept with the recordings is used)" if server in listings else ""
            self.stderr.write(f"warning: MCP server {server!r} was not listed: {problem}{kept}")

    def _import_recordings(self, directory: Path, suite: Suite) -> None:
        folder = _recordings_dir(directory, suite)
        if not folder.is_dir():
            return
        try:
            _, imported = recordings_import(directory=folder)
        except RecordingFilesRejected as exc:
            raise _Abort(f"{folder}: {exc}") from None
        self.stdout.write(f"Imported {len(imported)} recording(s) of {suite.name!r} from {folder}.")

    def _run_suite(self, suite: Suite, options: dict[str, Any]) -> Run:
        model_keys = [key.strip() for key in options["models"].split(",") if key.strip()] or [suite.agent.model_key]
        run = run_create(
            suite=suite, model_keys=model_keys, case_filter=options["cases"], mode=options["mode"],
            trials=options["trials"], update_snapshots=options["update_snapshots"],
        )
        worker = _InlineRun(run.pk, run_claim(run_id=run.pk))
        worker.start()
        self.stdout.write(f"Run #{run.pk} of suite {suite.name!r}: {run.total} result(s), {run.mode} mode.")
        run = self._follow(run, worker, None)
        self._report(run)
        return run


def _warn_unread_project_file(directory: Path, stderr: Any) -> None:
    """DIR's own agenttest.toml is not the one in force (settings read the one found from the working directory): say
    so, or its plugins and providers would seem to be ignored."""
    own = directory / FILE_NAME
    if own.is_file() and str(own.resolve()) != str(Path(settings.AGENTTEST_PROJECT_FILE or ".").resolve()):
        in_force = settings.AGENTTEST_PROJECT_FILE or "none"
        stderr.write(f"warning: {own} is not read (the project file in force: {in_force}); run agenttest from "
                     f"{directory}, or set {CONFIG_VARIABLE}={own}")


def _recordings_dir(directory: Path, suite: Suite) -> Path:
    return directory / RECORDINGS / suite_directory_name(suite)


def _read_baseline(path: str) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return {
            (item["suite"], item["case"], item["model"], int(item["trial"])): item for item in data["results"]
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _Abort(f"--baseline {path}: not a --results file of agenttest run ({exc})") from None


def _results(runs: list[Run]) -> dict[str, Any]:
    items = []
    for run in runs:
        for result in CaseResult.objects.filter(run=run).order_by("position", "pk"):
            items.append({
                "suite": run.suite.name, "case": result.case_name, "model": result.model, "trial": result.trial,
                "status": result.status, "reason": result.reason, "case_hash": result.case_hash,
                "duration_ms": round(result.duration_ms, 1), "tokens": result.total_tokens,
                "cost": str(result.total_cost),
            })
    return {"format": RESULTS_FORMAT, "runs": [_run_line(run) for run in runs], "results": items}


def _run_line(run: Run) -> dict[str, Any]:
    return {"suite": run.suite.name, "mode": run.mode, "status": run.status, "reason": run.reason}


def _junit(runs: list[Run]) -> str:
    if len(runs) == 1:
        return run_to_junit(runs[0])
    merged = ElementTree.Element("testsuites")
    for run in runs:
        root = ElementTree.fromstring(run_to_junit(run))
        merged.extend(root.findall("testsuite") if root.tag == "testsuites" else [root])
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(merged, encoding="unicode") + "\n"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# The most case rows the per-case pass^k table of the summary lists: a pull-request comment holds 65,536 characters.
SUMMARY_CASE_ROWS = 100


def _pass_k_lines(run: Run, priced: dict[str, bool]) -> list[str]:
    """A run of k trials: what pass@1 and pass^k mean, then per case and model how its trials went — every pair, or
    past SUMMARY_CASE_ROWS only the pairs that did not pass all k (the run page lists them all)."""
    k = run.trials
    lines = [
        f"pass@1: the share of the trials that passed (every trial counted, cancelled ones not) — the chance one run "
        f"of a case passes. pass^{k}: the share of the cases that passed all {k} of their trials. Costs include the "
        f"judge's; per trial is the cost of the {k} trials divided by {k}.",
        "",
        f"### pass^{k} per case: {_cell(run.suite.name)}",
        "",
    ]
    trials = run_trials(run=run)
    listed = trials if len(trials) <= SUMMARY_CASE_ROWS else [item for item in trials if not item.pass_all]
    if listed:
        lines += [f"| case | model | passed | pass@1 | pass^{k} | cost of {k} trials |",
                  "|---|---|---:|---:|:---:|---:|"]
    for item in listed[:SUMMARY_CASE_ROWS]:
        mark = "—" if not item.complete else ("✓" if item.pass_all else "✗")
        cost = format_cost(item.cost, priced=priced.get(item.model, False) or run.mode == Run.Mode.REPLAY)
        lines.append(
            f"| {_cell(item.case_name)} | {item.model} | {item.passed}/{item.ran} | "
            f"{format_pass_rate(item.pass_rate)} | {mark} | {cost} |"
        )
    unlisted = [
        f"{count} {what}" for count, what in (
            (len(trials) - len(listed), f"that passed all {k} trials"),
            (len(listed) - SUMMARY_CASE_ROWS, "more that did not"),
        ) if count > 0
    ]
    if unlisted:
        lines += ["", f"Not listed: {' and '.join(unlisted)} (case × model pairs); the run page lists them all."]
    lines.append("")
    return lines


def _summary(runs: list[Run], results: dict[str, Any], baseline: dict[tuple[str, str, str, int], Any] | None) -> str:
    lines: list[str] = []
    for run in runs:
        lines += [f"## agenttest: {run.suite.name} — {run.get_status_display()}", ""]
        if run.reason:
            lines += [f"{_cell(run.reason)} ({run.mode} mode)", ""]
        k = run.trials
        if k > 1:
            lines += [f"| model | pass@1 | pass^{k} | passed | failed | error | p50 ms | p95 ms | tokens | "
                      f"cost of {k} trials | per trial |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        else:
            lines += ["| model | pass rate | passed | failed | error | p50 ms | p95 ms | tokens | cost |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        summaries = run_summary(run=run)
        priced = models_priced(item.model for item in summaries)
        for item in summaries:
            p50 = "-" if item.latency_p50_ms is None else f"{item.latency_p50_ms:.0f}"
            p95 = "-" if item.latency_p95_ms is None else f"{item.latency_p95_ms:.0f}"
            rate = format_pass_rate(item.pass_rate)
            is_priced = priced[item.model] or run.mode == Run.Mode.REPLAY
            rates = f"{rate} | {format_pass_rate(item.pass_k)}" if k > 1 else rate
            cost = format_cost(item.total_cost, priced=is_priced)
            costs = f"{cost} | {format_cost(item.trial_cost, priced=is_priced)}" if k > 1 else cost
            lines.append(
                f"| {item.model} | {rates} | {item.passed} | {item.failed} | {item.errored} | {p50} | {p95} | "
                f"{item.input_tokens + item.output_tokens + item.judge_tokens} | {costs} |"
            )
        lines.append("")
        if k > 1:
            lines += _pass_k_lines(run, priced)
    failures = [item for item in results["results"] if item["status"] in ("failed", "error")]
    if failures:
        lines += ["### Failures", "", "| suite | case | model | status | reason |", "|---|---|---|---|---|"]
        lines += [
            f"| {_cell(item['suite'])} | {_cell(item['case'])} | {item['model']} | {item['status']} | "
            f"{_cell(item['reason'])[:300]} |"
            for item in failures
        ]
        lines.append("")
    if baseline is not None:
        flipped = []
        for item in results["results"]:
            before = baseline.get((item["suite"], item["case"], item["model"], item["trial"]))
            if before is not None and before.get("status") != item["status"]:
                changed = " (the case changed)" if before.get("case_hash") != item["case_hash"] else ""
                flipped.append(
                    f"| {_cell(item['suite'])} | {_cell(item['case'])}{changed} | {item['model']} | "
                    f"{before.get('status')} → {item['status']} |"
                )
        lines += ["### Flipped since the baseline", ""]
        lines += ["| suite | case | model | status |", "|---|---|---|---|", *flipped] if flipped else ["None."]
        lines.append("")
    return "\n".join(lines)
