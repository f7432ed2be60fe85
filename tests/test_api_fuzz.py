"""The REST API fuzzed from its OpenAPI schema (issue 7): schemathesis sends positive and negative requests to every
operation as a staff superuser, on the agents, conversations, suite and finished run the fuzz seeds on the host's own
scripted models. No answer may be a 5xx, and every 400 names the field at fault. The fuzz is bench/api_fuzz.py's (also a
command); here it runs on the test database, with runs queued on a broker file nothing consumes and no network beyond
127.0.0.1."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.api_fuzz import (
    celery_broker,
    format_report,
    fuzz_api,
    fuzz_data_ensure,
    hermetic_settings,
    load_schema,
    loopback_only,
    scripted_models,
)
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.slow

BASE_DIR = Path(__file__).resolve().parent.parent

# Positive cases per operation, and as many negative ones, while time allows; `bench/api_fuzz.py` fuzzes deeper.
EXAMPLES = 8
# Past this many seconds each operation gets its FLOOR cases of each kind and no more, so how deep the fuzz goes
# depends on the machine's speed (the report prints what was cut short) and what it reaches does not: every operation,
# past its 404s (an operation's first case takes the real ids). A minute is usual for the whole depth.
SECONDS = 90.0
FLOOR = 2


@pytest.fixture
def refused_connections(settings, tmp_path) -> Iterator[list[str]]:
    for name, value in hermetic_settings(tmp_path).items():
        setattr(settings, name, value)
    refused: list[str] = []
    with loopback_only(refused), celery_broker(settings.CELERY_BROKER_URL), scripted_models():
        yield refused


# The fuzz runs its seeded suite for real, whose case thread must see the data this test writes: committed. Minutes of
# CPU whose answers do not hang on the engine: run once, on production's.
@pytest.mark.production_engine
@pytest.mark.django_db(transaction=True)
def test_it_answers_no_5xx_and_names_the_field_of_every_validation_error(refused_connections):
    user = fuzz_data_ensure()

    report = fuzz_api(user=user, examples=EXAMPLES, seconds=SECONDS, floor=FLOOR)

    summary = format_report(report)
    print(summary)  # the figures and what was cut short, for `pytest -rP` or a CI log
    assert report.server_errors == 0, summary
    assert report.failures == [], summary
    assert refused_connections == [], summary
    # Every operation was fuzzed, and got past the 404s to real objects at least once.
    schema, _ = load_schema(user.auth_token.key)
    operations = {f"{op.ok().method.upper()} {op.ok().path}" for op in schema.get_all_operations()}
    assert set(report.per_operation) == operations, summary
    assert {label for label in operations if not report.reached[label]} == set(), summary
    assert report.statuses[200] and report.statuses[201] and report.statuses[204], summary


def _figure(output: str, label: str) -> int:
    match = re.search(rf"^{re.escape(label)}\s+(\d+)", output, re.MULTILINE)
    assert match, f"{label!r} is missing from the report:\n{output}"
    return int(match.group(1))


@pytest.mark.own_database
def test_it_runs_as_a_command_on_a_scratch_database_and_prints_its_figures():
    # Past --seconds every operation still gets its floor of cases: on one core shared with a pinned run's database
    # and a dozen processes, 60 s of budget and the floor took over 240 s. The budget is short, and the command gets
    # the hang guard of two waits, under pytest's 600 s: it is judged on what it prints, not on how fast.
    command = [sys.executable, "bench/api_fuzz.py", "--examples", "2", "--seconds", "20", "--floor", "1"]
    database_url = os.environ.get("DATABASE_URL", "")
    if database_url.startswith(("postgres://", "postgresql://")):
        command += ["--database-url", database_url]
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}

    done = subprocess.run(
        command, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=2 * WAIT_SECONDS, check=False
    )

    output = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{output}\nstderr:\n{done.stderr}"
    assert _figure(output, "operations") >= 30
    assert _figure(output, "requests") >= _figure(output, "operations")
    assert _figure(output, "5xx") == 0
    assert re.search(r"^  POST /api/runs/\s+\d+ \(\d+\)$", output, re.MULTILINE), output
