"""LangGraph overhead: what running a team's LangGraph agent through agenttest (`runtime: langgraph`) costs per case
on top of the same graph run bare, beside what agenttest's own loop (`native`) costs on top of a bare openai-SDK loop.

    python bench/langgraph_overhead.py [--cases 200] [--turns 3] [--repeat 3] [--database-url postgres://…]

Everything talks to one local OpenAI-compatible stub in a subprocess (bench/sides.py's, as agents_sdk_overhead.py's).
The four sides, one warm-up pass each, then `--repeat` interleaved timed passes:

- graph bare: the `create_agent` graph of bench/langgraph_agent.py with its `ChatOpenAI` pointed at the stub, one
  in-memory thread per case carried over its turns, the tool run for real;
- graph under agenttest: the same graph as `entry: langgraph_agent:graph`, `run_create` + `run_execute`, the tool
  mocked with the same result;
- native bare and native under agenttest: harness_overhead.py's baseline loop and harness pass.

Within the two harness sides it also times the case seal (the ledger and the audit hook), as agents_sdk_overhead.py.
See bench/README.md.
"""

from __future__ import annotations

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

ENTRY = "langgraph_agent:graph"


def create_graph_suite(cases: int, turns: int) -> Any:
    from agenthost.models import Agent

    agent = Agent.objects.create(
        name="bench-langgraph", runtime="langgraph", entry=ENTRY, provider=native.PROVIDER, model=native.MODEL,
        outside_effects={native.TOOL: False},
    )
    return sides.runtime_suite(agent, "bench langgraph case", cases, turns)


def run_graph_bare(base_url: str, cases: int, turns: int) -> float:
    """Seconds for the graph run bare: its own ChatOpenAI client, its own ToolNode, an in-memory thread per case."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph_agent import build

    graph = build(base_url).copy(update={"checkpointer": InMemorySaver()})
    started = time.perf_counter()
    for index in range(cases):
        config = {"configurable": {"thread_id": f"case-{index}"}}
        for turn in range(turns):
            state = graph.invoke({"messages": [{"role": "user", "content": native.user_message(index, turn)}]},
                                 config)
            answer = state["messages"][-1].content
            if "has shipped" not in answer:
                raise native.BenchError(f"graph bare: case {index} turn {turn} answered {answer!r}")
    return time.perf_counter() - started


@dataclass
class Figures:
    cases: int
    turns: int
    graph_bare_s: list[float] = field(default_factory=list)
    graph_harness_s: list[float] = field(default_factory=list)
    native_bare_s: list[float] = field(default_factory=list)
    native_harness_s: list[float] = field(default_factory=list)
    graph_seal_s: list[tuple[float, float]] = field(default_factory=list)

    def ms(self, seconds: list[float]) -> float:
        return sides.ms_per_case(seconds, self.cases)

    def seal_ms(self, part: int) -> float:
        return statistics.median(timings[part] for timings in self.graph_seal_s) * 1000 / self.cases


def measure(graph_suite: Any, native_suite: Any, base_url: str, cases: int, turns: int, repeat: int) -> Figures:
    figures = Figures(cases=cases, turns=turns)
    clock = sides.SealClock()
    sides.interleave([
        (figures.graph_bare_s, lambda: run_graph_bare(base_url, cases, turns)),
        (figures.graph_harness_s,
         clock.timed(figures.graph_seal_s, lambda: native.run_harness(graph_suite, cases).seconds)),
        (figures.native_bare_s, lambda: native.run_baseline(base_url, cases, turns)),
        (figures.native_harness_s, lambda: native.run_harness(native_suite, cases).seconds),
    ], repeat, also_recorded=(figures.graph_seal_s,))
    return figures


def format_report(figures: Figures, *, database: str, stub: str) -> str:
    def row(label: str, seconds: list[float]) -> str:
        return sides.passes_row(label, seconds, figures.cases)

    graph_overhead = figures.ms(figures.graph_harness_s) - figures.ms(figures.graph_bare_s)
    native_overhead = figures.ms(figures.native_harness_s) - figures.ms(figures.native_bare_s)
    return "\n".join([
        "LangGraph overhead: a team's LangGraph agent under agenttest vs the same graph bare",
        sides.row("cases", figures.cases),
        sides.row("turns per case", figures.turns),
        sides.row("timed passes", len(figures.graph_bare_s)),
        sides.row("database", database),
        sides.row("stub", stub),
        "",
        row("ms per case (graph bare)", figures.graph_bare_s),
        row("ms per case (graph under agenttest)", figures.graph_harness_s),
        row("ms per case (native bare loop)", figures.native_bare_s),
        row("ms per case (native under agenttest)", figures.native_harness_s),
        "",
        sides.row("overhead ms per case (langgraph)", f"{graph_overhead:.2f}"),
        sides.row("overhead ms per case (native)", f"{native_overhead:.2f}"),
        sides.row("langgraph over native", f"{graph_overhead - native_overhead:.2f}"),
        "",
        sides.row("ledger ms per case (langgraph)", f"{figures.seal_ms(0):.3f}"),
        sides.row("seal hook ms per case (langgraph)", f"{figures.seal_ms(1):.3f}"),
    ])


def main(argv: list[str] | None = None) -> int:
    options = sides.argument_parser("agenttest's overhead per case on a LangGraph agent vs native.").parse_args(argv)
    if options.serve_stub:
        return sides.serve_stub()
    try:
        with native.stub_subprocess(Path(__file__)) as (base_url, stub_description):
            with native.scratch_database(options.database_url, purpose="bench_langgraph") as (database_url, var_dir,
                                                                                               database):
                native.setup_django(database_url, var_dir)
                native.configure_provider(base_url)
                graph_suite = create_graph_suite(options.cases, options.turns)
                native_suite = native.create_suite(options.cases, options.turns)
                figures = measure(graph_suite, native_suite, base_url, options.cases, options.turns, options.repeat)
                print(format_report(figures, database=database, stub=stub_description), flush=True)
    except native.BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
