"""What the overhead benches share: the stub they all talk to, the case seal's clock, timed sides run interleaved
(one warm-up each, then `repeat` rounds, so every side sees the same machine noise) and the report's rows.

Imported by bench/agents_sdk_overhead.py, bench/langgraph_overhead.py and bench/process_overhead.py, each run as a
script with bench/ on the path (harness_overhead.py's stub and database helpers stay where they are).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import harness_overhead as native

# A side: a callable that runs one pass and returns its seconds, and the list the timed passes go to.
Side = tuple[list[float], Callable[[], float]]
LABEL_WIDTH = 40


def serve_stub(responder: Callable[[dict[str, Any]], Any] = native.stub_reply) -> int:
    """The stub in a child process of its own (harness_overhead.stub_subprocess starts it), accepting `content: null`
    beside tool calls as OpenAI does (the SDKs send it)."""
    from agenthost.testing.openai_stub import OpenAIStub

    stub = OpenAIStub(models=(native.MODEL,), record=False, strict_content=False)
    stub.respond_with(responder)
    stub.start()
    print(stub.base_url, flush=True)
    sys.stdin.read()
    stub.stop()
    return 0


class SealClock:
    """Seconds spent in the case seal: the ledger (CaseSeal.check_request) and the audit hook. Put in place before
    the first case installs the hook, which then registers the timed one."""

    def __init__(self) -> None:
        self.ledger = 0.0
        self.hook = 0.0
        from agenthost import seal

        check_request, audit = seal.CaseSeal.check_request, seal._audit
        clock = time.perf_counter

        def timed_check_request(case: Any, *args: Any, **kwargs: Any) -> None:
            started = clock()
            try:
                check_request(case, *args, **kwargs)
            finally:
                self.ledger += clock() - started

        def timed_audit(event: str, args: tuple[Any, ...]) -> None:
            started = clock()
            try:
                audit(event, args)
            finally:
                self.hook += clock() - started

        seal.CaseSeal.check_request = timed_check_request  # type: ignore[method-assign]
        seal._audit = timed_audit

    def reading(self) -> tuple[float, float]:
        return self.ledger, self.hook

    def timed(self, passes: list[tuple[float, float]], side: Callable[[], float]) -> Callable[[], float]:
        """`side`, appending the (ledger, hook) seconds each of its passes spent in the seal to `passes`."""

        def run() -> float:
            ledger, hook = self.reading()
            seconds = side()
            passes.append((self.ledger - ledger, self.hook - hook))
            return seconds

        return run


def runtime_suite(agent: Any, case_name: str, cases: int, turns: int, *, with_tool: bool = True) -> Any:
    """A suite named after `agent` of `cases` cases (`case_name` and a number): each turn asks after an order, and
    with `with_tool` the tool is mocked and asserted called at every turn; the last answer says it has shipped."""
    from cases.models import Suite
    from cases.services import case_create

    suite = Suite.objects.create(name=agent.name, agent=agent)
    per_turn = [{"type": "toolCalled", "params": {"function": native.TOOL}}] if with_tool else []
    for index in range(cases):
        case_create(suite=suite, document={
            "name": f"{case_name} {index:05d}",
            "turns": [{"user_message": native.user_message(index, turn), "assertions": per_turn}
                      for turn in range(turns)],
            "mocks": [{"function_name": native.TOOL, "result": native.TOOL_RESULT}] if with_tool else [],
            "assertions": [{"type": "outputContains", "params": {"text": "has shipped"}}],
        })
    return suite


def interleave(sides: list[Side], repeat: int, *, also_recorded: tuple[list[Any], ...] = ()) -> None:
    """One warm-up pass of each side (imports, connection pools, the entry point's import), then `repeat` rounds of
    one timed pass each. `also_recorded`: lists the sides append to themselves (SealClock.timed's), whose warm-up
    entries are dropped."""
    for _, side in sides:
        side()
    for recorded in also_recorded:
        recorded.clear()
    for _ in range(repeat):
        for timings, side in sides:
            timings.append(side())


def ms_per_case(seconds: list[float], cases: int) -> float:
    return statistics.median(seconds) * 1000 / cases


def row(label: str, value: object) -> str:
    return f"{label:<{LABEL_WIDTH}}{value}"


def passes_row(label: str, seconds: list[float], cases: int) -> str:
    """The median ms per case of a side's passes, then each pass's."""
    passes = ", ".join(f"{s * 1000 / cases:.2f}" for s in seconds)
    return row(label, f"{ms_per_case(seconds, cases):.2f}   passes: {passes}")


def argument_parser(description: str, *, cases: int = 200, turns: int = 3) -> argparse.ArgumentParser:
    """The options every overhead bench takes; a bench adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cases", type=native._positive, default=cases, help=f"cases in each suite (default {cases})")
    parser.add_argument("--turns", type=native._positive, default=turns, help=f"user turns per case (default {turns})")
    parser.add_argument("--repeat", type=native._positive, default=3, help="timed passes per side (default 3)")
    parser.add_argument("--database-url", default="", help="a PostgreSQL URL; a scratch database is created on it "
                                                           "and dropped (default: a temporary SQLite file)")
    parser.add_argument("--serve-stub", action="store_true", help=argparse.SUPPRESS)
    return parser
