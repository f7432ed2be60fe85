"""What a run's agents were (issue 37, item 1): every agent a run can reach is in its snapshot — sub-agents and
theirs, with instruction, model, settings, tools, runtime entry and, for the team's own code, a hash of the files it
comes from (read, never imported in the web process) — and a flipped case says which of the agent, the case, the
model or a recording changed between the two runs, one badge each."""

from __future__ import annotations

import re
import sys
from decimal import Decimal

import pytest
from django.utils import timezone

from agenthost.models import Agent
from runs.models import CaseResult, Recording, Run
from runs.services import run_create
from tests.runs.conftest import SCRIPTED

pytestmark = pytest.mark.django_db

TEAM_MODULE = "team_bot_issue37"


def finish(run: Run, status: str) -> None:
    """The run's results as a run that judged every case `status` leaves them (the models are not the point)."""
    for position, case_id in enumerate(run.case_ids):
        case = run.suite.cases.get(pk=case_id)
        CaseResult.objects.create(
            run=run, case=case, case_name=case.name, case_hash=f"{case.pk:064x}", model=SCRIPTED, position=position,
            status=status, cost=Decimal(0),
        )
    Run.objects.filter(pk=run.pk).update(status=Run.Status.PASSED if status == "passed" else Run.Status.FAILED,
                                         finished_at=timezone.now())


def causes_on_run_page(admin_client, run: Run) -> list[str]:
    html = admin_client.get(f"/runs/{run.pk}/").content.decode()
    return re.findall(r'data-causes="([^"]*)"', html)


def test_it_keeps_every_agent_a_run_reached_and_names_the_sub_agent_that_changed(
    order_suite, order_agent, settings, tmp_path, admin_client, scripted_model
):
    code = tmp_path / f"{TEAM_MODULE}.py"
    code.write_text("def respond(message):\n    return 'hello'\n")
    settings.AGENTTEST_PROJECT_DIR = str(tmp_path)
    bot = Agent.objects.create(name="team-bot", runtime="python", entry=f"{TEAM_MODULE}:respond",
                               provider="scripted", model="scripted")
    deep = Agent.objects.create(name="deep", instruction="Answer refunds. Check the order first.",
                                provider="scripted", model="scripted", functions=[{"name": "check_order"}])
    order_agent.sub_agents.add(bot)
    bot.sub_agents.add(deep)

    before = run_create(suite=order_suite, model_keys=[SCRIPTED])
    code.write_text("def respond(message):\n    return 'hello there'\n")
    deep.instruction = "Answer refunds."
    deep.temperature = 0.5
    deep.save()
    after = run_create(suite=order_suite, model_keys=[SCRIPTED])

    agents = after.agent_snapshot["agents"]
    assert list(agents) == ["order-desk", "team-bot", "deep"]
    assert agents["team-bot"]["runtime"] == "python" and agents["team-bot"]["entry"] == f"{TEAM_MODULE}:respond"
    assert agents["team-bot"]["code_hash"] != before.agent_snapshot["agents"]["team-bot"]["code_hash"] != ""
    assert agents["deep"]["functions"][0]["function"]["name"] == "check_order"
    assert "code_hash" not in agents["deep"]  # the native loop is agenttest's own
    # The team's code was read as a file, not run in this (the web) process.
    assert TEAM_MODULE not in sys.modules

    html = admin_client.get(f"/runs/{after.pk}/compare/?baseline={before.pk}").content.decode()
    changed = re.findall(r'class="agent-change" data-agent="([^"]+)" data-status="changed"', html)
    assert changed == ["team-bot", "deep"]
    deep_part = html.split('data-agent="deep"', 1)[1].split('class="agent-change"', 1)[0]
    assert '<span class="diff-del">-Answer refunds. Check the order first.</span>' in deep_part
    assert 'data-part="temperature">Temperature: <code>0.0</code> → <code>0.5</code>' in deep_part
    bot_part = html.split('data-agent="team-bot"', 1)[1].split('data-agent="deep"', 1)[0]
    assert 'data-part="code"' in bot_part and 'data-part="instruction"' not in bot_part


def test_it_says_the_model_changed_when_only_its_configuration_did(
    order_suite, settings, admin_client, scripted_model
):
    before = run_create(suite=order_suite, model_keys=[SCRIPTED])
    finish(before, "passed")
    scripted = settings.AGENTTEST_PROVIDERS["scripted"]
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "scripted": {**scripted, "timeout": 7.0}}
    after = run_create(suite=order_suite, model_keys=[SCRIPTED])
    finish(after, "failed")

    assert causes_on_run_page(admin_client, after) == ["model changed", "model changed"]


def test_it_says_a_recording_changed_when_a_replay_served_another(order_suite, admin_client, scripted_model):
    recordings = [
        Recording.objects.create(case=case, model=SCRIPTED, entries=[], recorded_at=timezone.now())
        for case in order_suite.cases.order_by("pk")
    ]
    before = run_create(suite=order_suite, model_keys=[SCRIPTED], mode=Run.Mode.REPLAY)
    finish(before, "passed")
    recordings[0].entries = [{"answer": "recorded again"}]
    recordings[0].save()
    after = run_create(suite=order_suite, model_keys=[SCRIPTED], mode=Run.Mode.REPLAY)
    finish(after, "failed")

    # Only the case whose recording was written again; the other flipped with nothing agenttest keeps changed.
    assert causes_on_run_page(admin_client, after) == ["recording changed"]
