"""agenttest as a package: what the wheel holds, the `agenttest` command, and an install outside the checkout.

The slow tests build the wheel and install it with its runtime extras (`openai-agents`, `pydantic-ai`) into a fresh
virtualenv in a temporary directory (tests/package_env.py) and run every command from another temporary directory, as
a team would in its own repository.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenttest.cli import worker_command
from tests.package_env import CHECKOUT_VARIABLES, PackageEnv, package_env_fixture  # noqa: F401  (`package_env`)
from tests.ports import free_port
from tests.workers import WAIT_SECONDS

BASE_DIR = Path(__file__).resolve().parent.parent
PACKAGES = ("agenttest", "common", "agenthost", "cases", "runs", "recording", "traces", "agenttest_demo")
COMMANDS = ("migrate", "run_suite", "worker", "serve", "demo_setup", "cases", "recordings", "traces", "collectstatic",
            "check", "init", "run")
DEBUG = {"AGENTTEST_DEBUG": "1"}
# The demo ships in the wheel as a plugin a deployment turns on.
DEMO = {**DEBUG, "AGENTTEST_DEMO": "1"}


def requirement_name(requirement: str) -> str:
    """`celery[redis]>=5.4,<6` → `celery`, normalised as PyPI compares names."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~; ]", requirement.strip(), maxsplit=1)[0]).lower()


def requirements_in(name: str) -> set[str]:
    lines = (BASE_DIR / "requirements" / name).read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith(("#", "-r"))}


