"""The project file, agenttest.toml (issue 25, item 10): found from the working directory up to the repository's root
or named by AGENTTEST_CONFIG; what it says reaches the settings unless an environment variable overrides it; its
relative paths are its directory's; every problem names the file and the key; `agenttest init` writes a starting one.

The end-to-end line — `agenttest run .` in a copy of examples/order-support with no variable replays green — is
tests/test_files_example.py, on the installed wheel."""

from __future__ import annotations

import io
import json
import os
import runpy
import shutil
import sys
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from agenthost.llm import registry
from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import ScriptedProvider
from agenttest.cli import main
from agenttest.plugin_loading import plugins_load
from common.project_file import (
    RUN_MODES,
    ProjectFileError,
    project_file_load,
    project_file_locate,
    project_read,
)
from common.provider_config import normalise_providers
from runs.models import Run

BASE_DIR = Path(__file__).resolve().parent.parent
SETTINGS = BASE_DIR / "agenttest" / "settings.py"
EXAMPLE = BASE_DIR / "examples" / "order-support"
OVERRIDES = ("AGENTTEST_CONFIG", "AGENTTEST_PLUGINS", "AGENTTEST_PROVIDERS_FILE", "AGENTTEST_MCP_FILE")
PROVIDER = '[providers.{name}]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n\n[[providers.{name}.models]]\n' \
    'name = "m"\n'


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_it_finds_the_nearest_file_upward_and_looks_no_higher_than_the_repository(tmp_path):
    outer = write(tmp_path / "agenttest.toml")
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    deep = tmp_path / "repo" / "a" / "b"
    deep.mkdir(parents=True)
    # A worktree's or submodule's .git is a file: a repository's root all the same.
    write(tmp_path / "worktree" / ".git", "gitdir: /elsewhere\n")
    (tmp_path / "worktree" / "sub").mkdir()
    (tmp_path / "plain" / "sub").mkdir(parents=True)

    assert project_file_locate({}, deep) is None
    assert project_file_locate({}, tmp_path / "worktree" / "sub") is None
    assert project_file_locate({}, tmp_path / "plain" / "sub") == outer
    repo_file = write(tmp_path / "repo" / "agenttest.toml")
    assert project_file_locate({}, deep) == repo_file
    nearer = write(tmp_path / "repo" / "a" / "agenttest.toml")
    assert project_file_locate({"AGENTTEST_CONFIG": ""}, deep) == nearer

    # AGENTTEST_CONFIG names one (relative to the working directory), wherever it is; /dev/null reads none.
    assert project_file_locate({"AGENTTEST_CONFIG": "../../../agenttest.toml"}, deep) == outer
    assert project_file_locate({"AGENTTEST_CONFIG": os.devnull}, deep) is None
    with pytest.raises(ProjectFileError) as missing:
        project_file_locate({"AGENTTEST_CONFIG": "nope.toml"}, deep)
    assert str(missing.value) == (
        f"{deep / 'nope.toml'}: named by AGENTTEST_CONFIG, does not exist (set it to /dev/null to read none)"
    )


def test_it_gives_the_settings_what_the_file_says_unless_a_variable_overrides_it(tmp_path, monkeypatch):
    project = tmp_path / "team"
    write(project / "agenttest.toml", 'plugins = ["team_tools"]\n\n' + PROVIDER.format(name="local") + """
[mcp_servers.parcels]
command = "python"
args = ["parcels_mcp.py"]

[run]
directory = "files"
mode = "replay"
models = ["local:m"]
junit = "reports/junit.xml"
""")
    (project / "files" / "agents").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere / "providers.toml", PROVIDER.format(name="other"))
    write(elsewhere / "mcp.toml", '[servers.tickets]\ncommand = "python"\ncwd = "srv"\n')
    for name in OVERRIDES:
        monkeypatch.delenv(name, raising=False)
    # From a directory below the file's: the file is found, and its paths are its directory's, not this one's.
    monkeypatch.chdir(project / "files" / "agents")

    from_file = runpy.run_path(str(SETTINGS))

    assert from_file["AGENTTEST_PROJECT_FILE"] == str(project / "agenttest.toml")
    assert from_file["AGENTTEST_PLUGINS"][-1] == "team_tools"
    assert list(from_file["AGENTTEST_PROVIDERS"]) == ["local"]  # not the demo's nor OpenAI's: the file says
    assert from_file["AGENTTEST_PROVIDERS_DIR"] == str(project)
    assert from_file["AGENTTEST_MCP_SERVERS"]["parcels"]["cwd"] == str(project)
    assert from_file["AGENTTEST_RUN_DEFAULTS"] == {
        "directory": project / "files", "mode": "replay", "models": ["local:m"],
        "junit": project / "reports" / "junit.xml",
    }

    monkeypatch.setenv("AGENTTEST_PLUGINS", "other_tools")
    monkeypatch.setenv("AGENTTEST_PROVIDERS_FILE", str(elsewhere / "providers.toml"))
    monkeypatch.setenv("AGENTTEST_MCP_FILE", str(elsewhere / "mcp.toml"))
    overridden = runpy.run_path(str(SETTINGS))

    assert overridden["AGENTTEST_PLUGINS"][-1] == "other_tools" and "team_tools" not in overridden["AGENTTEST_PLUGINS"]
    assert list(overridden["AGENTTEST_PROVIDERS"]) == ["other"]
    assert overridden["AGENTTEST_PROVIDERS_DIR"] == str(elsewhere)
    assert list(overridden["AGENTTEST_MCP_SERVERS"]) == ["tickets"]
    assert overridden["AGENTTEST_MCP_SERVERS"]["tickets"]["cwd"] == str(elsewhere / "srv")

    monkeypatch.setenv("AGENTTEST_CONFIG", os.devnull)
    monkeypatch.setenv("AGENTTEST_PLUGINS", "")
    none = runpy.run_path(str(SETTINGS))
    assert none["AGENTTEST_PROJECT_FILE"] == "" and none["AGENTTEST_RUN_DEFAULTS"] == {}
    assert "team_tools" not in none["AGENTTEST_PLUGINS"] and "other_tools" not in none["AGENTTEST_PLUGINS"]


