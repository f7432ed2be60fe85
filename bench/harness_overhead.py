"""Harness overhead: what running a case through agenttest costs on top of the model calls it makes.

    python bench/harness_overhead.py --cases 200 [--turns 3] [--repeat 3] [--database-url postgres://…]
                                     [--profile] [--rss-series 200,1000] [--stub subprocess|in-process]

Both sides talk to the same local OpenAI-compatible stub, which answers every user turn with a tool call
`lookup_order({"order_id": "<n>"})` and every tool result with a short text. The baseline is a plain openai-SDK loop
(no Django) making exactly the requests the harness makes; the harness is `run_create` + `run_execute` in-process,
results persisted as in a real run. Overhead = harness − baseline, per case. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import logging
import os
import pstats
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as a script, Python puts bench/ first on the path; the project packages live one level up.
    sys.path.insert(0, str(ROOT))

PROVIDER = "bench"
MODEL = "bench-model"
MODEL_KEY = f"{PROVIDER}:{MODEL}"
TOOL = "lookup_order"
TOOL_RESULT = '{"status": "shipped", "carrier": "DHL"}'
CUSTOMER = "Ana"
INSTRUCTION = "You help {{ customer }} with their orders. Look an order up before you answer."
TOOL_DECLARATION = {
    "name": TOOL,
    "description": "Look an order up by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
}
# The overhead per case, as a share of the floor's (the bare SDK loop's) own time per case.
TARGET_FLOOR_RATIO = 0.6
RESULT_PREFIX = "RESULT "
_ORDER_ID = re.compile(r"\d+")
_WRITES = frozenset({"INSERT", "UPDATE", "DELETE"})
_STATEMENT = re.compile(r'^\s*(?:(UPDATE)|(\w+)\b.*?\b(?:FROM|INTO))\s+"?(\w+)"?', re.IGNORECASE | re.DOTALL)


class BenchError(Exception):
    """The benchmark could not measure what it claims to (a failed run, a stub that did not start)."""


# --- The model side -----------------------------------------------------------------------------------------------


def user_message(case_index: int, turn: int) -> str:
    return f"Where is my order {case_index * 10 + turn + 1000}?"


def stub_reply(body: dict[str, Any]) -> Any:
    """Per user turn: first a lookup_order call for the order the user names, then, after its result, a short text."""
    from agenthost.llm.scripted import Answer, Call

    messages = body.get("messages") or []
    user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    found = _ORDER_ID.search(str(user.get("content") or ""))
    order_id = found.group(0) if found else "0"
    if messages and messages[-1].get("role") == "tool":
        return Answer(text=f"Order {order_id} has shipped.")
    return Answer(tool_calls=[Call(TOOL, {"order_id": order_id})])


def serve_stub() -> int:
    """The stub in a process of its own (so its CPU does not share the GIL with the measured loop). It prints its
    base URL, then serves until its stdin closes — which also happens when the benchmark dies."""
    from agenthost.testing.openai_stub import OpenAIStub

    stub = OpenAIStub(models=(MODEL,), record=False)
    stub.respond_with(stub_reply)
    stub.start()
    print(stub.base_url, flush=True)
    sys.stdin.read()
    stub.stop()
    return 0


@contextlib.contextmanager
def stub_server(mode: str, url: str) -> Iterator[tuple[str, str]]:
    """(base URL, how it runs) of the stub both sides talk to."""
    if url:
        yield url, "external (given with --stub-url)"
        return
    if mode == "in-process":
        from agenthost.testing.openai_stub import OpenAIStub

        stub = OpenAIStub(models=(MODEL,), record=False)
        stub.respond_with(stub_reply)
        with stub:
            yield stub.base_url, "in-process (its threads share the GIL with the measured loop)"
        return
    with stub_subprocess(Path(__file__)) as served:
        yield served


@contextlib.contextmanager
def stub_subprocess(script: Path) -> Iterator[tuple[str, str]]:
    """(base URL, how it runs) of the stub that `script --serve-stub` serves in a child process of its own, so its CPU
    does not share the GIL with the loop being measured."""
    process = subprocess.Popen(
        [sys.executable, str(script.resolve()), "--serve-stub"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        match = re.search(r"http://\S+", line)
        if not match:
            raise BenchError(f"the stub subprocess did not print its URL (got {line!r})")
        yield match.group(0), f"subprocess pid {process.pid}"
    finally:
        if process.stdin:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.terminate()
            process.wait()


# --- Database and Django ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def scratch_database(url: str, *, purpose: str = "bench") -> Iterator[tuple[str, str, str]]:
    """(DATABASE_URL, var dir, description) of a database created for one command and removed after it; shared by
    the commands in bench/, whose `purpose` names the temporary directory and database."""
    directory = tempfile.mkdtemp(prefix=f"agenttest-{purpose}-")
    try:
        if not url:
            yield f"sqlite:///{directory}/{purpose}.sqlite3", directory, "SQLite (temporary file)"
            return
        parts = urlsplit(url)
        if parts.scheme not in ("postgres", "postgresql"):
            raise BenchError(f"--database-url must be a postgres:// URL (SQLite is the default), got {parts.scheme}://")
        import psycopg

        name = f"agenttest_{purpose}_{os.getpid()}"
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield urlunsplit(parts._replace(path=f"/{name}")), directory, f"PostgreSQL (scratch database {name})"
        finally:
            _close_django_connections()
            with psycopg.connect(url, autocommit=True) as admin:
                # FORCE: a case thread that timed out may still hold a connection.
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _close_django_connections() -> None:
    from django.conf import settings

    if settings.configured:
        from django.db import connections

        connections.close_all()


def setup_django(database_url: str, var_dir: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "agenttest.settings"
    os.environ["AGENTTEST_DEBUG"] = "1"
    os.environ["DATABASE_URL"] = database_url
    os.environ["AGENTTEST_VAR_DIR"] = var_dir
    # The benchmark configures its own provider and needs every harness app, whatever the shell says.
    os.environ.pop("AGENTTEST_PROVIDERS_FILE", None)
    os.environ.pop("AGENTTEST_HARNESS_APPS", None)
    import django

    django.setup()
    # The openai SDK sends through httpx2, whose INFO line per request settings.LOGGING does not quiet (it names
    # only "httpx"); a line on stderr per request would be timed on both sides and bury the report.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    # Measured as a production worker runs (AGENTTEST_DEBUG off): with DEBUG on, Django keeps the last 9000 queries
    # of every connection, which costs time per query and memory that grows with the suite up to that cap.
    settings.DEBUG = False


def configure_provider(base_url: str) -> None:
    from django.conf import settings

    from agenthost.llm.registry import clear_cache
    from common.provider_config import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, validate_providers

    providers = {
        PROVIDER: {
            "kind": "openai",
            "base_url": base_url,
            "api_key_env": "",
            "timeout": DEFAULT_TIMEOUT,
            "max_retries": DEFAULT_MAX_RETRIES,
            "models": [{"name": MODEL, "input_price": 0.15, "output_price": 0.6, "label": "Benchmark stub"}],
        }
    }
    problems = validate_providers(providers)
    if problems:
        raise BenchError("the benchmark's provider configuration is invalid: " + "; ".join(problems))
    settings.AGENTTEST_PROVIDERS = providers
    clear_cache()


def case_document(index: int, turns: int) -> dict[str, Any]:
    return {
        "name": f"bench case {index:05d}",
        "initial_state": {"customer": CUSTOMER},
        "turns": [
            {
                "user_message": user_message(index, turn),
                "assertions": [{"type": "toolCalled", "params": {"function": TOOL}}],
            }
            for turn in range(turns)
        ],
        "mocks": [{"function_name": TOOL, "result": TOOL_RESULT, "state_writes": {"order_status": "shipped"}}],
        "assertions": [
            {"type": "stateEquals", "params": {"key": "order_status", "value": "shipped"}},
            {"type": "outputContains", "params": {"text": "has shipped"}},
        ],
    }


def create_suite(cases: int, turns: int) -> Any:
    from agenthost.models import Agent
    from cases.models import Suite
    from cases.services import case_create

    agent = Agent.objects.create(
        name="bench-agent", instruction=INSTRUCTION, provider=PROVIDER, model=MODEL, functions=[TOOL_DECLARATION]
    )
    suite = Suite.objects.create(name="bench", agent=agent)
    for index in range(cases):
        case_create(suite=suite, document=case_document(index, turns))
    return suite


# --- The two sides ------------------------------------------------------------------------------------------------


def run_baseline(base_url: str, cases: int, turns: int, *, direct: bool = False) -> float:
    """Seconds for the same requests with the bare SDK: per turn, request → tool call → tool result → request → text.
    `direct` posts them as the harness does (the SDK's `post`, without `chat.completions.create`'s parameter
    transform), to show what of the difference is the harness and what is the transform it skips."""
    import openai
    from openai.types.chat import ChatCompletion

    from common.provider_config import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT

    client = openai.OpenAI(
        base_url=base_url, api_key="not-needed", timeout=DEFAULT_TIMEOUT, max_retries=DEFAULT_MAX_RETRIES
    )
    tools = [{"type": "function", "function": TOOL_DECLARATION}]
    system = {"role": "system", "content": INSTRUCTION.replace("{{ customer }}", CUSTOMER)}

    def complete(messages: list[dict[str, Any]]) -> Any:
        params = {"model": MODEL, "messages": messages, "tools": tools, "temperature": 0.0}
        if direct:
            return client.post("/chat/completions", cast_to=ChatCompletion, body=params)
        return client.chat.completions.create(**params)

    started = time.perf_counter()
    for index in range(cases):
        messages: list[dict[str, Any]] = [system]
        for turn in range(turns):
            messages.append({"role": "user", "content": user_message(index, turn)})
            first = complete(messages)
            asked = first.choices[0].message
            calls = [
                {"id": call.id, "type": "function",
                 "function": {"name": call.function.name, "arguments": call.function.arguments}}
                for call in asked.tool_calls or []
            ]
            if not calls:
                raise BenchError(f"baseline: the stub answered turn {turn} of case {index} without a tool call")
            # A string beside tool calls, as agenttest sends: every OpenAI-compatible server (llama.cpp too) takes it.
            messages.append({"role": "assistant", "content": asked.content or "", "tool_calls": calls})
            messages.extend({"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT} for call in calls)
            second = complete(messages)
            messages.append({"role": "assistant", "content": second.choices[0].message.content or ""})
    elapsed = time.perf_counter() - started
    client.close()
    return elapsed


@dataclass
class HarnessPass:
    seconds: float
    case_ms: float  # mean time inside execute_case (its thread, the canary, turns, assertions)
    model_ms: float  # mean provider-measured time of the model calls (SDK + HTTP + stub)


def run_harness(suite: Any, cases: int) -> HarnessPass:
    from django.db.models import Avg

    from runs.models import CaseResult, Run
    from runs.services import run_create, run_execute

    started = time.perf_counter()
    run = run_create(suite=suite, model_keys=[MODEL_KEY])
    finished = run_execute(run_id=run.pk)
    seconds = time.perf_counter() - started
    if finished is None or finished.status != Run.Status.PASSED or finished.passed != cases:
        failure = CaseResult.objects.filter(run=run).exclude(status=CaseResult.Status.PASSED).first()
        detail = f"; first: {failure.case_name}: {failure.reason}" if failure else ""
        status = finished.status if finished else "not executed"
        raise BenchError(f"the harness run did not pass ({status}: {finished.reason if finished else ''}){detail}")
    means = CaseResult.objects.filter(run=run).aggregate(case=Avg("duration_ms"), model=Avg("model_latency_ms"))
    return HarnessPass(seconds=seconds, case_ms=means["case"] or 0.0, model_ms=means["model"] or 0.0)


# --- Measuring ----------------------------------------------------------------------------------------------------


class QueryCounter:
    """Counts every SQL statement and every commit on every thread: cases run on a thread of the runner's with its own
    connection, so each connection is instrumented as it is opened (and the calling thread's current one at once).

    A commit is an explicit one (the end of an outermost `transaction.atomic`) or a write run outside any atomic
    block, which the database commits by itself. Each is a durable flush (fsync) on PostgreSQL and on SQLite."""

    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()
        # Seconds spent in each statement and in commits (wall time, waits for a lock included).
        self.seconds: Counter[str] = Counter()
        self.connections = 0
        self.commits = 0
        self._instrumented: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        autocommitted = sql.lstrip()[:6].upper() in _WRITES and not context["connection"].in_atomic_block
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            elapsed = time.perf_counter() - started
            with self._lock:
                self.statements[sql] += 1
                self.seconds[sql] += elapsed
                self.commits += autocommitted

    def _on_connection_created(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        with self._lock:
            self.connections += 1
        self._instrument(connection)

    def _instrument(self, connection: Any) -> None:
        if self in connection.execute_wrappers:
            return
        connection.execute_wrappers.append(self)
        commit = connection.commit

        def counted_commit() -> None:
            started = time.perf_counter()
            try:
                commit()
            finally:
                elapsed = time.perf_counter() - started
                with self._lock:
                    self.commits += 1
                    self.seconds["COMMIT"] += elapsed

        connection.commit = counted_commit
        with self._lock:
            self._instrumented.append(connection)

    @contextlib.contextmanager
    def capture(self) -> Iterator[QueryCounter]:
        from django.db import DEFAULT_DB_ALIAS, connections
        from django.db.backends.signals import connection_created

        connection_created.connect(self._on_connection_created, weak=False, dispatch_uid="bench-query-counter")
        self._instrument(connections[DEFAULT_DB_ALIAS])
        try:
            yield self
        finally:
            connection_created.disconnect(dispatch_uid="bench-query-counter")
            # The timed passes run uninstrumented.
            for instrumented in self._instrumented:
                instrumented.execute_wrappers.remove(self)
                del instrumented.commit
            self._instrumented.clear()

    @property
    def total(self) -> int:
        return sum(self.statements.values())

    def by_kind(self) -> list[tuple[str, int, float]]:
        """(verb and table, count, seconds), most frequent first; commits last, as "COMMIT"."""
        kinds: Counter[str] = Counter()
        seconds: Counter[str] = Counter()
        for sql, count in self.statements.items():
            match = _STATEMENT.match(sql)
            if match:
                kind = f"{(match.group(1) or match.group(2)).upper()} {match.group(3)}"
            else:
                kind = sql.split(None, 1)[0].upper()
            kinds[kind] += count
            seconds[kind] += self.seconds[sql]
        rows = [(kind, count, seconds[kind]) for kind, count in kinds.most_common()]
        return [*rows, ("COMMIT", self.commits, self.seconds["COMMIT"])]


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


@dataclass
class Figures:
    cases: int
    turns: int
    baseline_s: list[float] = field(default_factory=list)
    direct_s: list[float] = field(default_factory=list)
    passes: list[HarnessPass] = field(default_factory=list)
    queries: int = 0
    commits: int = 0
    connections: int = 0
    statements: list[tuple[str, int, float]] = field(default_factory=list)

    @property
    def harness_s(self) -> list[float]:
        return [harness.seconds for harness in self.passes]

    def per_case_ms(self, seconds: list[float]) -> list[float]:
        return [s * 1000 / self.cases for s in seconds]

    @property
    def harness_ms(self) -> float:
        return statistics.median(self.per_case_ms(self.harness_s))

    @property
    def baseline_ms(self) -> float:
        return statistics.median(self.per_case_ms(self.baseline_s))

    @property
    def direct_ms(self) -> float:
        return statistics.median(self.per_case_ms(self.direct_s))


def measure(suite: Any, base_url: str, cases: int, turns: int, repeat: int) -> Figures:
    """A counted warm-up pass of each side (imports, template compilation, connection pools), then `repeat`
    interleaved timed passes — the machine is shared, so each side sees the same noise."""
    figures = Figures(cases=cases, turns=turns)
    run_baseline(base_url, cases, turns)
    run_baseline(base_url, cases, turns, direct=True)
    counter = QueryCounter()
    with counter.capture():
        run_harness(suite, cases)
    figures.queries, figures.commits, figures.connections = counter.total, counter.commits, counter.connections
    figures.statements = counter.by_kind()
    if figures.queries == 0:
        raise BenchError("the SQL counter saw no statement: it is not wired to the runner's connections")
    for _ in range(repeat):
        figures.baseline_s.append(run_baseline(base_url, cases, turns))
        figures.direct_s.append(run_baseline(base_url, cases, turns, direct=True))
        figures.passes.append(run_harness(suite, cases))
    return figures


def profile_harness(suite: Any, cases: int, top: int = 25) -> str:
    """One more harness pass under cProfile. Cases run on the runner's worker thread(s), which a profiler enabled on
    this thread never sees, so every thread started during the pass gets its own profiler and the stats are merged."""
    profilers: list[cProfile.Profile] = []
    original_run = threading.Thread.run

    def profiled_run(thread: threading.Thread) -> None:
        profiler = cProfile.Profile()
        profilers.append(profiler)
        profiler.enable()
        try:
            original_run(thread)
        finally:
            profiler.disable()

    main = cProfile.Profile()
    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    try:
        main.enable()
        run_harness(suite, cases)
        main.disable()
    finally:
        threading.Thread.run = original_run  # type: ignore[method-assign]
    out = io.StringIO()
    stats = pstats.Stats(main, stream=out)
    for profiler in profilers:
        stats.add(profiler)
    out.write(f"cProfile of one harness pass ({cases} cases; the main thread and {len(profilers)} thread(s) it "
              "started, merged), wall-clock:\nthe main thread's execute_case includes waiting for the case thread.\n")
    stats.sort_stats("cumulative").print_stats(top)
    out.write(f"Top {top} cumulative in agenttest's own code:\n")
    stats.print_stats(re.escape(str(ROOT)) + r"/(agenthost|cases|runs|recording)/", top * 3)
    out.write("Top 15 by own time (tottime):\n")
    stats.sort_stats("tottime").print_stats(int(os.environ.get("BENCH_OWN_TOP", "15")))
    return out.getvalue()


# --- Output -------------------------------------------------------------------------------------------------------


def _row(label: str, value: str) -> str:
    return f"{label:<34}{value}"


def format_report(figures: Figures, *, database: str, stub: str, rss_mb: float) -> str:
    cases, turns = figures.cases, figures.turns
    overhead = figures.harness_ms - figures.baseline_ms
    ratio = overhead / figures.baseline_ms if figures.baseline_ms else float("inf")
    verdict = "within target" if ratio <= TARGET_FLOOR_RATIO else "OVER target"
    runs = len(figures.harness_s)
    best = (min(figures.harness_s) - min(figures.baseline_s)) * 1000 / cases
    writes = sum(count for kind, count, _ in figures.statements if kind.split()[0] in ("INSERT", "UPDATE", "DELETE"))
    middle = sorted(figures.passes, key=lambda p: p.seconds)[len(figures.passes) // 2] if figures.passes else None
    lines = [
        f"agenttest harness overhead: {cases} cases x {turns} turns ({2 * turns} model requests per case), "
        f"{runs} timed pass(es) per side, medians",
        _row("database", database),
        _row("stub", stub),
        _row("machine load", f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (other work skews "
                             "timings)"),
        _row("cases", str(cases)),
        _row("turns per case", str(turns)),
        _row("ms per case (harness)", f"{figures.harness_ms:.2f}   passes: " + _series(figures, figures.harness_s)),
        _row("ms per case (baseline)", f"{figures.baseline_ms:.2f}   passes: " + _series(figures, figures.baseline_s)),
        _row("floor ms per case", f"{figures.baseline_ms:.2f}   (the bare openai-SDK loop: the baseline's median)"),
        _row("overhead ms per case", f"{overhead:.2f}   ({ratio:.2f}x the floor; target <= {TARGET_FLOOR_RATIO:g}x: "
                                     f"{verdict})"),
        _row("overhead ms per case, best passes", f"{best:.2f}   (fastest harness pass - fastest baseline pass)"),
        _row("ms per case (direct SDK post)",
             f"{figures.direct_ms:.2f}   passes: " + _series(figures, figures.direct_s)),
        _row("  harness over it", f"{figures.harness_ms - figures.direct_ms:.2f}   (the bare loop sending its requests "
                                  "as the harness does, without chat.completions.create's parameter transform: what "
                                  "the harness adds besides skipping it)"),
        _row("SQL queries per case", f"{figures.queries / cases:.1f}   ({figures.queries} in the counted pass)"),
        _row("  of which writes", f"{writes / cases:.1f}   (INSERT/UPDATE/DELETE)"),
        _row("commits per case", f"{figures.commits / cases:.1f}   (on PostgreSQL only the result's waits for its "
                                 "log flush: runs/engine/durability.py)"),
        _row("DB connections opened per case", f"{figures.connections / cases:.2f}"),
        _row("peak RSS", f"{rss_mb:.1f} MB"),
    ]
    if middle is not None:
        per_case = middle.seconds * 1000 / cases
        lines += [
            "where a harness case's time goes (the median timed pass, mean per case):",
            _row("  model calls (SDK+HTTP+stub)", f"{middle.model_ms:.2f} ms"),
            _row("  rest of execute_case", f"{middle.case_ms - middle.model_ms:.2f} ms   (conversation, DB, mocks, "
                                           "assertions)"),
            _row("  run loop outside cases", f"{per_case - middle.case_ms:.2f} ms   (plans, result rows, counters, "
                                             "cancel check)"),
        ]
    lines.append("SQL statements per case, by kind (and ms per case in them, counted pass, lock waits included):")
    lines += [
        f"  {count / cases:7.2f}  {kind:<34} {seconds * 1000 / cases:6.2f} ms"
        for kind, count, seconds in figures.statements
    ]
    return "\n".join(lines)


def _series(figures: Figures, seconds: list[float]) -> str:
    return " ".join(f"{ms:.2f}" for ms in figures.per_case_ms(seconds))


def rss_series(sizes: list[int], *, turns: int, stub_url: str, database_url: str) -> str:
    """Peak RSS of one harness pass at each size, each in a fresh process, so one size's memory cannot hide
    another's."""
    lines = ["peak RSS by number of cases (one harness pass per process):"]
    for size in sizes:
        command = [sys.executable, str(Path(__file__).resolve()), "--harness-only", "--cases", str(size),
                   "--turns", str(turns), "--stub-url", stub_url]
        if database_url:
            command += ["--database-url", database_url]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
        found = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        if done.returncode != 0 or not found:
            raise BenchError(f"the {size}-case RSS process failed ({done.returncode}): {done.stderr[-2000:]}")
        result = json.loads(found[-1][len(RESULT_PREFIX):])
        lines.append(
            f"  {size:>7} cases: peak RSS {result['peak_rss_mb']:.1f} MB "
            f"(after setup {result['setup_rss_mb']:.1f} MB, +{result['peak_rss_mb'] - result['setup_rss_mb']:.1f} MB "
            f"during the run; {result['ms_per_case']:.2f} ms/case)"
        )
    return "\n".join(lines)


# --- Entry point --------------------------------------------------------------------------------------------------


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 200,1000, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("every size must be a whole number >= 1")
    return sizes


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Harness overhead per case vs a plain openai-SDK loop.")
    parser.add_argument("--cases", type=_positive, default=200, help="cases in the suite (default 200)")
    parser.add_argument("--turns", type=_positive, default=3, help="user turns per case (default 3)")
    parser.add_argument("--repeat", type=_positive, default=3, help="timed passes per side (default 3)")
    parser.add_argument("--database-url", default="", help="a PostgreSQL URL; a scratch database is created on it "
                                                           "and dropped (default: a temporary SQLite file)")
    parser.add_argument("--stub", choices=("subprocess", "in-process"), default="subprocess",
                        help="where the OpenAI stub runs (default: subprocess, off the measured GIL)")
    parser.add_argument("--stub-url", default="", help="use an already running stub that answers like this one")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one harness pass")
    parser.add_argument("--rss-series", type=_sizes, default=None, metavar="N,N,…",
                        help="also run one harness pass per size in fresh processes and print each peak RSS")
    parser.add_argument("--serve-stub", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--harness-only", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    if options.serve_stub:
        return serve_stub()
    try:
        with stub_server(options.stub, options.stub_url) as (base_url, stub_description):
            with scratch_database(options.database_url) as (database_url, var_dir, database):
                setup_django(database_url, var_dir)
                configure_provider(base_url)
                suite = create_suite(options.cases, options.turns)
                if options.harness_only:
                    setup_rss = peak_rss_mb()
                    harness = run_harness(suite, options.cases)
                    result = {"cases": options.cases, "setup_rss_mb": setup_rss, "peak_rss_mb": peak_rss_mb(),
                              "ms_per_case": harness.seconds * 1000 / options.cases}
                    print(RESULT_PREFIX + json.dumps(result), flush=True)
                    return 0
                figures = measure(suite, base_url, options.cases, options.turns, options.repeat)
                print(format_report(figures, database=database, stub=stub_description, rss_mb=peak_rss_mb()),
                      flush=True)
                if options.profile:
                    print(profile_harness(suite, options.cases), flush=True)
            if options.rss_series:
                print(rss_series(options.rss_series, turns=options.turns, stub_url=base_url,
                                 database_url=options.database_url), flush=True)
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
