"""Issue 33, reproduction 8, outside the web server: `apply --dry-run` imports none of the team's code, a save checks
an entry's kind in a child process without calling it, and `agenttest run` exits with its code when the team's code
never returns."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.core.management import call_command

from agenthost.models import Agent
from cases.files import FilesRejected, files_apply

# What these tests answer hangs on the team's code in processes of its own, not on the database
# engine: the PostgreSQL pass runs them, once.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.production_engine]

# Leaves a marker the moment it is imported: what a module's import-time code could do (open a connection, send).
MARKS_AT_IMPORT = """
import os
from pathlib import Path

Path(os.environ["TEAM_MARKERS"], "imported").touch()


def respond(messages, client, tools):
    return "ok"


def find_order(order_id):
    return "shipped"
"""
# The team's loop never returns: the case times out, and its thread is left behind for good.
NEVER_RETURNS = """
import threading


def respond(messages, client, tools):
    threading.Event().wait()
"""
AGENT_FILE = """
name: shop
runtime: python
entry: "{entry}"
model: scripted:scripted
outside_effects:
  find_order: false
"""
SUITE_FILE = """
name: shop
agent: shop
case_timeout_seconds: 1
"""
CASE_FILE = """
name: Status is looked up
turns:
- user_message: Where is order 1042?
  assertions:
  - type: outputContains
    params:
      text: shipped
mocks:
- function_name: find_order
  result: shipped
"""


def _repository(root: Path, package: str, source: str) -> Path:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "bot.py").write_text(textwrap.dedent(source))
    (root / "agents").mkdir()
    (root / "agents" / "shop.yaml").write_text(AGENT_FILE.format(entry=f"{package}.bot:respond"))
    (root / "suites" / "shop" / "cases").mkdir(parents=True)
    (root / "suites" / "shop" / "suite.yaml").write_text(SUITE_FILE)
    (root / "suites" / "shop" / "cases" / "status.yaml").write_text(CASE_FILE)
    return root


@pytest.fixture
def markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "markers"
    folder.mkdir()
    monkeypatch.setenv("TEAM_MARKERS", str(folder))
    return folder


def test_it_plans_a_dry_run_without_importing_the_teams_code(scripted_model, tmp_path, markers, monkeypatch):
    repo = _repository(tmp_path / "repo", "marking_shop", MARKS_AT_IMPORT)
    monkeypatch.chdir(repo)

    call_command("apply", str(repo), "--dry-run")

    assert not (markers / "imported").exists()
    assert "marking_shop.bot" not in sys.modules
    assert not Agent.objects.filter(name="shop").exists()


def test_it_checks_the_entry_at_a_real_apply_in_a_child_process(scripted_model, tmp_path, markers, monkeypatch):
    repo = _repository(tmp_path / "repo", "checked_shop", MARKS_AT_IMPORT)
    # The agent alone: its cases' tools are read in this process outside the web process (the worker runs the code).
    shutil.rmtree(repo / "suites")
    monkeypatch.chdir(repo)

    files_apply(directory=repo)

    # Imported to be checked — by a child process: this one never ran the module.
    assert (markers / "imported").exists()
    assert "checked_shop.bot" not in sys.modules
    assert Agent.objects.get(name="shop").entry == "checked_shop.bot:respond"


@pytest.mark.parametrize(
    ("runtime", "source", "attribute", "fragment"),
    [
        # A function needing an argument is no factory; calling it to find out would run the team's code.
        ("openai-agents", "def make(model):\n    raise SystemExit('called')\n", "make", "zero-argument"),
        ("pydantic-ai", "def make(model):\n    raise SystemExit('called')\n", "make", "zero-argument"),
        ("python", "def respond(messages):\n    return ''\n", "respond", "(messages, client, tools)"),
        ("python", "import sys\nsys.exit(3)\n", "respond", "SystemExit"),
    ],
)
def test_it_refuses_an_entry_of_the_wrong_kind_at_save_naming_the_entry(
    scripted_model, tmp_path, markers, monkeypatch, runtime, source, attribute, fragment
):
    package = f"kind_{runtime.replace('-', '_')}_{abs(hash((source, attribute))) % 10_000}"
    repo = tmp_path / "repo"
    (repo / package).mkdir(parents=True)
    (repo / package / "__init__.py").write_text("")
    (repo / package / "bot.py").write_text(source)
    (repo / "agents").mkdir()
    (repo / "agents" / "shop.yaml").write_text(
        f"name: shop\nruntime: {runtime}\nentry: \"{package}.bot:{attribute}\"\nmodel: scripted:scripted\n"
    )
    monkeypatch.chdir(repo)

    with pytest.raises(FilesRejected) as refused:
        files_apply(directory=repo)

    problems = [(problem.field, problem.message) for problem in refused.value.problems]
    assert any(field == "entry" and fragment in message for field, message in problems), problems
    assert not Agent.objects.filter(name="shop").exists()


@pytest.mark.slow
def test_it_exits_a_run_whose_team_code_never_returns_with_the_error_code(tmp_path):
    repo = _repository(tmp_path / "repo", "stuck_shop", NEVER_RETURNS)
    (repo / "agenttest.toml").write_text('providers_file = "providers.toml"\n')
    (repo / "providers.toml").write_text(
        '[providers.scripted]\nkind = "scripted"\nscript = "script.json"\n\n'
        '[[providers.scripted.models]]\nname = "scripted"\n'
    )
    (repo / "script.json").write_text('{"answers": [{"when": "order", "text": "never asked"}]}')
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AGENTTEST_", "DATABASE_URL"))}

    try:
        done = subprocess.run(
            [sys.executable, "-m", "agenttest", "run", "."], cwd=repo, env=env, capture_output=True, text=True,
            # A safety net, far past the case's 1 s deadline and its grace: before the fix the command never exits.
            timeout=180,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`agenttest run` did not exit: {exc.stdout!r} {exc.stderr!r}")

    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "timed out after 1 s" in done.stdout, done.stdout