def test_it_imports_the_plugins_from_the_projects_directory_whatever_the_working_directory(tmp_path, monkeypatch,
                                                                                            settings):
    write(tmp_path / "team" / "team_plugin_of_the_project.py", "LOADED = True\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "team_plugin_of_the_project", raising=False)
    settings.AGENTTEST_PLUGINS = ["team_plugin_of_the_project"]

    with pytest.raises(ImproperlyConfigured, match="'team_plugin_of_the_project' .*No module named"):
        plugins_load()

    settings.AGENTTEST_PROJECT_DIR = str(tmp_path / "team")
    settings.AGENTTEST_PROJECT_FILE = str(tmp_path / "team" / "agenttest.toml")
    plugins_load()
    assert sys.modules["team_plugin_of_the_project"].LOADED
    # After the installed packages: a team's `cases/` folder cannot shadow agenttest's.
    assert sys.path[-1] == str(tmp_path / "team")


def test_it_reads_a_kinds_file_options_from_the_directory_of_the_file_that_set_them(tmp_path, monkeypatch, settings):
    project = tmp_path / "team"
    write(project / "script.json", json.dumps({"answers": [{"text": "from the team's script"}]}))
    write(project / "agenttest.toml", '[providers.ci]\nkind = "scripted"\nscript = "script.json"\n'
          'requests_log = "requests.jsonl"\n\n[[providers.ci.models]]\nname = "m"\n')
    loaded = project_file_load(project / "agenttest.toml")
    monkeypatch.chdir(tmp_path)
    settings.AGENTTEST_PROVIDERS = loaded.providers
    settings.AGENTTEST_PROVIDERS_DIR = ""
    # Read from the working directory, as before project files, the relative script is not there.
    assert registry.configuration_problems() == [
        "provider 'ci': field 'script': script file script.json: the file does not exist"
    ]

    settings.AGENTTEST_PROVIDERS_DIR = str(loaded.providers_file.parent)
    ScriptedProvider.reset("ci")
    try:
        assert registry.configuration_problems() == []
        answer = registry.get_provider("ci").complete(
            ModelRequest(model="m", messages=[{"role": "user", "content": "hello"}])
        )
    finally:
        ScriptedProvider.reset("ci")
    assert answer.text == "from the team's script"
    assert json.loads((project / "requests.jsonl").read_text())["messages"][0]["content"] == "hello"


@pytest.mark.parametrize(("text", "expected"), [
    ('plugin = ["order_tools"]', "plugin: unknown key (did you mean 'plugins'? keys: plugins, providers_file, "
     "providers, mcp_file, mcp_servers, var_dir, run)"),
    ('var_dir = 3', "var_dir: must be a path (relative to this file's directory), got 3"),
    ('plugins = "order_tools"', "plugins: must be a list of importable module paths (e.g. [\"shop.tools\"]), got "
     "'order_tools'"),
    ('plugins = ["order-tools"]', "plugins: must be a list of importable module paths"),
    ('plugins = ["a"]\n\n[run]\nmode = replay', "not valid TOML (Invalid value (at line 4, column 8))"),
    ("run = 3", "run: must be a table ([run]) of defaults for `agenttest run`, got 3"),
    ('[run]\nmode = "replai"', "run.mode: must be one of live, record, replay, got 'replai'"),
    ('[run]\nmodle = "live"', "run.modle: unknown key (did you mean 'mode'? [run] keys: directory, suites, models"),
    ("[run]\ntrials = 0", "run.trials: must be a whole number ≥ 1, got 0"),
    ('[run]\nmodels = ["gpt-4o"]', "run.models: each must be a provider:model key (e.g. \"local:gpt-4o-mini\"), "
     "got 'gpt-4o'"),
    ('[run]\ndirectory = "nowhere"', "run.directory: {dir}/nowhere is not a directory"),
    ('[run]\njunit = ""', "run.junit: must be a path (relative to this file's directory), got ''"),
    ('providers_file = "missing.toml"', "providers_file: model provider file {dir}/missing.toml: the file does not "
     "exist"),
    ('providers_file = "p.toml"\n' + PROVIDER.format(name="x"), "providers_file and [providers.<name>] tables: give "
     "one or the other"),
    ("[providers]", "providers: must hold at least one [providers.<name>] table"),
    ('[providers.local]\nkind = "openai"\napi_key = "sk-live-secret"\n[[providers.local.models]]\nname = "m"',
     "providers: provider 'local': field 'api_key' is not allowed; keys never go in this file"),
    ('[mcp_servers.time]\nargs = ["x"]', "mcp_servers: server 'time': field 'command' must name the program"),
    ('mcp_file = "mcp.toml"', "mcp_file: MCP server file {dir}/mcp.toml: the file does not exist"),
])
def test_it_names_the_file_and_the_key_of_every_problem(tmp_path, text, expected):
    path = write(tmp_path / "agenttest.toml", text)

    with pytest.raises(ProjectFileError) as refused:
        project_file_load(path)

    lines = refused.value.lines()
    assert all(line.startswith(f"{path}: ") for line in lines), lines
    assert any(expected.format(dir=tmp_path) in line for line in lines), lines
    assert "sk-live-secret" not in str(refused.value)


def test_it_refuses_a_bad_file_with_exit_code_2_and_reports_it_as_a_system_check_error(tmp_path, monkeypatch,
                                                                                       capsys, settings):
    path = write(tmp_path / "agenttest.toml", '[run]\nmode = "replai"\n')
    monkeypatch.delenv("AGENTTEST_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)

    # The command stops before Django starts: no traceback, every problem on its own line.
    with pytest.raises(SystemExit) as exited:
        main(["check"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"error: {path}: run.mode: must be one of live, record, replay, got 'replai'\n"

    # A server started another way (manage.py runserver, migrate) is stopped by the system check.
    try:
        project_read()
    except ProjectFileError as exc:
        settings.AGENTTEST_PROJECT_PROBLEMS = exc.lines()
    errors = [message for message in run_checks() if message.id == "agenttest.E011"]
    assert [error.msg for error in errors] == [
        f"project file: {path}: run.mode: must be one of live, record, replay, got 'replai'"
    ]


def test_it_knows_the_run_modes_a_run_has():
    assert RUN_MODES == tuple(Run.Mode.values)


def test_it_writes_a_starting_file_from_what_the_directory_holds_and_never_overwrites_one(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", "agenttest.toml", "providers.toml"))
    write(repo / "team" / "tools.py", "from agenttest.plugin import tool\n")
    write(repo / "team" / "helpers.py", "import json\n")
    # A virtualenv's modules are not the team's, whatever they import.
    write(repo / ".venv" / "pyvenv.cfg")
    write(repo / "env" / "pyvenv.cfg")
    write(repo / "env" / "vendored.py", "import agenttest.plugin\n")
    write(repo / "mcp.toml", '[servers.parcels]\ncommand = "python"\nargs = ["parcels_mcp.py"]\n')
    monkeypatch.delenv("AGENTTEST_CONFIG", raising=False)
    monkeypatch.chdir(repo)

    call_command("init", stdout=io.StringIO())
    written = project_file_load(repo / "agenttest.toml")

    assert written.plugins == ["order_tools", "team.tools"]
    # The agents' model (local:gpt-4o-mini) is not one agenttest brings: its provider is written out.
    assert written.providers == normalise_providers(
        {"local": {"kind": "openai", "base_url": "http://127.0.0.1:8001/v1", "models": [{"name": "gpt-4o-mini"}]}}
    )
    assert list(written.mcp_servers) == ["parcels"] and written.mcp_servers["parcels"]["cwd"] == str(repo)
    assert written.run == {"mode": "replay"}  # recordings/ is here
    text = (repo / "agenttest.toml").read_text()
    assert "# providers_file = " in text and "# [mcp_servers.parcels]" in text  # the rest, commented

    write(repo / "agenttest.toml", "# the team's own\n")
    with pytest.raises(CommandError) as refused:
        call_command("init", stdout=io.StringIO())
    assert refused.value.returncode == 2
    assert str(refused.value) == f"{repo / 'agenttest.toml'} already exists; --force overwrites it"
    assert (repo / "agenttest.toml").read_text() == "# the team's own\n"

    # Files in a subdirectory, a providers file beside: --force writes the file again from them.
    (repo / "ci").mkdir()
    for name in ("agents", "suites"):
        shutil.move(str(repo / name), str(repo / "ci" / name))
    shutil.rmtree(repo / "recordings")
    write(repo / "providers.toml", PROVIDER.format(name="local"))
    call_command("init", "--force", stdout=io.StringIO())
    again = project_file_load(repo / "agenttest.toml")
    assert again.providers_file == repo / "providers.toml" and list(again.providers) == ["local"]
    assert again.run == {"directory": repo / "ci"}
