"""The children of decision 0033 forked from one warm process instead of each starting Python and Django afresh
(decision 0048).

A chat turn or an entry check of the team's code runs in a process of its own (runtimes/child.py). Starting that
process cost about 3 CPU seconds on a 2-core machine — Python, Django, the agent's framework — before the team's
first line ran, at every turn and every save. The parent now keeps a *server*, `python -m agenttest agent_child
serve`, started the first time it needs a child: it sets Django up once, imports the frameworks of the runtimes it
is asked for (never the team's code, and it opens no database connection), and forks one child per piece of work.
What a child is does not change:

- a process of its own, leader of a new session, its output to the work's log, its answer in the work's directory,
  leaving with os._exit; its end (exit code or signal) reaches the parent, which gives it a deadline and kills its
  process group when the work is done, as before;
- between the server and the child sits a *waiter*, forked too, which sees the child end without reaping it (so the
  group's id cannot be taken by another process while the parent kills the group), reports it, and reaps it once
  the parent is done with the group. Should the parent go away first, the waiter kills the group itself.

The parent and its server talk over a socket pair, the server's stdin. Each piece of work sends a socket of its own
with it (SCM_RIGHTS), on which its waiter answers: no address, nothing on disk, nothing another process can reach.
When the parent ends, its server reads the end of its stdin and leaves. A server serves one environment — the
variables, the working directory and the import path it was started with decide the settings Django set up — so
when the parent's environment changes, the next piece of work starts a new server.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

from agenthost.runtimes.groups import kill_group_id

READY = b"ready"
# A request is a few hundred bytes of JSON (mode, the work's directory, log and environment file, the runtime's
# modules).
_REQUEST_BYTES = 65536
# How long the parent waits for the waiter's last word once the child's group was killed: the kernel's delivery of
# a SIGKILL, not the team's code.
_AFTER_KILL_SECONDS = 5.0


# Variables that change while a process runs and decide nothing Django's setup reads: pytest names the running test
# in one, so each test of a suite would otherwise start a server. A child gets the parent's environment of the moment
# all the same (the request's `environment` file).
_NOT_SETTINGS = frozenset({"PYTEST_CURRENT_TEST"})


class ServerFailed(Exception):
    """The server could not be started or did not answer: `code` is how it ended (None: still running at the
    deadline), `log_tail` the end of what it wrote."""

    def __init__(self, code: int | None, log_tail: str) -> None:
        super().__init__(f"the child server ended with {code}")
        self.code = code
        self.log_tail = log_tail


class _Server:
    """The parent's handle on one server: its process, the socket to it and the environment it serves."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: str, log: IO[bytes]) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = log
        with theirs:
            self.process = subprocess.Popen(
                command, stdin=theirs.fileno(), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                start_new_session=True,
            )
        self.control = mine
        self.ready = False
        self.start_lock = threading.Lock()
        self.send_lock = threading.Lock()

    def wait_ready(self, deadline: float) -> None:
        """Returns once the server has Django set up; ServerFailed when it ended first or `deadline` (monotonic)
        passed."""
        # One thread reads the server's word; another asking at the same time waits for its verdict.
        if not self.start_lock.acquire(timeout=max(deadline - time.monotonic(), 0.01)):
            raise ServerFailed(None, "")
        try:
            self._wait_ready(deadline)
        finally:
            self.start_lock.release()

    def _wait_ready(self, deadline: float) -> None:
        if self.ready:
            return
        self.control.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            word = self.control.recv(len(READY))
        except TimeoutError:
            # Still starting at the deadline (a loaded machine): the piece of work did not finish within it.
            self.stop()
            raise ServerFailed(None, _tail(self.log)) from None
        except OSError:
            word = b""
        if word != READY:
            self.stop()
            raise ServerFailed(self.process.returncode, _tail(self.log))
        self.ready = True

    def send(self, request: dict[str, Any], reply: socket.socket) -> None:
        with self.send_lock:
            self.control.settimeout(None)
            socket.send_fds(self.control, [json.dumps(request).encode()], [reply.fileno()])

    def stop(self) -> None:
        """The server leaves at the end of its stdin; one that does not (it hung starting) is killed."""
        with contextlib.suppress(OSError):
            self.control.close()
        try:
            self.process.wait(timeout=_AFTER_KILL_SECONDS)
        except subprocess.TimeoutExpired:
            kill_group_id(self.process.pid)
            self.process.wait()
        self.log.close()

    def forget(self) -> None:
        """In a forked copy of the parent: the socket closed, the server left to the parent that started it."""
        with contextlib.suppress(OSError):
            self.control.close()


