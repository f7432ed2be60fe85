"""docs/guide.md, "Test your own agent", executed as written: its files written, its shell blocks run in order in
one bash session, in a directory outside the checkout, on the wheel built from this checkout.

The one change to the text: the install line's `/path/to/agenttest` becomes the wheel's path. pip is held to the
project's constraints file (PIP_CONSTRAINT) so the guide's install resolves the versions CI pins.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.package_env import (  # noqa: F401  (the fixture `package_wheel`)
    CONSTRAINTS,
    environment_without_the_checkout,
    package_wheel_fixture,
)
from tests.ports import free_port

pytestmark = pytest.mark.slow

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
PORT = "127.0.0.1:8000"


def guide_blocks() -> list[tuple[str, str]]:
    return [(language, body) for language, body in BLOCK.findall(GUIDE.read_text(encoding="utf-8"))]


def test_it_has_a_file_or_a_command_in_every_block():
    blocks = guide_blocks()
    assert {language for language, _ in blocks} == {"sh", "python"}
    files = [body.splitlines()[0] for language, body in blocks if language == "python"]
    assert files == ["# shop_tools.py", "# parcels_mcp.py", "# support_service.py"]
    assert "agenttest.plugin" in GUIDE.read_text(encoding="utf-8")


def test_it_runs_every_command_of_the_guide(package_wheel: Path, tmp_path, request):
    work = tmp_path / "team-repo"
    work.mkdir()
    port = f"127.0.0.1:{free_port()}"
    script = ["set -euo pipefail", "set -x"]
    for language, body in guide_blocks():
        if language == "python":
            name = body.splitlines()[0].removeprefix("# ").strip()
            (work / name).write_text(body, encoding="utf-8")
        else:
            script.append(body.replace("/path/to/agenttest", str(package_wheel)).replace(PORT, port))
    # The guide makes and activates its own virtualenv; nothing of the checkout's may be in its environment.
    env = environment_without_the_checkout()
    env.update(PIP_CONSTRAINT=str(CONSTRAINTS), PIP_DISABLE_PIP_VERSION_CHECK="1")
    process = subprocess.Popen(
        ["bash", "-c", "\n".join(script)],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    # Only a guard against a hang, inside the run's own limit (scripts/test gives the wheel's tests a long one), so
    # that a guide that never ends still shows its output: a loaded machine took over 600 s for it.
    limit = float(request.config.getini("timeout") or 0)
    try:
        output, _ = process.communicate(timeout=max(limit - 30, 60) if limit else None)
    finally:
        # The guide stops its server with `kill %1`; whatever a failed step left running goes here.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    (tmp_path / "guide.log").write_text(output, encoding="utf-8")
    assert process.returncode == 0, output[-6000:]

    # Chat: the plugin's read-only tool ran for real and answered from the plugin's data.
    assert re.search(r'"name":\s*"find_order".*?"outcome":\s*"executed"', output, re.DOTALL), output[-4000:]
    assert re.search(r'status\\?":\s*\\?"shipped', output), output[-4000:]
    # Neither the chat nor any test run sent a receipt: the side effect never happened.
    assert not (work / "receipts.log").exists()
    # MCP: the server's read-only tool ran for real in chat; its recorded case passed; nothing was refunded.
    assert "parcels__track_parcel  [read-only]" in output
    assert re.search(r'"name":\s*"parcels__track_parcel".*?"outcome":\s*"executed"', output, re.DOTALL), output[-4000:]
    assert "out for delivery" in output
    assert not (work / "refunds.log").exists()
    # CI: the suite ran from the exported files on a fresh database and passed.
    report = ElementTree.parse(work / "report.xml").getroot()
    suites = [report] if report.tag == "testsuite" else list(report)
    assert sum(int(s.get("tests", 0)) for s in suites) >= 1
    assert sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites) == 0
    # The project file: init's [run] table edited, not a second one added; with it, `agenttest run` alone replayed
    # both recorded suites — the MCP agent's on the tool listing kept with the recordings, its server never started.
    assert (work / "agenttest.toml").read_text(encoding="utf-8").count("[run]") == 1
    assert (work / "agenttest-files" / "recordings" / "recorded-parcels").is_dir()
    assert re.search(r"suite 'Recorded: parcels': 1 result\(s\), replay mode\.", output), output[-4000:]
    replay_report = ElementTree.parse(work / "replay-report.xml").getroot()
    replay_suites = [replay_report] if replay_report.tag == "testsuite" else list(replay_report)
    assert sum(int(s.get("tests", 0)) for s in replay_suites) == 2
    assert sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in replay_suites) == 0
    # Traces: the production run sent the receipt once; the draft recorded from its trace replayed green in CI with
    # its model answers and tool results from the trace, and sent nothing.
    assert (work / "support-receipts.log").read_text() == "1042 ana@example.com\n"
    assert "recorded on function:support-model" in output
    traces_report = ElementTree.parse(work / "traces-report.xml").getroot()
    traces_suites = [traces_report] if traces_report.tag == "testsuite" else list(traces_report)
    assert sum(int(s.get("tests", 0)) for s in traces_suites) == 1
    assert sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in traces_suites) == 0
