"""Decision 0048: the children that run the team's code for the web process are forked from a warm server, each
still a process of its own that imports the team's code afresh, on the environment the parent has now, and none
outlives the process that asked for it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agenthost.runtimes import child
from agenthost.runtimes.child import inspect_in_child
from agenthost.runtimes.fork_server import _Replies

BASE_DIR = Path(__file__).resolve().parents[2]
# Writes, as it is imported, the process it is imported in and what the environment says: a team module with
# import-time code.
MARKS_ITS_PROCESS = """
import json
import os
from pathlib import Path

Path(os.environ["TEAM_MARKERS"], f"imported-{{os.getpid()}}").write_text(
    json.dumps({{"pid": os.getpid(), "flavour": os.environ.get("TEAM_FLAVOUR", ""), "version": {version},
                "test": os.environ.get("PYTEST_CURRENT_TEST", "")}})
)


def respond(messages, client, tools):
    return "ok"
"""
HANGS = """
import os
import time
from pathlib import Path

Path(os.environ["TEAM_MARKERS"], f"hanging-{os.getpid()}").touch()
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A team package on the import path, its markers directory in TEAM_MARKERS; the process's servers stopped after
    the test, so that each test starts from none."""
    (tmp_path / "forked_team").mkdir()
    (tmp_path / "forked_team" / "__init__.py").write_text("")
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("TEAM_MARKERS", str(markers))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    child._servers.close()


def _write_bot(team: Path, source: str) -> None:
    (team / "forked_team" / "bot.py").write_text(textwrap.dedent(source))


def _imports(team: Path) -> list[dict]:
    found = sorted((team / "markers").glob("imported-*"), key=lambda path: path.stat().st_mtime_ns)
    return [json.loads(path.read_text()) for path in found]


def _runs(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _servers_of(parent: int) -> list[int]:
    """The child servers `parent` runs, as the system sees them: its live children whose command is
    `agent_child serve`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rpartition(")")[2].split()[:2]
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if int(ppid) == parent and state != "Z" and b"agent_child" in command and b"serve" in command:
            found.append(int(entry.name))
    return sorted(found)


def _gone_within(pid: int, seconds: float) -> bool:
    give_up = time.monotonic() + seconds
    while _runs(pid) and time.monotonic() < give_up:
        time.sleep(0.05)
    return not _runs(pid)


def test_it_imports_the_edited_module_afresh_in_a_new_process_for_each_check(team):
    _write_bot(team, MARKS_ITS_PROCESS.format(version=1))
    assert inspect_in_child("python", "forked_team.bot:respond") == ""
    _write_bot(team, MARKS_ITS_PROCESS.format(version=2).replace("def respond", "def answer"))

    problem = inspect_in_child("python", "forked_team.bot:respond")

    assert "respond" in problem
    first, second = _imports(team)
    assert [first["version"], second["version"]] == [1, 2]
    [server] = _servers_of(os.getpid())
    assert len({first["pid"], second["pid"], server, os.getpid()}) == 4
    assert not _runs(first["pid"]) and not _runs(second["pid"])


def test_it_gives_the_child_the_environment_the_parent_has_now(team, monkeypatch):
    _write_bot(team, MARKS_ITS_PROCESS.format(version=1))
    monkeypatch.setenv("TEAM_FLAVOUR", "vanilla")
    inspect_in_child("python", "forked_team.bot:respond")
    [vanilla_server] = _servers_of(os.getpid())
    monkeypatch.setenv("TEAM_FLAVOUR", "pistachio")

    inspect_in_child("python", "forked_team.bot:respond")

    assert [mark["flavour"] for mark in _imports(team)] == ["vanilla", "pistachio"]
    # The server of the old environment has left; one serves the new.
    assert _gone_within(vanilla_server, 10)
    assert _servers_of(os.getpid()) != [vanilla_server]


def test_it_keeps_its_server_while_only_the_running_tests_name_changes_and_the_child_sees_it(team, monkeypatch):
    _write_bot(team, MARKS_ITS_PROCESS.format(version=1))
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_shop.py::test_one (call)")
    inspect_in_child("python", "forked_team.bot:respond")
    servers = _servers_of(os.getpid())
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_shop.py::test_two (call)")

    inspect_in_child("python", "forked_team.bot:respond")

    assert _servers_of(os.getpid()) == servers
    assert [mark["test"] for mark in _imports(team)] == [
        "tests/test_shop.py::test_one (call)", "tests/test_shop.py::test_two (call)",
    ]


