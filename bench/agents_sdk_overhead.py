"""Agents SDK overhead: what running a team's OpenAI Agents SDK agent through agenttest (`runtime: openai-agents`)
costs per case on top of the same agent run bare, beside what agenttest's own loop (`native`) costs on top of a bare
openai-SDK loop.

    python bench/agents_sdk_overhead.py [--cases 200] [--turns 3] [--repeat 3] [--database-url postgres://…]

Everything talks to one local OpenAI-compatible stub in a subprocess (harness_overhead.py's rules: a user turn is
answered with a `lookup_order` tool call, a tool result with a short text; content null accepted, as the SDK sends
it). The four sides, one warm-up pass each, then `--repeat` interleaved timed passes:

- SDK bare: `Runner.run` on the agent of bench/agents_sdk_agent.py with the SDK's own chat-completions model and
  `AsyncOpenAI` client, one conversation per case carried over its turns (`to_input_list()`), the tool run for real;
- SDK under agenttest: the same agent as `entry: agents_sdk_agent:agent`, `run_create` + `run_execute`, the tool
  mocked with the same result;
- native bare and native under agenttest: harness_overhead.py's baseline loop and harness pass.

Within the two harness sides it also times the case seal (agenthost/seal.py): the ledger's check of each model
request, and the process-wide audit hook on every audited event while a harness pass runs.

See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for path in (str(ROOT), str(BENCH)):
    if path not in sys.path:
        # Run as a script, Python puts bench/ first on the path; the project packages live one level up.
        sys.path.insert(0, path)

import harness_overhead as native  # noqa: E402  (bench/ on the path first)
import sides  # noqa: E402

ENTRY = "agents_sdk_agent:agent"


def stub_server() -> contextlib.AbstractContextManager[tuple[str, str]]:
    return native.stub_subprocess(Path(__file__))


def create_sdk_suite(cases: int, turns: int) -> Any:
    from agenthost.models import Agent

    agent = Agent.objects.create(
        name="bench-sdk", runtime="openai-agents", entry=ENTRY, provider=native.PROVIDER, model=native.MODEL,
        outside_effects={native.TOOL: False},
    )
    return sides.runtime_suite(agent, "bench sdk case", cases, turns)


def run_sdk_bare(base_url: str, cases: int, turns: int) -> float:
    """Seconds for the agent run bare: the SDK's own model and client, its own tool invocation."""
    from agents import AsyncOpenAI, OpenAIChatCompletionsModel, RunConfig, Runner
    from agents_sdk_agent import agent

    async def run() -> float:
        client = AsyncOpenAI(base_url=base_url, api_key="not-needed")
        config = RunConfig(model=OpenAIChatCompletionsModel(model=native.MODEL, openai_client=client),
                           tracing_disabled=True)
        started = time.perf_counter()
        for index in range(cases):
            items: list[Any] = []
            for turn in range(turns):
                items.append({"role": "user", "content": native.user_message(index, turn)})
                result = await Runner.run(agent, items, run_config=config)
                if "has shipped" not in str(result.final_output):
                    raise native.BenchError(f"SDK bare: case {index} turn {turn} answered {result.final_output!r}")
                items = result.to_input_list()
        elapsed = time.perf_counter() - started
        await client.close()
        return elapsed

    return asyncio.run(run())


@dataclass
class Figures:
    cases: int
    turns: int
    sdk_bare_s: list[float] = field(default_factory=list)
    sdk_harness_s: list[float] = field(default_factory=list)
    native_bare_s: list[float] = field(default_factory=list)
    native_harness_s: list[float] = field(default_factory=list)
    # (ledger, audit hook) seconds of each timed harness pass.
    sdk_seal_s: list[tuple[float, float]] = field(default_factory=list)
    native_seal_s: list[tuple[float, float]] = field(default_factory=list)

    def ms(self, seconds: list[float]) -> float:
        return sides.ms_per_case(seconds, self.cases)

    def seal_ms(self, passes: list[tuple[float, float]], part: int) -> float:
        return statistics.median(timings[part] for timings in passes) * 1000 / self.cases


def measure(sdk_suite: Any, native_suite: Any, base_url: str, cases: int, turns: int, repeat: int) -> Figures:
    figures = Figures(cases=cases, turns=turns)
    clock = sides.SealClock()
    sides.interleave([
        (figures.sdk_bare_s, lambda: run_sdk_bare(base_url, cases, turns)),
        (figures.sdk_harness_s, clock.timed(figures.sdk_seal_s, lambda: native.run_harness(sdk_suite, cases).seconds)),
        (figures.native_bare_s, lambda: native.run_baseline(base_url, cases, turns)),
        (figures.native_harness_s,
         clock.timed(figures.native_seal_s, lambda: native.run_harness(native_suite, cases).seconds)),
    ], repeat, also_recorded=(figures.sdk_seal_s, figures.native_seal_s))
    return figures


def format_report(figures: Figures, *, database: str, stub: str) -> str:
    sdk_overhead = figures.ms(figures.sdk_harness_s) - figures.ms(figures.sdk_bare_s)
    native_overhead = figures.ms(figures.native_harness_s) - figures.ms(figures.native_bare_s)
    row = sides.row
    lines = [
        "Agents SDK overhead: a team's Agents SDK agent under agenttest vs the same agent bare",
        row("cases", figures.cases),
        row("turns per case", figures.turns),
        row("timed passes", len(figures.sdk_bare_s)),
        row("database", database),
        row("stub", stub),
        "",
        sides.passes_row("ms per case (SDK bare)", figures.sdk_bare_s, figures.cases),
        sides.passes_row("ms per case (SDK under agenttest)", figures.sdk_harness_s, figures.cases),
        sides.passes_row("ms per case (native bare loop)", figures.native_bare_s, figures.cases),
        sides.passes_row("ms per case (native under agenttest)", figures.native_harness_s, figures.cases),
        "",
        row("overhead ms per case (openai-agents)", f"{sdk_overhead:.2f}"),
        row("overhead ms per case (native)", f"{native_overhead:.2f}"),
        row("openai-agents over native", f"{sdk_overhead - native_overhead:.2f}"),
        "",
        row("ledger ms per case (openai-agents)", f"{figures.seal_ms(figures.sdk_seal_s, 0):.3f}"),
        row("seal hook ms per case (openai-agents)", f"{figures.seal_ms(figures.sdk_seal_s, 1):.3f}"),
        row("ledger ms per case (native)", f"{figures.seal_ms(figures.native_seal_s, 0):.3f}"),
        row("seal hook ms per case (native)", f"{figures.seal_ms(figures.native_seal_s, 1):.3f}"),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return sides.argument_parser("agenttest's overhead per case on an Agents SDK agent vs native.").parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    if options.serve_stub:
        return sides.serve_stub()
    try:
        with stub_server() as (base_url, stub_description):
            with native.scratch_database(options.database_url, purpose="bench_sdk") as (database_url, var_dir,
                                                                                         database):
                native.setup_django(database_url, var_dir)
                native.configure_provider(base_url)
                sdk_suite = create_sdk_suite(options.cases, options.turns)
                native_suite = native.create_suite(options.cases, options.turns)
                figures = measure(sdk_suite, native_suite, base_url, options.cases, options.turns, options.repeat)
                print(format_report(figures, database=database, stub=stub_description), flush=True)
    except native.BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