def checkout_python(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """This checkout's Python, from `cwd`, with the checkout importable and nothing else of the test's environment."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith(CHECKOUT_VARIABLES)}
    clean.update(PYTHONPATH=str(BASE_DIR), **env)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=clean, capture_output=True, text=True, timeout=WAIT_SECONDS, check=False
    )


def gunicorn_config(printed: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)\s+= (.*)$", printed, re.MULTILINE))


def test_it_declares_in_pyproject_exactly_the_ranges_ci_installs():
    project = tomllib.loads((BASE_DIR / "pyproject.toml").read_text())["project"]

    assert set(project["dependencies"]) == requirements_in("base.in")
    assert set(project["optional-dependencies"]["dev"]) == requirements_in("dev.in")
    assert project["scripts"] == {"agenttest": "agenttest.cli:main"}


def test_it_declares_every_distribution_the_packages_import():
    declared = {requirement_name(line) for line in requirements_in("base.in")}
    # The pytest plugin for users' own tests runs only under their pytest.
    optional = {("pytest", Path("agenthost/testing/fixtures.py")),
                # The `openai-agents` runtime, imported only for an agent naming it: the `openai-agents` extra.
                ("agents", Path("agenthost/runtimes/openai_agents.py")),
                ("agents", Path("agenthost/runtimes/guard.py")),
                # The `pydantic-ai` runtime, likewise: the `pydantic-ai` extra (pydantic-core comes with it).
                ("pydantic_ai", Path("agenthost/runtimes/pydantic_ai.py")),
                ("pydantic_core", Path("agenthost/runtimes/pydantic_ai.py")),
                # The `langgraph` runtime, likewise: the `langgraph` extra.
                *((top, Path("agenthost/runtimes/langgraph.py"))
                  for top in ("langgraph", "langchain_core", "langchain_openai"))}
    distributions = packages_distributions()
    undeclared = set()
    for package in PACKAGES:
        for path in sorted((BASE_DIR / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {name.partition(".")[0] for name in names}:
                    if top in sys.stdlib_module_names or top in PACKAGES or top == "__future__":
                        continue
                    if (top, path.relative_to(BASE_DIR)) in optional:
                        continue
                    owners = {requirement_name(owner) for owner in distributions.get(top, [top])}
                    if not owners & declared:
                        undeclared.add(f"{path.relative_to(BASE_DIR)} imports {top} ({', '.join(sorted(owners))})")

    assert not undeclared, "not in requirements/base.in and pyproject.toml:\n" + "\n".join(sorted(undeclared))


def test_it_lists_every_command_in_its_help_run_from_the_checkout(tmp_path):
    done = checkout_python(["-m", "agenttest", "--help"], tmp_path, **DEMO)

    assert done.returncode == 0, done.stderr
    assert "Type 'agenttest help <subcommand>'" in done.stdout
    listed = set(re.findall(r"^    (\w+)$", done.stdout, re.MULTILINE))
    assert set(COMMANDS) <= listed


@pytest.mark.parametrize(
    ("arguments", "env", "bind"),
    [
        ([], {}, "['127.0.0.1:8000']"),
        (["--bind", "127.0.0.1:9123"], {}, "['127.0.0.1:9123']"),
        ([], {"PORT": "9125"}, "['0.0.0.0:9125']"),
    ],
)
def test_it_serves_with_the_procfiles_gunicorn_settings_on_the_address_asked_for(tmp_path, arguments, env, bind):
    done = checkout_python(
        ["-m", "agenttest", "serve", *arguments, "--print-config"], tmp_path, AGENTTEST_REQUEST_TIMEOUT="77", **env,
        **DEBUG,
    )

    assert done.returncode == 0, done.stderr
    config = gunicorn_config(done.stdout)
    assert config["bind"] == bind
    assert config["config"] == "python:agenttest.gunicorn_conf"
    assert config["worker_class"] == "gthread" and int(config["timeout"]) == 77 + 30


OPTION_WORDS = st.sampled_from(
    ["--loglevel", "INFO", "-n", "w1@%h", "--pool", "solo", "-Ofair", "--without-gossip", "-E", "--max-tasks-per-child"]
)
QUEUE_OPTIONS = st.sampled_from([["-Q", "runs,other"], ["--queues", "other"], ["--queues=other"], ["-Qother"]])
CONCURRENCY_OPTIONS = st.sampled_from([["-c", "2"], ["--concurrency", "3"], ["--concurrency=4"], ["-c4"]])


@given(
    before=st.lists(OPTION_WORDS, max_size=4),
    queues=st.none() | QUEUE_OPTIONS,
    concurrency=st.none() | CONCURRENCY_OPTIONS,
    after=st.lists(OPTION_WORDS, max_size=4),
)
def test_it_starts_the_worker_on_the_runs_queue_one_task_at_a_time_unless_told_otherwise(
    before, queues, concurrency, after
):
    arguments = [*before, *(queues or []), *(concurrency or []), *after]

    command = worker_command(arguments)

    assert command[:6] == [sys.executable, "-m", "celery", "-A", "agenttest", "worker"]
    defaults = command[6 : len(command) - len(arguments)]
    assert command[len(command) - len(arguments) :] == arguments, "every option passes through, in its order"
    assert ("-Q" in defaults) is (queues is None) and ("--concurrency" in defaults) is (concurrency is None)
    if queues is None:
        assert defaults[defaults.index("-Q") + 1] == "runs"
    if concurrency is None:
        assert defaults[defaults.index("--concurrency") + 1] == "1"


def test_it_keeps_var_in_the_checkout_and_resolves_a_relative_var_dir_from_the_working_directory(tmp_path):
    show = ["-c", "import django; django.setup(); from django.conf import settings; print(settings.VAR_DIR)"]

    default = checkout_python(show, tmp_path, DJANGO_SETTINGS_MODULE="agenttest.settings", **DEBUG)
    relative = checkout_python(
        show, tmp_path, DJANGO_SETTINGS_MODULE="agenttest.settings", AGENTTEST_VAR_DIR="state", **DEBUG
    )

    assert default.returncode == 0 and relative.returncode == 0, default.stderr + relative.stderr
    assert default.stdout.strip() == str(BASE_DIR / "var")
    assert relative.stdout.strip() == str(tmp_path / "state") and (tmp_path / "state").is_dir()


# Installed from the wheel, outside the checkout.


@pytest.mark.slow
def test_it_builds_a_wheel_of_agenttests_packages_with_their_templates_static_files_and_migrations(package_env):
    names = zipfile.ZipFile(package_env.wheel).namelist()

    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == set(PACKAGES), "nothing installs `agents`, `control`, `bench`, `tests` or `scripts`"
    for data in ("templates/base.html", "templates/registration/login.html", "static/css/app.css"):
        assert f"agenttest/{data}" in names
    # Each app ships its own pages (decision 0040).
    for data in ("agenthost/templates/agenthost/chat.html", "agenthost/static/agenthost/chat.js",
                 "agenthost/templates/agenthost/conversation.html", "agenthost/static/agenthost/conversation.css",
                 "runs/templates/runs/run_detail.html", "runs/static/runs/runs.js",
                 "cases/templates/admin/cases/case/change_form.html", "cases/static/cases/case_form.js",
                 "recording/templates/recording/_make_cases.html", "recording/static/recording/recording.css",
                 "traces/templates/traces/conversations.html", "traces/static/traces/traces.css"):
        assert data in names
    for migration in ("agenttest/migrations/0001_cache_table.py", "agenthost/migrations/0001_initial.py"):
        assert migration in names
    assert {"cases/migrations/0001_initial.py", "runs/migrations/0001_initial.py"} <= set(names)
    assert "agenttest/cli.py" in names and not any("__pycache__" in name for name in names)
    # The demo plugin with its models' configuration, its project directory (the agent, suite and case files
    # demo_setup applies: every one of them) and its recordings (scripts/demo and a team's CI replay them).
    assert "agenttest_demo/providers.toml" in names
    project = BASE_DIR / "agenttest_demo" / "project"
    project_files = {f"agenttest_demo/project/{path.relative_to(project).as_posix()}"
                     for path in project.rglob("*") if path.is_file()}
    assert "agenttest_demo/project/suites/order-support-demo/suite.yaml" in project_files
    assert "agenttest_demo/project/agents/order-router.md" in project_files
    assert project_files <= set(names), sorted(project_files - set(names))
    assert "agenttest_demo/recordings/order-support-demo/recordings.json" in names


@pytest.mark.slow
def test_it_installs_beside_the_openai_agents_sdk_without_either_shadowing_the_other(package_env, tmp_path):
    script = (
        "import agents, agenthost, agenttest, cases, runs, recording; agents.Runner; "
        "print(agents.__file__); print(agenthost.__file__)"
    )

    done = package_env.run_in_venv(["python", "-c", script], cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    sdk, host = (Path(line) for line in done.stdout.split())
    assert sdk.is_relative_to(package_env.venv) and sdk.parent.name == "agents"
    assert host.is_relative_to(package_env.venv), "the host comes from the installed wheel, not the checkout"


@pytest.mark.slow
def test_it_lists_every_command_in_agenttest_help_once_installed(package_env, tmp_path):
    done = package_env.run_in_venv(["agenttest", "--help"], cwd=tmp_path, env=DEMO)
    without_demo = package_env.run_in_venv(["agenttest", "--help"], cwd=tmp_path, env=DEBUG)

    assert done.returncode == 0, done.stderr
    assert set(COMMANDS) <= set(re.findall(r"^    (\w+)$", done.stdout, re.MULTILINE))
    assert without_demo.returncode == 0, without_demo.stderr
    assert set(re.findall(r"^    (\w+)$", without_demo.stdout, re.MULTILINE)) & set(COMMANDS) == set(COMMANDS) - {
        "demo_setup"
    }


@pytest.mark.slow
def test_it_imports_a_teams_module_from_the_directory_the_command_runs_in(package_env, tmp_path):
    (tmp_path / "team_tools.py").write_text("ANSWER = 42\n")
    script = "import team_tools; print(team_tools.ANSWER)"

    done = package_env.run_in_venv(["agenttest", "shell", "--no-imports", "-c", script], cwd=tmp_path, env=DEBUG)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "42"


@pytest.fixture(scope="module")
def demo_dir(package_env: PackageEnv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A team's directory where `agenttest migrate` and `agenttest demo_setup` ran (one queued run, not executed)."""
    cwd = tmp_path_factory.mktemp("team")
    for command in (["migrate", "--noinput"], ["demo_setup"]):
        done = package_env.run_in_venv(
            ["agenttest", *command], cwd=cwd, env={**DEMO, "AGENTTEST_ADMIN_PASSWORD": "demo-password-1"}
        )
        assert done.returncode == 0, done.stderr
    return cwd


def run_status(package_env: PackageEnv, cwd: Path, run_id: int) -> str:
    script = f"from runs.models import Run; print(Run.objects.get(pk={run_id}).status)"
    done = package_env.run_in_venv(["agenttest", "shell", "--no-imports", "-c", script], cwd=cwd, env=DEBUG)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
def test_it_keeps_its_database_and_broker_in_var_of_the_working_directory_never_in_site_packages(
    package_env, demo_dir
):
    assert (demo_dir / "var" / "agenttest.sqlite3").is_file() and (demo_dir / "var" / "broker.sqlite3").is_file()
    assert not list(package_env.venv.rglob("*.sqlite3"))


@pytest.mark.slow
def test_it_runs_a_suite_inline_with_the_installed_command(package_env, demo_dir):
    done = package_env.run_in_venv(
        ["agenttest", "run_suite", "Order support demo", "--models", "simulated:sim-careful", "--inline"],
        cwd=demo_dir, env=DEMO,
    )

    # The demo suite has one case that fails on purpose (an unmocked email is blocked): exit 1, every case ran.
    assert done.returncode == 1, done.stderr
    assert "[9/9]" in done.stdout and "1 of 9 results failed" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_it_executes_the_queued_demo_run_on_agenttest_worker(package_env, demo_dir):
    log_path = demo_dir / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [str(package_env.bin / "agenttest"), "worker", "--loglevel", "INFO"], cwd=demo_dir,
            env={**package_env.environment(), **DEMO}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while (status := run_status(package_env, demo_dir, 1)) in ("pending", "running"):
            assert worker.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, f"run #1 still {status}:\n{log_path.read_text()}"
            time.sleep(0.5)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)

    assert status == "failed", "both simulated models ran every case; the hasty one and the blocked email fail"
    banner = log_path.read_text()
    assert re.search(r"concurrency: 1 \(prefork\)", banner) and re.search(r"\.> runs\s+exchange=runs", banner)


