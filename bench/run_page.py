"""Server time of the run page for a large finished run: 1,000 cases × 5 models by default; beside it, the admin's
case review page (where a reviewer reads and enables each draft) and its cases list.

    python bench/run_page.py [--cases 1000] [--models 5] [--repeat 5] [--database-url postgres://…]

Builds the run's results in bulk on a scratch database (each with a transcript of a realistic size, which the page
must not load), then renders the run page, its matrix CSV and its progress JSON with Django's test client, in process:
the time is the server's (URL routing, queries, template rendering), with no network and no browser. Prints the median
(and min / max) of `--repeat` renders after one warm-up, the number of SQL queries and the page size. The review page
is measured on a case the size of a recorded one (history, turns, mocks, assertions): issue 37 found it ten times
slower than the app's own pages; and so is its Enable button (the POST and the review page it lands on).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as a script, Python puts bench/ first on the path; the project packages live one level up.
    sys.path.insert(0, str(ROOT))

from bench.harness_overhead import scratch_database, setup_django  # noqa: E402

TRANSCRIPT_MESSAGES = 12


def _transcript(case_name: str) -> list[dict[str, Any]]:
    return [
        {
            "seq": seq, "turn": seq // 4, "role": ("user", "assistant", "tool_call", "tool_result")[seq % 4],
            "content": f"{case_name}: message {seq} " + "lorem ipsum " * 15, "function": "lookup_order",
            "arguments": {"order_id": "1042"}, "tool_call_id": f"call_{seq}", "agent": "order-lookup",
            "outcome": "mocked", "trigger": "model", "model": "", "latency_ms": 12.5,
        }
        for seq in range(TRANSCRIPT_MESSAGES)
    ]


def build_run(cases: int, models: int) -> int:
    """A finished run of `cases` × `models` results; every seventh case fails on the last model. Returns its id."""
    from django.contrib.auth import get_user_model

    from agenthost.models import Agent
    from cases.models import Case, Suite
    from runs.models import CaseResult, Run

    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "bench-password-123")
    agent = Agent.objects.create(name="bench-agent", instruction="Help.", provider="simulated", model="sim-careful",
                                 functions=[{"name": "lookup_order"}])
    suite = Suite.objects.create(name="bench suite", agent=agent)
    made = Case.objects.bulk_create(
        [Case(suite=suite, name=f"case {index:04d}: the customer asks about order {1000 + index}")
         for index in range(cases)],
        batch_size=500,
    )
    keys = [f"simulated:bench-model-{index}" for index in range(models)]
    results = []
    for case_index, case in enumerate(made):
        for model_index, key in enumerate(keys):
            failing = model_index == models - 1 and case_index % 7 == 0
            results.append(
                CaseResult(
                    case=case, case_name=case.name, model=key, position=len(results),
                    status="failed" if failing else "passed",
                    reason="1 of 3 assertions failed" if failing else "",
                    duration_ms=50.0 + (len(results) % 97), model_latency_ms=20.0 + (len(results) % 53),
                    input_tokens=400, output_tokens=60, cost=Decimal("0.00012"), transcript=_transcript(case.name),
                    tool_calls=[{"name": "lookup_order", "arguments": {"order_id": "1042"}, "outcome": "mocked"}],
                    assertions=[{"type": "toolCalled", "status": "failed" if failing else "passed",
                                 "expected": {"function": "lookup_order"}, "actual": [], "message": "…"}],
                )
            )
    failed = sum(1 for result in results if result.status == "failed")
    run = Run.objects.create(
        suite=suite, model_keys=keys, case_ids=[case.pk for case in made], total=len(results),
        status=Run.Status.FAILED, passed=len(results) - failed, failed=failed, triggered_by=user,
        reason=f"{failed} of {len(results)} results failed",
    )
    for result in results:
        result.run = run
    CaseResult.objects.bulk_create(results, batch_size=500)
    return run.pk


def build_review_case(turns: int = 3, mocks: int = 4, assertions: int = 6) -> int:
    """The bench suite's first case given the parts a recorded draft has; returns its id."""
    from cases.models import Assertion, Case, HistoryMessage, Mock, Turn

    case = Case.objects.order_by("pk").first()
    HistoryMessage.objects.bulk_create([
        HistoryMessage(case=case, position=0, role="user", content="Hello, I have a question about an order."),
        HistoryMessage(case=case, position=1, role="assistant", content="Of course: which order?"),
    ])
    made = Turn.objects.bulk_create([
        Turn(case=case, position=index, user_message=f"Where is order {1042 + index}?") for index in range(turns)
    ])
    Mock.objects.bulk_create([
        Mock(case=case, position=index, function_name="lookup_order", arguments={"order_id": str(1042 + index)},
             result=json.dumps({"order_id": str(1042 + index), "status": "shipped", "email": "ann@example.com"}))
        for index in range(mocks)
    ])
    Assertion.objects.bulk_create([
        Assertion(case=case, turn=made[index % turns], position=index, type="toolCalled",
                  params={"function": "lookup_order", "arguments": {"order_id": str(1042 + index % turns)}})
        for index in range(assertions)
    ])
    return case.pk


