"""Process agent overhead: what a case of a `runtime: process` agent costs beside the same agent as an in-process
`runtime: python` one — the program started per turn, sealed (`unshare` into a network namespace of its own, the
forwarder in it, the model gateway), and with the MCP gateway when the agent has functions — over JSON lines and over
the Agent Client Protocol.

    python bench/process_overhead.py [--cases 20] [--turns 2] [--repeat 3] [--database-url postgres://…]
    python bench/process_overhead.py --quick          # a smoke run: 1 case, 1 turn, 1 timed pass

The agent is bench/process_agent.py, the same file all three ways, in two variants: one model call per turn ("model
only"), and a model call asking for `lookup_order`, the tool (mocked), and a model call answering ("model + tool").
Six suites run through `run_create` + `run_execute`, each warmed up once, then timed `--repeat` times interleaved.
Each pass is measured in wall time and in CPU time of this process and its children (the program, `unshare`, the
forwarder: `RUSAGE_CHILDREN` counts them once they are reaped, which the runtime does at the end of each turn; the
stub's process is reaped only at the end, so the model's own CPU is left out of every side).

See bench/README.md.
"""

from __future__ import annotations

import resource
import statistics
import sys
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

AGENT_FILE = BENCH / "process_agent.py"
# (label, python-runtime entry, the program's arguments, whether the agent declares the tool)
VARIANTS = (
    ("model only", "process_agent:respond", (AGENT_FILE.name,), False),
    ("model + tool", "process_agent:respond_with_tools", (AGENT_FILE.name, "--tools"), True),
)
RUNTIMES = ("python", "process", "acp")
RUNTIME_LABELS = {"python": "python (in-process)", "process": "process (sealed)", "acp": "process (sealed, ACP)"}
# The process runtimes, each beside python in the costs.
PROCESSES = ("process", "acp")


def stub_reply(body: dict[str, Any]) -> Any:
    """harness_overhead's rules when the request offers tools (a lookup_order call, then a text); a text otherwise."""
    from agenthost.llm.scripted import Answer

    if body.get("tools"):
        return native.stub_reply(body)
    user: dict[str, Any] = next((m for m in reversed(body.get("messages") or []) if m.get("role") == "user"), {})
    found = native._ORDER_ID.search(str(user.get("content") or ""))
    return Answer(text=f"Order {found.group(0) if found else '0'} has shipped.")


def create_suite(runtime: str, variant: tuple[str, str, tuple[str, ...], bool], cases: int, turns: int) -> Any:
    from agenthost.models import Agent

    label, entry, args, with_tool = variant
    name = f"bench-{runtime}-{'tool' if with_tool else 'model'}"
    if runtime == "python":
        agent = Agent.objects.create(name=name, runtime="python", entry=entry, provider=native.PROVIDER,
                                     model=native.MODEL)
    else:
        agent = Agent.objects.create(
            name=name, runtime="process", command=sys.executable, cwd=str(BENCH),
            args=[*args, "--acp"] if runtime == "acp" else list(args), protocol="acp" if runtime == "acp" else "jsonl",
            provider=native.PROVIDER, model=native.MODEL, functions=[native.TOOL_DECLARATION] if with_tool else [],
        )
    return sides.runtime_suite(agent, f"{name} case", cases, turns, with_tool=with_tool)