@pytest.fixture
def served(package_env: PackageEnv, tmp_path: Path) -> Iterator[str]:
    """`agenttest serve` with production settings (DEBUG off, collected static files), over plain HTTP."""
    env = {
        "AGENTTEST_SECRET_KEY": "s" * 50,
        "AGENTTEST_SECURE_SSL_REDIRECT": "0",
        "AGENTTEST_EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend",
        "PYTHONUNBUFFERED": "1",
    }
    for command in (["migrate", "--noinput"], ["collectstatic", "--noinput"]):
        done = package_env.run_in_venv(["agenttest", *command], cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [str(package_env.bin / "agenttest"), "serve", "--bind", f"127.0.0.1:{port}"], cwd=tmp_path,
            env={**package_env.environment(), **env}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            assert server.poll() is None, log_path.read_text()
            try:
                httpx.get(base_url, timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.2)
        yield base_url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_it_serves_its_pages_and_static_files_from_the_installed_package(served):
    page = httpx.get(f"{served}/accounts/login/", timeout=10)

    assert page.status_code == 200 and "csrfmiddlewaretoken" in page.text
    stylesheet = re.search(r'href="(/static/css/app\.[0-9a-f]+\.css)"', page.text)
    assert stylesheet, "the manifest storage names the collected stylesheet by its hash"
    css = httpx.get(f"{served}{stylesheet[1]}", timeout=10)
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css") and css.text.strip()