def test_it_starts_a_new_server_when_its_server_was_killed(team):
    _write_bot(team, MARKS_ITS_PROCESS.format(version=1))
    inspect_in_child("python", "forked_team.bot:respond")
    [server] = _servers_of(os.getpid())
    os.kill(server, signal.SIGKILL)
    assert _gone_within(server, 10)

    assert inspect_in_child("python", "forked_team.bot:respond") == ""

    assert len(_imports(team)) == 2
    assert _servers_of(os.getpid()) != [server]


def test_it_refuses_an_entry_whose_import_outlives_the_deadline_and_stops_it(team, settings):
    # The server started first, on the usual deadline: what runs out below is the hanging import's time, not the
    # start of a process on a loaded machine.
    _write_bot(team, MARKS_ITS_PROCESS.format(version=1))
    assert inspect_in_child("python", "forked_team.bot:respond") == ""
    settings.AGENTTEST_ENTRY_CHECK_TIMEOUT = 5
    _write_bot(team, HANGS)

    problem = inspect_in_child("python", "forked_team.bot:respond")

    assert "did not finish within its deadline" in problem
    [marker] = (team / "markers").glob("hanging-*")
    assert not _runs(int(marker.name.removeprefix("hanging-")))


def test_it_says_the_deadline_passed_when_it_passed_while_the_server_was_starting(team, settings):
    _write_bot(team, MARKS_ITS_PROCESS.format(version=1))
    settings.AGENTTEST_ENTRY_CHECK_TIMEOUT = 0.01

    problem = inspect_in_child("python", "forked_team.bot:respond")

    assert problem == (
        "entry point 'forked_team.bot:respond' could not be checked: importing and checking it did not finish within "
        "its deadline (0 s), so its process was stopped"
    )
    assert _imports(team) == []
    settings.AGENTTEST_ENTRY_CHECK_TIMEOUT = 60
    assert inspect_in_child("python", "forked_team.bot:respond") == ""


def test_it_reports_each_of_many_checks_asked_at_once(team):
    _write_bot(team, MARKS_ITS_PROCESS.format(version=1))
    with ThreadPoolExecutor(max_workers=6) as pool:
        problems = list(pool.map(lambda _: inspect_in_child("python", "forked_team.bot:respond"), range(6)))

    assert problems == [""] * 6
    assert len({mark["pid"] for mark in _imports(team)}) == 6
    assert len(_servers_of(os.getpid())) == 1


# A process that asks for a check of a module that hangs at import, says which process is the hanging child, and
# waits to be killed.
ASKS_AND_WAITS = """
import json, os, sys, threading, time
from pathlib import Path
import django

django.setup()
from agenthost.runtimes import child

markers = Path(os.environ["TEAM_MARKERS"])
threading.Thread(target=child.inspect_in_child, args=("python", "forked_team.bot:respond"), daemon=True).start()
while not list(markers.glob("hanging-*")):
    time.sleep(0.05)
[hanging] = markers.glob("hanging-*")
print(json.dumps({"child": int(hanging.name.split("-")[1])}), flush=True)
time.sleep(600)
"""


def test_it_leaves_nothing_of_the_teams_code_running_when_the_process_that_asked_is_killed(team, tmp_path):
    _write_bot(team, HANGS)
    env = {
        **os.environ, "PYTHONPATH": os.pathsep.join([str(BASE_DIR), str(team)]),
        "DJANGO_SETTINGS_MODULE": "agenttest.settings", "AGENTTEST_DEBUG": "1",
        "AGENTTEST_VAR_DIR": str(tmp_path / "var"),
    }
    asker = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(ASKS_AND_WAITS)], stdout=subprocess.PIPE, text=True, env=env,
        cwd=tmp_path,
    )
    try:
        said = json.loads(asker.stdout.readline())
        [said["server"]] = _servers_of(asker.pid)
        assert _runs(said["server"]) and _runs(said["child"])

        asker.kill()
        asker.wait()

        assert _gone_within(said["server"], 10)
        assert _gone_within(said["child"], 10)
    finally:
        asker.kill()
        asker.wait()
        asker.stdout.close()


def test_it_reads_the_childs_pid_and_its_end_when_both_arrive_in_one_read():
    mine, theirs = socket.socketpair()
    with mine, theirs:
        theirs.sendall(b"4242\n-9\n")
        theirs.shutdown(socket.SHUT_WR)
        replies = _Replies(mine)
        give_up = time.monotonic() + 10

        assert [replies.line(give_up), replies.line(give_up), replies.line(give_up)] == ["4242", "-9", ""]
