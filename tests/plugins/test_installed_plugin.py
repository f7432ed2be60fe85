"""A team's plugin beside an installed agenttest (the wheel in a fresh virtualenv outside the checkout, with its
runtime extras): once as an installed distribution with an `agenttest.plugins` entry point, once as a module
named by AGENTTEST_PLUGINS. Each time, from a temporary directory, only through the `agenttest` command: the checks
accept its provider kind, an agent calls its two typed tools in a conversation (executed), a recording turns their
real results into mocks, a suite may not extra-allow the sending one, and a run on the plugin's model mocks them or
blocks the unmocked one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.package_env import PackageEnv, package_env_fixture  # noqa: F401  (the fixture `package_env`)
from tests.plugins.conftest import LOOK_AND_NOTE, LOOKUP, OUTBOX_ENV, PROVIDERS_FILE, SEND

pytestmark = pytest.mark.slow
SAMPLE_PLUGIN = Path(__file__).with_name("sample_plugin.py")
MODULE = "acme_tickets"
PYPROJECT = f"""
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "acme-tickets"
version = "1.0"

[project.entry-points."agenttest.plugins"]
tickets = "{MODULE}"

[tool.setuptools]
py-modules = ["{MODULE}"]
"""
CHAT = f"""
import json
from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start
agent = Agent.objects.create(
    name="tickets", instruction="You help with tickets.", provider="rules", model="rulebook",
    functions=[{{"name": "{LOOKUP}"}}, {{"name": "{SEND}"}}],
)
conversation = conversation_start(agent=agent)
turn = conversation_send(conversation=conversation, text={LOOK_AND_NOTE!r})
calls = [[call.name, call.outcome] for call in turn.tool_calls]
print(json.dumps({{"id": conversation.pk, "calls": calls, "output": turn.output}}))
"""
LOOKUP_MOCK = {"function_name": LOOKUP, "result": '{"ticket_id": "T-7", "status": "closed"}'}
SEND_MOCK = {"function_name": SEND, "result": '{"sent": true}'}


def suite_file(path: Path, *, extra_allowed: list[str]) -> Path:
    def case(name: str, mocks: list[dict]) -> dict:
        return {
            "name": name,
            "turns": [{"user_message": LOOK_AND_NOTE, "assertions": [
                {"type": "toolCalled", "params": {"function": LOOKUP}},
            ]}],
            "mocks": mocks,
        }

    path.write_text(json.dumps({
        "suite": {"name": "Tickets", "agent": "tickets", "extra_allowed_functions": extra_allowed},
        "cases": [case("both mocked", [LOOKUP_MOCK, SEND_MOCK]), case("note unmocked", [LOOKUP_MOCK])],
    }))
    return path


@pytest.fixture
def installed_distribution(package_env: PackageEnv, tmp_path) -> dict[str, str]:
    """The environment of a virtualenv that has the plugin's distribution installed too. The virtualenv may be
    shared with pytest processes running beside this one (tests/package_env.py), so the distribution goes into a
    directory of its own on the path: its entry point is found all the same, and nobody else sees it."""
    source = tmp_path / "acme-tickets"
    source.mkdir()
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / f"{MODULE}.py").write_text(SAMPLE_PLUGIN.read_text())
    site = tmp_path / "site-packages"
    installed = package_env.run_in_venv(
        ["pip", "install", "--quiet", "--no-deps", "--target", str(site), str(source)], cwd=tmp_path
    )
    assert installed.returncode == 0, installed.stderr
    return {"PYTHONPATH": str(site)}


def use_the_plugin(package_env: PackageEnv, project: Path, env: dict[str, str]) -> None:
    outbox = project / "outbox.jsonl"
    (project / "providers.toml").write_text(PROVIDERS_FILE)
    env = {
        **env, "AGENTTEST_DEBUG": "1", "AGENTTEST_PROVIDERS_FILE": str(project / "providers.toml"),
        OUTBOX_ENV: str(outbox),
    }

    def agenttest(*args: str, expect: int = 0) -> str:
        done = package_env.run_in_venv(["agenttest", *args], cwd=project, env=env)
        assert done.returncode == expect, f"agenttest {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout + done.stderr

    assert "System check identified no issues" in agenttest("check")
    agenttest("migrate", "--verbosity", "0")

    chat = json.loads(agenttest("shell", "--command", CHAT).strip().splitlines()[-1])
    assert chat["calls"] == [[LOOKUP, "executed"], [SEND, "executed"]]
    assert chat["output"].startswith("Hello from the rulebook.")
    [note] = [json.loads(line) for line in outbox.read_text().splitlines()]
    assert note == {"ticket_id": "T-7", "text": "Customer asks about T-7", "conversation": chat["id"]}

    agenttest("record_conversation", str(chat["id"]))
    exported = project / "recorded.json"
    agenttest("cases", "export", "Recorded: tickets", "--output", str(exported))
    recorded = json.loads(exported.read_text())
    mocks = [(mock["function_name"], json.loads(mock["result"])) for mock in recorded["cases"][0]["mocks"]]
    assert mocks == [
        (LOOKUP, {"ticket_id": "T-7", "status": "waiting", "owner": "agent7"}),
        (SEND, {"sent": True, "ticket_id": "T-7"}),
    ]

    refused = agenttest("cases", "import", str(suite_file(project / "allow-send.json", extra_allowed=[SEND])), expect=1)
    assert f"{SEND} has effects outside agenttest; mock it in the cases instead of allowing it" in refused
    agenttest("cases", "import", str(suite_file(project / "tickets.json", extra_allowed=[LOOKUP])))

    ran = agenttest("run_suite", "Tickets", "--models", "rules:rulebook", "--inline", expect=1)
    assert "PASSED  both mocked  on rules:rulebook" in ran
    assert "FAILED  note unmocked  on rules:rulebook" in ran
    assert len(outbox.read_text().splitlines()) == 1, "the run sent no note: mocked once, blocked once"


def test_it_loads_an_installed_plugin_distribution_by_its_entry_point(package_env, installed_distribution, tmp_path):
    project = tmp_path / "project"
    project.mkdir()

    use_the_plugin(package_env, project, installed_distribution)


def test_it_loads_a_plugin_module_named_by_agenttest_plugins(package_env, tmp_path):
    plugins = tmp_path / "team-plugins"
    plugins.mkdir()
    (plugins / f"{MODULE}.py").write_text(SAMPLE_PLUGIN.read_text())
    project = tmp_path / "project"
    project.mkdir()

    use_the_plugin(package_env, project, {"AGENTTEST_PLUGINS": MODULE, "PYTHONPATH": str(plugins)})