def measure(client: Any, url: str, repeat: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(url)  # warm-up: template compilation, first connection
    if response.status_code != 200:
        raise SystemExit(f"{url} answered {response.status_code}")
    timings = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url)
            timings.append((time.perf_counter() - started) * 1000)
    return {
        "url": url,
        "median_ms": statistics.median(timings),
        "min_ms": min(timings),
        "max_ms": max(timings),
        "queries": len(queries),
        "bytes": len(response.content),
    }


def measure_switch(client: Any, case_id: int, repeat: int) -> dict[str, Any]:
    """The review panel's Enable: its POST and the review page it lands on, as a reviewer waits for both. Each timed
    enable follows an untimed disable, so every one enables a draft."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from cases.models import Case

    base = f"/admin/cases/case/{case_id}"
    timings = []
    for _ in range(repeat + 1):
        client.post(f"{base}/disable/")
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.post(f"{base}/enable/", follow=True)
            timings.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200 or not Case.objects.filter(pk=case_id, enabled=True).exists():
            raise SystemExit(f"{base}/enable/ answered {response.status_code} and did not enable the case")
    timings = timings[1:]  # the first is the warm-up
    return {
        "url": f"{base}/enable/ (POST)",
        "median_ms": statistics.median(timings),
        "min_ms": min(timings),
        "max_ms": max(timings),
        "queries": len(queries),
        "bytes": len(response.content),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--models", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--database-url", default="", help="postgres://… (a scratch database is made); default SQLite")
    args = parser.parse_args(argv)

    with scratch_database(args.database_url) as (database_url, var_dir, description):
        setup_django(database_url, var_dir)
        from django.conf import settings
        from django.test import Client

        # The test client's host name; setup_test_environment() would allow it too, but it also instruments template
        # rendering, which would be timed.
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
        started = time.perf_counter()
        run_id = build_run(args.cases, args.models)
        built_s = time.perf_counter() - started
        from django.contrib.auth import get_user_model

        client = Client()
        client.force_login(get_user_model().objects.get(username="bench"))
        print(f"run page benchmark: {args.cases} cases × {args.models} models = {args.cases * args.models} results; "
              f"{description}; built in {built_s:.1f} s; {args.repeat} renders after a warm-up")
        case_id = build_review_case()
        pages = (
            f"/runs/{run_id}/", f"/runs/{run_id}/matrix.csv", f"/runs/{run_id}/progress.json",
            f"/admin/cases/case/{case_id}/change/", "/admin/cases/case/",
        )
        rows = [measure(client, url, args.repeat) for url in pages]
        rows.append(measure_switch(client, case_id, args.repeat))
        for row in rows:
            print(f"  {row['url']:<32} median {row['median_ms']:7.1f} ms  (min {row['min_ms']:.1f}, max "
                  f"{row['max_ms']:.1f})  {row['queries']} queries  {row['bytes'] / 1024:.0f} KiB")
        from django.db import connections

        connections.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