def _tail(log: IO[bytes], chars: int = 600) -> str:
    with contextlib.suppress(OSError, ValueError):
        log.seek(0)
        return log.read().decode("utf-8", errors="replace")[-chars:].strip()
    return ""


class ServerPool:
    """The parent's servers, one for the environment of the moment. Thread-safe; a forked copy of the parent starts
    with none (it would share the sockets of the parent's)."""

    def __init__(self, command: list[str]) -> None:
        self._command = command
        self._servers: dict[tuple[str, tuple[tuple[str, str], ...]], _Server] = {}
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def run(
        self, request: dict[str, Any], *, env: dict[str, str], cwd: str, deadline: float
    ) -> int | None:
        """Fork a child for `request` from the server of (`env`, `cwd`), started if needed, and wait for it until
        `deadline` seconds from now; the child's group is killed before this returns. How the child ended: its exit
        code, minus the signal that ended it, or None when the deadline came first. ServerFailed when no server
        could be had in time."""
        give_up = time.monotonic() + max(deadline, 0.1)
        key = (cwd, tuple(sorted((name, value) for name, value in env.items() if name not in _NOT_SETTINGS)))
        for attempt in range(2):
            server = self._server(key, env, cwd)
            server.wait_ready(give_up)
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            with mine:
                replies = _Replies(mine)
                try:
                    with theirs:
                        server.send(request, theirs)
                    said = replies.line(give_up)
                except OSError:
                    said = ""
                if said is None:
                    # Past the deadline before the child was forked (a loaded machine): closing the connection
                    # tells a waiter that did fork it to kill its group.
                    return None
                if not said:
                    # The server went away (killed, say) since the last piece of work: a new one, once.
                    self._drop(key, server)
                    if attempt:
                        raise ServerFailed(server.process.returncode, _tail(server.log))
                    continue
                return _finish(replies, int(said), give_up)
        raise AssertionError("unreachable")

    def _server(self, key: tuple[str, tuple[tuple[str, str], ...]], env: dict[str, str], cwd: str) -> _Server:
        with self._lock:
            server = self._servers.get(key)
            if server is not None and server.process.poll() is None:
                return server
            # Another environment's server has served its last: the environment is the process's, one at a time.
            stale = list(self._servers.values())
            self._servers.clear()
            server = _Server(self._command, env, cwd, tempfile.TemporaryFile())
            self._servers[key] = server
        for old in stale:
            old.stop()
        return server

    def _drop(self, key: tuple[str, tuple[tuple[str, str], ...]], server: _Server) -> None:
        with self._lock:
            if self._servers.get(key) is server:
                del self._servers[key]
        server.stop()

    def close(self) -> None:
        with self._lock:
            servers = list(self._servers.values())
            self._servers.clear()
        for server in servers:
            server.stop()

    def _forget(self) -> None:
        for server in self._servers.values():
            server.forget()
        self._servers = {}
        self._lock = threading.Lock()