def cpu_seconds() -> float:
    """User + system CPU of this process and of its reaped children (and theirs)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class Side:
    variant: str
    runtime: str
    suite: Any
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)

    def run(self, cases: int) -> float:
        cpu = cpu_seconds()
        seconds = native.run_harness(self.suite, cases).seconds
        self.cpu_s.append(cpu_seconds() - cpu)
        return seconds


@dataclass
class Figures:
    cases: int
    turns: int
    sides: list[Side]

    def side(self, variant: str, runtime: str) -> Side:
        return next(side for side in self.sides if (side.variant, side.runtime) == (variant, runtime))

    def ms(self, seconds: list[float]) -> float:
        return sides.ms_per_case(seconds, self.cases)

    def ratio(self, variant: str, runtime: str, part: str) -> float:
        """runtime ÷ python, pass by pass (each round's passes saw the same machine), median of the rounds."""
        process, python = (getattr(self.side(variant, side), part) for side in (runtime, "python"))
        return statistics.median(a / b for a, b in zip(process, python, strict=True))


def measure(suites: dict[tuple[str, str], Any], cases: int, turns: int, repeat: int) -> Figures:
    figures = Figures(cases=cases, turns=turns, sides=[
        Side(variant, runtime, suites[variant, runtime]) for variant, *_ in VARIANTS for runtime in RUNTIMES
    ])
    sides.interleave([(side.wall_s, lambda side=side: side.run(cases)) for side in figures.sides], repeat,
                     also_recorded=tuple(side.cpu_s for side in figures.sides))
    return figures


def cost_row(label: str, value: str) -> str:
    return f"{label:<48}{value}"


def format_report(figures: Figures, *, database: str, stub: str) -> str:
    header = f"{'agent':<14}{'runtime':<22}{'wall ms/case':>14}{'CPU ms/case':>14}   wall ms/case of each pass"
    table = [header, "-" * len(header)]
    for side in figures.sides:
        passes = ", ".join(f"{s * 1000 / figures.cases:.1f}" for s in side.wall_s)
        table.append(f"{side.variant:<14}{RUNTIME_LABELS[side.runtime]:<22}{figures.ms(side.wall_s):>14.1f}"
                     f"{figures.ms(side.cpu_s):>14.1f}   {passes}")
    costs = []
    for variant, *_ in VARIANTS:
        python = figures.side(variant, "python")
        for runtime in PROCESSES:
            process, name = figures.side(variant, runtime), "ACP" if runtime == "acp" else "process"
            costs += [
                cost_row(f"start cost per case ({variant}, {name})",
                          f"{figures.ms(process.wall_s) - figures.ms(python.wall_s):.1f} ms wall, "
                          f"{figures.ms(process.cpu_s) - figures.ms(python.cpu_s):.1f} ms CPU"),
                cost_row(f"{name} ÷ python ({variant})", f"{figures.ratio(variant, runtime, 'wall_s'):.2f}x wall, "
                          f"{figures.ratio(variant, runtime, 'cpu_s'):.2f}x CPU"),
            ]
    return "\n".join([
        "Process agent overhead: a process agent's case (started per turn, sealed, gateways; JSON lines and ACP) "
        "beside the same agent in-process",
        sides.row("cases", figures.cases),
        sides.row("turns per case", figures.turns),
        sides.row("timed passes", len(figures.sides[0].wall_s)),
        sides.row("database", database),
        sides.row("stub", stub),
        "",
        *table,
        "",
        *costs,
    ])


def main(argv: list[str] | None = None) -> int:
    parser = sides.argument_parser("A process agent's cost per case beside the same agent in-process.", cases=20,
                                   turns=2)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 case, 1 turn, 1 timed pass")
    options = parser.parse_args(argv)
    if options.serve_stub:
        return sides.serve_stub(stub_reply)
    if options.quick:
        options.cases, options.turns, options.repeat = 1, 1, 1
    try:
        with native.stub_subprocess(Path(__file__)) as (base_url, stub_description):
            with native.scratch_database(options.database_url, purpose="bench_process") as (database_url, var_dir,
                                                                                             database):
                native.setup_django(database_url, var_dir)
                native.configure_provider(base_url)
                suites = {(variant[0], runtime): create_suite(runtime, variant, options.cases, options.turns)
                          for variant in VARIANTS for runtime in RUNTIMES}
                figures = measure(suites, options.cases, options.turns, options.repeat)
                print(format_report(figures, database=database, stub=stub_description), flush=True)
    except native.BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
