"""agenttest as a user installs it: the wheel built from this checkout, in a fresh virtualenv outside the checkout,
with its agent-runtime extras (`agenttest[openai-agents,pydantic-ai,langgraph]`: the OpenAI Agents SDK, import name
`agents`, pydantic-ai, and LangGraph with langchain-openai), so that one virtualenv serves every example.

One virtualenv per test session, whichever test module asks first. Use it from any test module with

    from tests.package_env import PackageEnv, package_env_fixture  # noqa: F401  (the fixture `package_env`)

    def test_it_…(package_env: PackageEnv, tmp_path):
        done = package_env.run_in_venv(["agenttest", "check"], cwd=tmp_path, env={"AGENTTEST_DEBUG": "1"})

`run_in_venv` runs a program of the virtualenv (`agenttest`, `python`, `pip`, …, or any path) with an environment
that holds none of this checkout's: no AGENTTEST_*, DATABASE_URL, CELERY_*, DJANGO_SETTINGS_MODULE or PYTHONPATH, so
nothing can import the checkout instead of the installed package.

With AGENTTEST_TEST_PACKAGE_DIR set (scripts/test sets it to a new directory of its run), the pytest processes of one
test command share one wheel and one virtualenv built there (and the Node example's build, tests/example_repo.py):
the first process to need each builds it under a file lock, the others wait for it and reuse it. Unset, each
session builds its own. The shared virtualenv is never changed
by a test (a test installing a distribution installs it in a directory of its own on PYTHONPATH).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent
CONSTRAINTS = BASE_DIR / "requirements" / "constraints.txt"
# The optional extras of pyproject.toml the virtualenv installs with the wheel: every agent runtime's framework.
EXTRAS = "openai-agents,pydantic-ai,langgraph"
# What a clone of the repository holds and a build must not see: local state, caches, earlier builds.
NOT_IN_A_CLONE = shutil.ignore_patterns(
    ".git", ".venv", "var", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".hypothesis", "node_modules",
    "build", "dist", "*.egg-info",
)
# A directory the pytest processes of one test command share their wheel and virtualenv in (see above).
SHARED_DIR_VARIABLE = "AGENTTEST_TEST_PACKAGE_DIR"
# A child process imports the team's module to check an entry, within 60 s by default: the Agents SDK's import took
# longer than that with the suite's ten processes pinned to one core (issue 40). No test of the installed wheel is
# about that deadline, so it gets one no loaded machine reaches (pyproject's pytest env gives the other tests the same).
ENTRY_CHECK_TIMEOUT = {"AGENTTEST_ENTRY_CHECK_TIMEOUT": "900"}
CHECKOUT_VARIABLES = ("AGENTTEST_", "CELERY_", "DATABASE_URL", "DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV")
# Not the checkout's, but it would make every process of the virtualenv compile what it imports again (the
# virtualenv is installed without bytecode, which its processes write as they import): scripts/test says why.
NOT_PASSED_ON = ("PYTHONDONTWRITEBYTECODE",)


@dataclass(frozen=True)
class PackageEnv:
    wheel: Path
    venv: Path
    bin: Path
    python: Path

    def run_in_venv(
        self, args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `args` (its first word a program of the virtualenv, or a path) and capture its output as text. No
        timeout of its own: the test's (pytest-timeout, long for these tests in scripts/test) guards against a hang,
        and kills the command with it. A loaded machine took over 300 s for the files example's six commands, and a
        fixed limit per command failed tests that were only slow."""
        program = self.bin / args[0]
        command = [str(program) if program.exists() else args[0], *args[1:]]
        return subprocess.run(
            command, cwd=cwd, env={**self.environment(), **(env or {})}, capture_output=True, text=True,
            timeout=timeout, check=False,
        )

    def environment(self) -> dict[str, str]:
        """The environment of a shell that activated the virtualenv, without anything pointing at the checkout."""
        env = environment_without_the_checkout()
        env.update(PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(self.venv))
        env.update(ENTRY_CHECK_TIMEOUT)
        return env


_wheel: Path | None = None
_built: PackageEnv | None = None


def package_wheel_build(root: Path) -> Path:
    """Build the wheel from a copy of the checkout (a build writes build/ and *.egg-info where it runs), under `root`
    (or the shared directory); only the first call of a session builds."""
    global _wheel
    if _wheel is None:
        with built_once(root, "wheel", ("source", "dist")) as (root, done):
            source, dist = root / "source", root / "dist"
            if not done:
                assert not root.resolve().is_relative_to(BASE_DIR), f"{root} is inside the checkout"
                shutil.copytree(BASE_DIR, source, ignore=NOT_IN_A_CLONE)
                _pip(root, sys.executable, "wheel", "--no-deps", "--wheel-dir", str(dist), str(source))
            (_wheel,) = dist.glob("agenttest-*.whl")
    return _wheel


def package_env_build(root: Path) -> PackageEnv:
    """The wheel, installed with its EXTRAS into a new virtualenv under `root` (or the shared directory); only the
    first call of a session builds."""
    global _built
    if _built is None:
        wheel = package_wheel_build(root)
        with built_once(root, "venv", ("venv",)) as (root, done):
            venv = root / "venv"
            python = venv / "bin" / "python"
            if not done:
                _run([sys.executable, "-m", "venv", str(venv)], root)
                # No byte-compiling of every installed module up front: the few the tests import compile on first
                # use.
                _pip(root, str(python), "install", "--no-compile", "--constraint", str(CONSTRAINTS),
                     f"{wheel}[{EXTRAS}]")
        _built = PackageEnv(wheel=wheel, venv=venv, bin=venv / "bin", python=python)
    return _built


@contextlib.contextmanager
def built_once(root: Path, what: str, parts: tuple[str, ...]) -> Iterator[tuple[Path, bool]]:
    """(the directory to build `what` in, whether it is already built there). Shared (SHARED_DIR_VARIABLE), the
    build holds a lock other processes wait on, and is marked done only once it succeeded: a failed build is tried
    again by the next process rather than half used (its `parts`, the paths it writes under the directory, are
    removed first)."""
    shared = os.environ.get(SHARED_DIR_VARIABLE)
    if not shared:
        yield root, False
        return
    root = Path(shared)
    root.mkdir(parents=True, exist_ok=True)
    marker = root / f"{what}.done"
    with open(root / f"{what}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = marker.exists()
        if not done:
            for part in parts:
                shutil.rmtree(root / part, ignore_errors=True)
        yield root, done
        marker.touch()


def environment_without_the_checkout() -> dict[str, str]:
    """This process's environment without anything pointing at the checkout (its virtualenv on PATH included), and
    with no OpenAI key."""
    env = {
        name: value for name, value in os.environ.items()
        if not name.startswith(CHECKOUT_VARIABLES) and name not in NOT_PASSED_ON
    }
    path = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not Path(p).is_relative_to(BASE_DIR))
    return {**env, "PATH": path, "OPENAI_API_KEY": ""}


@pytest.fixture(scope="session", name="package_env")
def package_env_fixture(tmp_path_factory: pytest.TempPathFactory) -> PackageEnv:
    return package_env_build(tmp_path_factory.mktemp("package"))


@pytest.fixture(scope="session", name="package_wheel")
def package_wheel_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel alone, for a test that installs it as a user would (the guide makes its own virtualenv)."""
    return package_wheel_build(tmp_path_factory.mktemp("package"))


def _pip(cwd: Path, python: str, *args: str) -> None:
    _run([python, "-m", "pip", "--disable-pip-version-check", "--quiet", *args], cwd)


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(
        command, cwd=cwd, env=environment_without_the_checkout(), capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
