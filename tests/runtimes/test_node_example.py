"""examples/node-agents-sdk-shop as a team runs it: a TypeScript agent on the OpenAI Agents SDK for JavaScript, built
with npm and started by agenttest as `node dist/agent.js` (`runtime: process`, `protocol: jsonl`), its two tools taken
from agenttest's MCP gateway. `agenttest run . --mode replay` plays its recordings with no model and proxies pointing
nowhere: the suite with both tools mocked passes; the one leaving the refund unmocked Fails on the block, and the
refund's webhook is never called. A changed instruction in the TypeScript makes the replay stale, naming it; a call
out of the program's own code is refused and makes the case an Error naming the address.

Node and npm are part of what this example needs: without them the tests fail saying so. npm installs the pinned
versions of package.json from the registry (its cache in ~/.npm makes it quick after the first time), with no lock
file written (it would name the registry)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.example_repo import (
    EXAMPLES,
    NODE_EXAMPLE,
    NPM_SECONDS,
    copy_example,
    node_build_share,
    node_example_build,
    npm,
    replay_here,
)

EXAMPLE = EXAMPLES / NODE_EXAMPLE
PROGRAM = Path("src") / "agent.ts"
INSTRUCTION = "then tell the customer in one sentence what you did."
# Where the program starts its run: a line a team's own code would put a call before.
RUN_LINE = "const result = await run(agent, inputItems(turn.messages));"

# The module's first test builds the example (npm's install and tsc): its time counts in that test's.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * NPM_SECONDS + 300)]



@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example built as its README says (`npm install && npm run build`), once for the test command."""
    return node_example_build(tmp_path_factory.mktemp("node-built"))


def own_copy(built: Path, tmp_path: Path) -> Path:
    """The built example for one test to change: its own files, the installed packages shared."""
    repo = tmp_path / NODE_EXAMPLE
    copy_example(EXAMPLE, repo, "node_modules", "dist", "package-lock.json", "__pycache__", "var")
    node_build_share(built, repo)
    return repo


def rebuilt_with(repo: Path, old: str, new: str) -> None:
    program = repo / PROGRAM
    source = program.read_text()
    assert old in source, f"{PROGRAM} no longer holds {old!r}"
    program.write_text(source.replace(old, new))
    npm(repo, "run", "build")


def test_it_replays_the_node_agents_suites_green_where_mocked_and_failed_on_the_block_with_nothing_refunded(
    built, tmp_path, listener, monkeypatch
):
    # In chat the refund posts to this webhook; under test it must never be called.
    monkeypatch.setenv("SHOP_WEBHOOK_URL", f"{listener.url}/refunds")
    repo = own_copy(built, tmp_path)

    ran = replay_here(repo, tmp_path / "var", "--suite", "shop", "--suite", "shop-unmocked",
                      "--results", "results.json")

    said = ran.stdout + ran.stderr
    assert ran.returncode == 1, said
    # Passed, not Error: the program's SDK tracing is off (left on, its export to api.openai.com is an attempt to
    # reach the network, which makes the case an Error).
    assert "PASSED  Refund is confirmed" in said
    assert "FAILED  Unmocked refund is blocked" in said
    outcomes = {item["case"]: item for item in json.loads((repo / "results.json").read_text())["results"]}
    assert outcomes["Unmocked refund is blocked"]["reason"].startswith(
        "shop_refund_order has no mock, so it was blocked"
    ), outcomes
    assert listener.received == []


def test_it_goes_stale_naming_the_instruction_when_the_typescript_changes(built, tmp_path):
    repo = own_copy(built, tmp_path)
    rebuilt_with(repo, INSTRUCTION, "then tell the customer in two sentences what you did.")

    stale = replay_here(repo, tmp_path / "var", "--results", "stale.json")

    assert stale.returncode == 2, stale.stdout + stale.stderr
    (result,) = json.loads((repo / "stale.json").read_text())["results"]
    assert result["status"] == "error", result
    assert result["reason"].startswith("stale recording: the request at turn 0 step 0 differs"), result["reason"]
    assert "First difference: settings.instructions" in result["reason"], result["reason"]
    assert "in two sentences what you did." in result["reason"].partition(" now '")[2], result["reason"]


def test_it_refuses_a_call_out_of_the_programs_own_code_and_names_it(built, tmp_path, listener):
    repo = own_copy(built, tmp_path)
    # The team's code tells its CRM about the turn itself, past agenttest: under test nothing is sent.
    rebuilt_with(repo, RUN_LINE, f"await fetch('{listener.url}/crm', {{ method: 'POST', body: turn.message }})"
                                 f".catch(() => undefined);\n    {RUN_LINE}")

    ran = replay_here(repo, tmp_path / "var", "--results", "results.json")

    assert ran.returncode == 2, ran.stdout + ran.stderr
    (result,) = json.loads((repo / "results.json").read_text())["results"]
    assert result["status"] == "error", result
    port = listener.url.rsplit(":", 1)[1]
    assert "the agent's program (node dist/agent.js) tried to reach the network itself at turn 0: " \
        f"tcp 127.0.0.1:{port}" in result["reason"], result["reason"]
    assert listener.received == []
