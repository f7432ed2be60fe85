"""A team's first hour on the command line (issue 37, item 3): with an editable install of a checkout, the commands
run in the team's own directory use the team's database, not the checkout's; the commands that serve nothing work
with no secret key and no DEBUG; the ones that serve or write a deployment's data still demand them, by name.

Each test runs the installed `agenttest` console script as a newcomer runs it: in a fresh directory holding an
agenttest.toml, with no AGENTTEST_* variable and no DATABASE_URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent
AGENTTEST = Path(sys.executable).parent / "agenttest"


def agenttest(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {
        name: value for name, value in os.environ.items()
        if not name.startswith(("AGENTTEST_", "CELERY_", "DATABASE_URL", "DJANGO_"))
    }
    clean.update(env)
    return subprocess.run(
        [str(AGENTTEST), *args], cwd=cwd, env=clean, capture_output=True, text=True, timeout=180
    )


@pytest.fixture
def team(tmp_path: Path) -> Path:
    """A team's repository with the project file `agenttest init` writes (its root marked by .git)."""
    repository = tmp_path / "team"
    (repository / ".git").mkdir(parents=True)
    result = agenttest("init", cwd=repository)
    assert result.returncode == 0, result.stderr
    return repository


def test_it_keeps_a_projects_database_in_the_projects_var_directory_not_the_checkouts(team):
    assert (BASE_DIR / "manage.py").is_file()  # the editable install of the issue: the checkout is agenttest's home
    checkout_database = BASE_DIR / "var" / "agenttest.sqlite3"
    before = checkout_database.stat().st_mtime_ns if checkout_database.exists() else None
    (team / "sub").mkdir()

    migrated = agenttest("migrate", "-v", "0", cwd=team / "sub", AGENTTEST_DEBUG="1")
    assert migrated.returncode == 0, migrated.stderr
    created = agenttest(
        "createsuperuser", "--noinput", "--username", "admin", "--email", "a@example.com", cwd=team,
        AGENTTEST_DEBUG="1", DJANGO_SUPERUSER_PASSWORD="change-me-now",
    )

    # The name is free in the team's own database, whoever took it in the checkout's.
    assert created.returncode == 0, created.stderr
    assert (team / "var" / "agenttest.sqlite3").is_file()
    assert not (team / "sub" / "var").exists()
    after = checkout_database.stat().st_mtime_ns if checkout_database.exists() else None
    assert after == before


def test_it_takes_the_var_directory_the_project_file_names_and_the_variable_over_both(team, tmp_path):
    with (team / "agenttest.toml").open("r+", encoding="utf-8") as file:
        text = file.read()
        file.seek(0)
        file.write('var_dir = "state"\n' + text)
    shown = "from django.conf import settings; print(settings.DATABASES['default']['NAME'])"

    named = agenttest("shell", "-c", shown, cwd=team, AGENTTEST_DEBUG="1")
    overridden = agenttest("shell", "-c", shown, cwd=team, AGENTTEST_DEBUG="1", AGENTTEST_VAR_DIR=str(tmp_path / "o"))

    assert named.stdout.splitlines()[-1] == str(team / "state" / "agenttest.sqlite3"), named.stderr
    assert overridden.stdout.splitlines()[-1] == str(tmp_path / "o" / "agenttest.sqlite3"), overridden.stderr


def test_it_runs_the_commands_that_serve_nothing_with_no_secret_key_and_no_debug(team):
    listed = agenttest("--help", cwd=team)
    assert listed.returncode == 0, listed.stderr
    # agenttest's own commands, not Django's core list with a settings error under it.
    for command in ("[cases]", "apply", "export", "schema", "[runs]", "run_suite", "init"):
        assert command in listed.stdout, listed.stdout
    assert "error" not in listed.stderr.lower()

    checked = agenttest("check", cwd=team)
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout
    assert "Traceback" not in checked.stderr

    schema = agenttest("schema", "agent", cwd=team)
    assert schema.returncode == 0, schema.stderr
    assert json.loads(schema.stdout)["title"]

    helped = agenttest("apply", "--help", cwd=team)
    assert helped.returncode == 0 and "DIR" in helped.stdout.upper(), helped.stderr


@pytest.mark.parametrize("command", [["migrate"], ["serve"], ["createsuperuser", "--noinput"]])
def test_it_still_demands_a_secret_key_of_a_command_that_serves_or_writes_a_deployments_data(team, command):
    result = agenttest(*command, cwd=team)

    assert result.returncode != 0
    assert "AGENTTEST_SECRET_KEY is required when AGENTTEST_DEBUG is off" in result.stderr
    assert not (team / "var" / "agenttest.sqlite3").exists()
