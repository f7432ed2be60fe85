"""examples/order-support as a team's CI runs it: copied outside the checkout, with only the built wheel installed
and no AGENTTEST_* variable — the repository's agenttest.toml says everything (issue 25, item 10)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.example_repo import copy_example
from tests.package_env import PackageEnv, package_env_fixture  # noqa: F401  (the fixture)
from tests.ports import free_port
from tests.workers import WAIT_SECONDS

pytestmark = [pytest.mark.slow, pytest.mark.installed]

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "order-support"
# Every connection to another machine goes to a proxy that refuses it, and in replay the model endpoint itself is a
# closed port: replay must need neither. Only the local stub (record) is reachable.
REFUSED = "http://127.0.0.1:9"


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the OpenAI stub did not listen on port {port}")


def _team_repo(tmp_path: Path, base_url: str) -> Path:
    repo = tmp_path / "order-support"
    copy_example(EXAMPLE, repo, "__pycache__")
    project = repo / "agenttest.toml"
    project.write_text(project.read_text().replace("http://127.0.0.1:8001/v1", base_url))
    return repo


def _agenttest(package_env: PackageEnv, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # package_env's environment holds no AGENTTEST_* variable and an empty OPENAI_API_KEY.
    env = {"HTTP_PROXY": REFUSED, "HTTPS_PROXY": REFUSED, "ALL_PROXY": REFUSED, "NO_PROXY": "127.0.0.1,localhost"}
    return package_env.run_in_venv(["agenttest", *args], cwd=repo, env=env)


def test_it_replays_records_and_round_trips_the_example(package_env: PackageEnv, tmp_path):
    repo = _team_repo(tmp_path, f"{REFUSED}/v1")

    # As a newcomer runs it: no variable, no option but the reports; agenttest.toml names the plugin, the provider
    # and replay.
    done = _agenttest(package_env, repo, "run", ".", "--junit", "junit.xml", "--summary", "summary.md",
                      "--results", "results.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Project file: {repo / 'agenttest.toml'}" in done.stdout
    assert "2 result(s), replay mode" in done.stdout
    suites = ElementTree.parse(repo / "junit.xml").getroot()
    cases = {case.get("name"): case for case in suites.iter("testcase")}
    assert len(cases) == 2 and not any(case.find("failure") is not None for case in cases.values())
    summary = (repo / "summary.md").read_text()
    assert "| local:gpt-4o-mini | 100% | 2 | 0 | 0 |" in summary

    instruction = repo / "agents" / "order-support.md"
    instruction.write_text(instruction.read_text() + "Always answer in one sentence.\n")
    stale = _agenttest(package_env, repo, "run", ".", "--mode", "replay", "--summary", "stale.md",
                       "--baseline", "results.json")
    assert stale.returncode == 2, stale.stdout + stale.stderr
    assert "stale recording" in stale.stdout
    assert "passed → error" in (repo / "stale.md").read_text()

    port = free_port()
    stub = subprocess.Popen(
        [str(package_env.python), "-m", "agenthost.testing.openai_stub", "--port", str(port), "--echo"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        _wait_for(port)
        project = repo / "agenttest.toml"
        project.write_text(project.read_text().replace(f"{REFUSED}/v1", f"http://127.0.0.1:{port}/v1"))
        recorded = _agenttest(package_env, repo, "run", ".", "--mode", "record")
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    finally:
        stub.terminate()
        stub.wait(timeout=10)
    project.write_text(project.read_text().replace(f"http://127.0.0.1:{port}/v1", f"{REFUSED}/v1"))
    again = _agenttest(package_env, repo, "run", ".", "--mode", "replay")
    assert again.returncode == 0, again.stdout + again.stderr

    first, second = tmp_path / "first", tmp_path / "second"
    script = (
        f"set -e; agenttest migrate -v0; agenttest apply .; agenttest export {first}; "
        f"rm -rf var; agenttest migrate -v0; agenttest apply {first}; agenttest export {second}"
    )
    round_trip = package_env.run_in_venv(["bash", "-c", script], cwd=repo, env={"AGENTTEST_DEBUG": "1"})
    assert round_trip.returncode == 0, round_trip.stdout + round_trip.stderr
    files = sorted(path.relative_to(first) for path in first.rglob("*") if path.is_file())
    assert files == sorted(path.relative_to(second) for path in second.rglob("*") if path.is_file())
    assert all((first / name).read_bytes() == (second / name).read_bytes() for name in files)

    broken = repo / "suites" / "order-support" / "cases" / "small-talk-calls-no-tool.yaml"
    broken.write_text(broken.read_text().replace("user_message: Hello there!", "user_mesage: Hello there!"))
    before = package_env.run_in_venv(
        ["agenttest", "export", str(tmp_path / "before")], cwd=repo,
        env={"AGENTTEST_DEBUG": "1"},
    )
    assert before.returncode == 0
    refused = package_env.run_in_venv(
        ["agenttest", "apply", "."], cwd=repo,
        env={"AGENTTEST_DEBUG": "1"},
    )
    assert refused.returncode == 2
    run_refused = _agenttest(package_env, repo, "run", ".", "--mode", "replay")
    assert run_refused.returncode == 2
    assert "small-talk-calls-no-tool.yaml: turns[0].user_mesage: unknown field" in run_refused.stderr
    assert "suites/order-support/cases/small-talk-calls-no-tool.yaml: turns[0].user_mesage: unknown field" in (
        refused.stderr
    )
    after = package_env.run_in_venv(
        ["agenttest", "export", str(tmp_path / "after")], cwd=repo,
        env={"AGENTTEST_DEBUG": "1"},
    )
    assert after.returncode == 0
    for path in (tmp_path / "before").rglob("*.yaml"):
        assert path.read_bytes() == (tmp_path / "after" / path.relative_to(tmp_path / "before")).read_bytes()