class _Replies:
    """The lines a waiter writes on its connection: its child's pid, then how the child ended (both may arrive in one
    read when the child ends at once)."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self._buffer = b""

    def line(self, give_up: float) -> str | None:
        """The next line: None at `give_up` (monotonic), "" when the waiter closed the connection first."""
        while b"\n" not in self._buffer:
            left = give_up - time.monotonic()
            if left <= 0:
                return None
            self.connection.settimeout(left)
            try:
                chunk = self.connection.recv(64)
            except TimeoutError:
                return None
            if not chunk:
                return ""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode().strip()


def _finish(replies: _Replies, pid: int, give_up: float) -> int | None:
    said = replies.line(give_up)
    code: int | None = int(said) if said else None
    # Whatever the team's code started and left running goes with it, the child too when it overran; the waiter
    # keeps the child unreaped (its id the group's) until told the group is gone.
    kill_group_id(pid)
    if said is None:
        # The waiter's word on the killed child, so that "done" reaches it after its report.
        replies.line(time.monotonic() + _AFTER_KILL_SECONDS)
    with contextlib.suppress(OSError):
        replies.connection.sendall(b"done\n")
    return code


# --- The server's side ----------------------------------------------------------------------------------------------


def serve(control: socket.socket, work: Callable[[dict[str, Any]], None]) -> None:
    """The server's loop: reads requests from the parent until it goes, forks a waiter and a child for each. `work`
    runs in the child, which leaves with os._exit whatever it does."""
    # The waiters are the server's children; the kernel reaps them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    warmed: set[str] = set()
    control.sendall(READY)
    while True:
        try:
            message, fds, _flags, _address = socket.recv_fds(control, _REQUEST_BYTES, 1)
        except OSError:
            return
        if not message:
            return
        try:
            request = json.loads(message)
        except ValueError:
            request = None
        if not fds or not isinstance(request, dict):
            for fd in fds:
                os.close(fd)
            continue
        reply = socket.socket(fileno=fds[0])
        # Before the fork: the child would import the framework anyway, and imported here it is imported once, for
        # this child and every later one (after the fork, a server that serves one child imported it twice).
        _warm(request.get("modules", []), warmed)
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            control.close()
            _wait_for(request, reply, work)
        reply.close()


def _warm(modules: list[str], warmed: set[str]) -> None:
    """The runtime's framework imported here once, so every child starts with it: an extra that is not installed is
    the child's to report."""
    for module in modules:
        if module in warmed:
            continue
        warmed.add(module)
        with contextlib.suppress(Exception):
            importlib.import_module(module)


def _wait_for(request: dict[str, Any], reply: socket.socket, work: Callable[[dict[str, Any]], None]) -> None:
    """The waiter: forks the child, reports its pid and its end, and reaps it once the parent is done with its group
    (or gone: then the waiter kills the group). Never returns."""
    pid = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            reply.close()
            _child(request, work)
        reply.sendall(f"{pid}\n".encode())
        if _ended(pid, reply):
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            assert info is not None  # None only with WNOHANG
            code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            reply.sendall(f"{code}\n".encode())
            reply.settimeout(None)
            reply.recv(16)
    except BaseException:  # noqa: BLE001 — the parent gone mid-report; nothing of the server's loop runs here
        pass
    finally:
        if pid:
            with contextlib.suppress(BaseException):
                kill_group_id(pid)
                os.waitpid(pid, 0)
        os._exit(0)


def _ended(pid: int, reply: socket.socket) -> bool:
    """Waits until the child ends (True) or the parent goes away first (False): the parent says nothing before the
    child's end, so its side of the connection becoming readable is its going away."""
    watching = os.pidfd_open(pid)
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(watching, selectors.EVENT_READ, "child")
            selector.register(reply, selectors.EVENT_READ, "parent")
            return any(key.data == "child" for key, _events in selector.select())
    finally:
        os.close(watching)


def _child(request: dict[str, Any], work: Callable[[dict[str, Any]], None]) -> None:
    """The child: a session of its own, the work's log as its output, nothing read from stdin. Never returns."""
    code = 1
    try:
        os.setsid()
        # fd 0 was the server's socket to the parent, closed by the waiter: the next descriptor opened may be it.
        nothing = os.open(os.devnull, os.O_RDONLY)
        if nothing != 0:
            os.dup2(nothing, 0)
            os.close(nothing)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        if log > 2:
            os.close(log)
        if request.get("environment"):
            with open(request["environment"], encoding="utf-8") as environment:
                os.environ.clear()
                os.environ.update(json.load(environment))
        work(request)
        code = 0
    except BaseException:  # noqa: BLE001 — what a process would print dying of it, and its exit code
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
