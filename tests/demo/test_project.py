"""The demo's agents and suites are a project directory (agenttest_demo/project/), as a team's are: exactly the files
`agenttest export` writes, which `agenttest apply` applies and `demo_setup` applies through the public plugin module,
creating only what is missing; without the harness its agent files are read into the same agents."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from agenthost.models import Agent
from agenttest_demo import project
from agenttest_demo.agents import demo_agents_ensure
from agenttest_demo.project import PROJECT, demo_agents_read, demo_project_ensure
from agenttest_demo.suite import DEMO_SUITE, SIMULATED_USERS_SUITE
from cases.models import Case, Suite

pytestmark = pytest.mark.django_db


def _files(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.relative_to(root).as_posix() != "README.md"
    }


def _read(name: str, text: bytes) -> object:
    return yaml.safe_load(text) if name.endswith(".yaml") else text


def _agents() -> dict[str, dict]:
    return {
        agent.name: {
            **{k: v for k, v in Agent.objects.filter(pk=agent.pk).values()[0].items()
               if k not in ("id", "created_at", "updated_at")},
            "sub_agents": sorted(agent.sub_agents.values_list("name", flat=True)),
        }
        for agent in Agent.objects.order_by("name")
    }


def test_it_holds_what_export_writes_of_the_files_apply_reads(tmp_path):
    # A team edits the files or exports its admin's changes over them: either way they stay in export's own form.
    call_command("apply", str(PROJECT), stdout=io.StringIO())
    call_command("export", str(tmp_path), "--suite", DEMO_SUITE, "--suite", SIMULATED_USERS_SUITE,
                 stdout=io.StringIO())

    exported, committed = _files(tmp_path), _files(PROJECT)
    assert {name: _read(name, text) for name, text in exported.items()} == {
        name: _read(name, text) for name, text in committed.items()
    }
    if connection.vendor == "sqlite":
        # Byte for byte where the database keeps a mapping's keys in the order written; PostgreSQL's jsonb keeps them
        # in an order of its own (shorter keys first), which export then writes.
        assert exported == committed
    assert sorted(Agent.objects.values_list("name", flat=True)) == ["order-cancellation", "order-lookup",
                                                                   "order-router"]
    assert {suite.name: suite.cases.filter(enabled=True).count() for suite in Suite.objects.all()} == {
        DEMO_SUITE: 9, SIMULATED_USERS_SUITE: 2,
    }


def test_it_creates_only_what_is_missing_and_leaves_what_exists_as_it_is():
    demo_project_ensure()
    Agent.objects.filter(name="order-lookup").update(temperature=0.7)
    Suite.objects.filter(name=DEMO_SUITE).update(description="Edited by an admin.")
    Case.objects.filter(suite__name=DEMO_SUITE, name="The reply is helpful (judge)").delete()
    Suite.objects.filter(name=SIMULATED_USERS_SUITE).delete()

    ensured = demo_project_ensure()

    assert [(item.kind, item.name, item.created) for item in ensured] == [
        ("agent", "order-cancellation", False), ("agent", "order-lookup", False), ("agent", "order-router", False),
        ("suite", DEMO_SUITE, False), ("suite", SIMULATED_USERS_SUITE, True),
    ]
    assert Agent.objects.get(name="order-lookup").temperature == 0.7
    edited = Suite.objects.get(name=DEMO_SUITE)
    assert edited.description == "Edited by an admin." and edited.cases.count() == 8
    assert Suite.objects.get(name=SIMULATED_USERS_SUITE).cases.count() == 2


def test_it_reads_the_agent_files_without_the_harness_into_the_agents_apply_makes():
    # A host-only deployment has no `apply`: the demo reads its agent files itself, and must make the same agents.
    assert [created for _, created in demo_agents_read()] == [True, True, True]
    read = _agents()
    assert [created for _, created in demo_agents_read()] == [False, False, False]
    Agent.objects.all().delete()

    assert [created for _, created in demo_agents_ensure()] == [True, True, True]
    assert _agents() == read


def test_it_names_every_problem_of_files_it_cannot_apply_and_creates_no_agent(tmp_path, monkeypatch):
    broken = tmp_path / "project"
    shutil.copytree(PROJECT, broken)
    (broken / "agents" / "order-lookup.yaml").write_text(
        (broken / "agents" / "order-lookup.yaml").read_text().replace("simulated:sim-careful", "simulated:sim-nowhere")
    )
    monkeypatch.setattr(project, "PROJECT", broken)

    with pytest.raises(CommandError) as refused:
        call_command("demo_setup", "--no-run", stdout=io.StringIO())

    message = str(refused.value)
    assert "cannot be applied; nothing was changed" in message
    assert "agents/order-lookup.yaml: model: model 'simulated:sim-nowhere' is not configured" in message
    assert not Agent.objects.exists()
