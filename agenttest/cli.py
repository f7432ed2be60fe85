"""The `agenttest` console command: every management command with agenttest's settings, from any directory.

`agenttest migrate`, `agenttest run_suite …`, `agenttest demo_setup`, `agenttest --help` (the list of commands), and
the two long-running processes of a deployment:

- `agenttest worker [--groups a,b] [celery worker options]`: the run worker, `-Q runs --concurrency 1` unless those
  are given; `--groups` consumes those isolation groups' queues instead;
- `agenttest serve [gunicorn options]`: the production web server with `agenttest.gunicorn_conf`, on gunicorn's
  default address 127.0.0.1:8000 (or 0.0.0.0:$PORT) unless `--bind` is given.

The project's directory — where its agenttest.toml is (common/project_file.py), else the working directory — is on
the import path, so a plugin module there is importable by the commands, the worker and the web server alike.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import sys
import tempfile
from collections.abc import Sequence

from common.project_file import ProjectFileError, project_read
from common.queues import RUNS_QUEUE, group_queue
from common.scratch_database import SCRATCH_DATABASE_VARIABLE

GROUPS_OPTION = "--groups"
# As cases/schema.py's ISOLATION_GROUP_PATTERN: a suite's group is always one a worker can name.
_GROUP = re.compile(r"[a-z0-9][a-z0-9_-]{0,49}")


def main(argv: Sequence[str] | None = None) -> None:
    """Run the management command named by `argv` (default: the process's own arguments)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["run"]:
        _scratch_environment()
    elif arguments[:1] == ["init"]:
        _local_environment()
    elif _serves_nothing(arguments) and not os.environ.get("AGENTTEST_SECRET_KEY"):
        _local_environment()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agenttest.settings")
    # The team's own modules (plugins) are importable from the project's directory, but after the installed packages:
    # a team's `cases/` or `runs/` folder must not shadow agenttest's.
    directory = _project_directory(arguments)
    if directory not in sys.path:
        sys.path.append(directory)
    from django.core.management import execute_from_command_line

    # The program name Django prints in its help and errors ("Type 'agenttest help <subcommand>'").
    execute_from_command_line(["agenttest", *arguments])


def _project_directory(arguments: Sequence[str]) -> str:
    """The directory of the project file (agenttest.toml), else the working directory. A project file that cannot be
    used ends the command here — every problem on stderr, each naming the file and the key, exit code 2 — rather
    than in a traceback from the settings; `init` goes on, since it writes a file of its own."""
    try:
        project = project_read()
    except ProjectFileError as exc:
        if arguments[:1] == ["init"]:
            return os.getcwd()
        sys.stderr.write("".join(f"error: {line}\n" for line in exc.lines()))
        raise SystemExit(2) from None
    return str(project.directory) if project else os.getcwd()


def _scratch_environment() -> None:
    """`agenttest run DIR` runs on a fresh machine: a throw-away SQLite database and var directory, removed at exit,
    whatever database the environment names — the files are the source, not a database."""
    scratch = tempfile.mkdtemp(prefix="agenttest-run-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    os.environ["AGENTTEST_VAR_DIR"] = scratch
    os.environ["DATABASE_URL"] = f"sqlite:///{scratch}/agenttest.sqlite3"
    os.environ[SCRATCH_DATABASE_VARIABLE] = f"{scratch}/agenttest.sqlite3"
    os.environ["AGENTTEST_BROKER_URL"] = f"sqla+sqlite:///{scratch}/broker.sqlite3"
    _local_environment()


# Commands that serve nothing and hold no secret: reading the files, checking the settings, printing a schema, moving
# agents, suites and cases between files and the database. Everything else (serve, runserver, worker, migrate,
# createsuperuser, drf_create_token, …) is a deployment's and still demands AGENTTEST_SECRET_KEY or AGENTTEST_DEBUG.
LOCAL_COMMANDS = frozenset({"help", "check", "schema", "apply", "export"})
_HELP_OPTIONS = frozenset({"-h", "--help", "--version"})


def _serves_nothing(arguments: Sequence[str]) -> bool:
    """Whether the command line asks for help, a version or one of the LOCAL_COMMANDS."""
    return not arguments or arguments[0] in LOCAL_COMMANDS or any(a in _HELP_OPTIONS for a in arguments)


def _local_environment() -> None:
    # Nothing is served and no mail is sent, so the production checks (secret key, mail server, broker) do not
    # apply: the command runs with a local install's settings. A deployment's own values (a secret key given, DEBUG
    # set either way) are kept.
    os.environ.setdefault("AGENTTEST_DEBUG", "1")
    os.environ.setdefault("AGENTTEST_SECRET_KEY", secrets.token_urlsafe(50))


def worker_command(arguments: Sequence[str]) -> list[str]:
    """The Celery worker for runs: one task at a time, because cases share external state; options pass through.

    `--groups a,b` (or `--groups=a,b`) serves those isolation groups: their queues become the worker's `-Q`."""
    arguments = list(arguments)
    groups = _take_groups(arguments)
    command = [sys.executable, "-m", "celery", "-A", "agenttest", "worker"]
    if groups is not None:
        if _given(arguments, "-Q", "--queues"):
            raise SystemExit("agenttest worker: give --groups or -Q/--queues, not both")
        command += ["-Q", ",".join(group_queue(group) for group in groups)]
    elif not _given(arguments, "-Q", "--queues"):
        command += ["-Q", RUNS_QUEUE]
    if not _given(arguments, "-c", "--concurrency"):
        command += ["--concurrency", "1"]
    return [*command, *arguments]


def serve_command(arguments: Sequence[str]) -> list[str]:
    """The Procfile's web server; gunicorn's own default address applies unless `--bind` passes through."""
    return [
        sys.executable, "-m", "gunicorn", "agenttest.wsgi", "--config", "python:agenttest.gunicorn_conf", *arguments
    ]


def exec_command(command: Sequence[str]) -> None:
    """Become `command`, so a process supervisor's signals (SIGTERM: finish the task, then stop) reach it directly."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], list(command))


def _take_groups(arguments: list[str]) -> list[str] | None:
    """Remove `--groups` and its value from `arguments`; the groups named, or None when it is not given."""
    for index, argument in enumerate(arguments):
        if argument == GROUPS_OPTION or argument.startswith(f"{GROUPS_OPTION}="):
            if argument == GROUPS_OPTION:
                if index + 1 >= len(arguments):
                    raise SystemExit("agenttest worker: --groups needs a value, e.g. --groups default,gpu")
                value = arguments.pop(index + 1)
            else:
                value = argument.split("=", 1)[1]
            arguments.pop(index)
            groups = [group.strip() for group in value.split(",") if group.strip()]
            bad = [group for group in groups if not _GROUP.fullmatch(group)]
            if not groups or bad:
                raise SystemExit(
                    f"agenttest worker: --groups takes comma-separated group names (lowercase letters, digits, '-', "
                    f"'_'), got {value!r}"
                )
            return list(dict.fromkeys(groups))
    return None


def _given(arguments: Sequence[str], short: str, long: str) -> bool:
    return any(
        argument in (short, long)
        or argument.startswith(f"{long}=")
        or (argument.startswith(short) and not argument.startswith("--"))
        for argument in arguments
    )
