"""The demo suite's committed recordings (agenttest_demo/recordings/order-support-demo/) replay the way CI replays
them: import the files, run the suite in replay mode with a poisoned OPENAI_API_KEY and every outbound connection
refused — no connection attempt, no recording missing or stale, the same verdicts as the simulated models give live,
and the poisoned value stored nowhere. If the demo agents or suite change on purpose, re-record them as
docs/record-replay.md describes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command

from agenttest_demo.suite import demo_suite_ensure
from runs.models import CaseResult, Run
from tests.runs.test_key_free import POISON, OutboundGuard, database_dump, execute, statuses

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_RECORDINGS = Path(django_settings.BASE_DIR) / "agenttest_demo" / "recordings" / "order-support-demo"
DEMO_MODELS = ["simulated:sim-careful", "simulated:sim-hasty"]


def test_it_replays_the_committed_demo_recordings_with_no_key_and_no_network(demo_agents, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", POISON)
    guard = OutboundGuard(monkeypatch)
    suite, _ = demo_suite_ensure()
    call_command("recordings", "import", str(DEMO_RECORDINGS))

    # Exactly what CI runs: the command, in replay mode, in this process (exit 1: the demo has failing cases).
    with pytest.raises(SystemExit) as exited:
        call_command("run_suite", suite.name, "--models", ",".join(DEMO_MODELS), "--mode", "replay", "--inline",
                     "--junit", str(tmp_path / "replay.xml"))
    assert exited.value.code == 1
    replayed = Run.objects.get(mode=Run.Mode.REPLAY)
    assert ET.parse(tmp_path / "replay.xml").getroot().get("errors") == "0"

    errors = list(CaseResult.objects.filter(run=replayed, status="error").values_list("case_name", "model", "reason"))
    assert errors == [], (
        "the committed demo recordings no longer replay; if the demo agents or suite changed on purpose, re-record "
        "them as docs/record-replay.md describes"
    )
    assert guard.attempts == []
    assert replayed.total == 18 and replayed.done == 18
    # The simulated models are deterministic, so a faithful replay gives exactly what they give live now.
    assert statuses(replayed) == statuses(execute(suite, DEMO_MODELS))
    assert POISON not in database_dump()
