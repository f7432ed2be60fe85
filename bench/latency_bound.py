"""Latency-bound runs: what running a hermetic suite's cases side by side buys against a slow model.

    python bench/latency_bound.py [--cases 200] [--turns 3] [--latency-ms 200] [--concurrency 8]
                                  [--database-url postgres://…]

A local OpenAI-compatible stub (in a process of its own) answers every call after a fixed latency, with a short text
per user turn: one model call per turn. The same suite runs twice through `run_create` + `run_execute`, serially and
then with `case_concurrency` = N, and the command prints both wall times, their ratio (target ≥ 6× at N = 8) and the
floor beside each — calls × latency / concurrency, what no harness can beat. See bench/README.md.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness_overhead import (  # noqa: E402  (the path above makes the project importable as a script)
    INSTRUCTION,
    MODEL,
    MODEL_KEY,
    PROVIDER,
    BenchError,
    configure_provider,
    scratch_database,
    setup_django,
    user_message,
)

TARGET_RATIO = 6.0
_ORDER_ID = re.compile(r"\d+")


def slow_reply(latency: float) -> Any:
    from agenthost.llm.scripted import Answer

    def reply(body: dict[str, Any]) -> Any:
        time.sleep(latency)
        messages = body.get("messages") or []
        found = _ORDER_ID.search(str((messages[-1] if messages else {}).get("content") or ""))
        return Answer(text=f"Order {found.group(0) if found else 0} has shipped.")

    return reply


def serve_stub(latency_ms: int) -> int:
    """The stub in a process of its own, on threads (one per request, so calls wait side by side); serves until its
    stdin closes — which also happens when the benchmark dies."""
    from agenthost.testing.openai_stub import OpenAIStub

    stub = OpenAIStub(models=(MODEL,), record=False)
    stub.respond_with(slow_reply(latency_ms / 1000))
    stub.start()
    print(stub.base_url, flush=True)
    sys.stdin.read()
    stub.stop()
    return 0


def create_suite(cases: int, turns: int, concurrency: int) -> Any:
    from agenthost.models import Agent
    from cases.models import Suite
    from cases.services import case_create

    agent = Agent.objects.create(name="latency-agent", instruction=INSTRUCTION, provider=PROVIDER, model=MODEL)
    suite = Suite.objects.create(name="latency", agent=agent, case_concurrency=concurrency)
    for index in range(cases):
        case_create(
            suite=suite,
            document={
                "name": f"latency case {index:05d}",
                "initial_state": {"customer": "Ana"},
                "turns": [
                    {
                        "user_message": user_message(index, turn),
                        "assertions": [{"type": "outputContains", "params": {"text": "has shipped"}}],
                    }
                    for turn in range(turns)
                ],
            },
        )
    return suite


def timed_run(suite: Any, concurrency: int, cases: int) -> float:
    from cases.models import Suite
    from runs.models import Run
    from runs.services import run_create, run_execute

    Suite.objects.filter(pk=suite.pk).update(case_concurrency=concurrency)
    suite.refresh_from_db()
    started = time.perf_counter()
    run = run_create(suite=suite, model_keys=[MODEL_KEY])
    finished = run_execute(run_id=run.pk)
    seconds = time.perf_counter() - started
    if finished is None or finished.status != Run.Status.PASSED or finished.passed != cases:
        raise BenchError(f"the run at concurrency {concurrency} did not pass: {finished.reason if finished else ''}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--serve-stub", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.cases, args.turns, args.latency_ms, args.concurrency) < 1:
        parser.error("--cases, --turns, --latency-ms and --concurrency must be whole numbers ≥ 1")
    if args.serve_stub:
        return serve_stub(args.latency_ms)
    stub = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve-stub", "--latency-ms", str(args.latency_ms)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        line = stub.stdout.readline() if stub.stdout else ""
        match = re.search(r"http://\S+", line)
        if not match:
            raise BenchError(f"the stub did not start: {line!r}")
        with scratch_database(args.database_url, purpose="latency") as (database_url, var_dir, database):
            setup_django(database_url, var_dir)
            configure_provider(match.group(0))
            suite = create_suite(args.cases, args.turns, args.concurrency)
            serial = timed_run(suite, 1, args.cases)
            concurrent = timed_run(suite, args.concurrency, args.cases)
    finally:
        if stub.stdin:
            stub.stdin.close()
        stub.wait(10)
    calls = args.cases * args.turns
    latency = args.latency_ms / 1000
    ratio = serial / concurrent
    verdict = "within target" if ratio >= TARGET_RATIO else "UNDER target"
    rows = [
        ("database", database),
        ("workload", f"{args.cases} cases x {args.turns} turns = {calls} calls, {args.latency_ms} ms each"),
        ("serial wall time", f"{serial:.2f} s   (floor {calls * latency:.2f} s)"),
        (
            f"{args.concurrency} at once wall time",
            f"{concurrent:.2f} s   (floor {calls * latency / args.concurrency:.2f} s)",
        ),
        ("ratio serial / concurrent", f"{ratio:.2f}x   (target >= {TARGET_RATIO:g}x: {verdict})"),
    ]
    print(f"agenttest latency-bound run: serial vs {args.concurrency} cases at once")
    for label, value in rows:
        print(f"{label:<34}{value}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        sys.exit(1)
