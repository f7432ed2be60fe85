"""examples/agents-sdk-shop as a team runs it: its unchanged OpenAI Agents SDK code copied outside the checkout, on
the built wheel with its `openai-agents` extra (tests/example_repo.py: the two models, the markers, the commands)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.example_repo import (
    MODELS,
    REFUSED,
    Stub,
    agenttest,
    case_results,
    chat,
    example_copy,
    local_stub,
    markers,
    point_local_at,
    results,
)
from tests.package_env import PackageEnv, package_env_fixture  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.installed]

INSTRUCTION = "Hand cancellations to the orders agent."


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return example_copy("agents-sdk-shop", tmp_path)


@pytest.fixture
def stub(package_env: PackageEnv, repo: Path) -> Iterator[Stub]:
    with local_stub(package_env, repo) as running:
        yield running


def test_it_runs_the_teams_real_tools_in_chat_and_names_the_agent_of_each_call(package_env, repo, stub):
    talked = chat(package_env, repo, "Please cancel order 1043, I ordered the wrong size.")

    assert talked["output"] == "Order 1043 is cancelled, and we emailed you a confirmation."
    # In chat the shop's own functions ran, through the SDK's invocation: the order was cancelled and the email sent.
    assert markers(repo) == ["cancelled", "outbox"]
    assert talked["calls"] == [
        ["transfer_to_orders_agent", "Triage agent", "routed"],
        ["cancel_order", "Orders agent", "executed"],
        ["send_email", "Orders agent", "executed"],
    ]
    assert talked["chain"] == ["shop", "Orders agent"]


def test_it_mocks_the_suite_on_two_models_and_blocks_the_unmocked_cancel(package_env, repo, stub):
    done = agenttest(package_env, repo, "run", ".", "--models", MODELS, "--results", "results.json")

    assert done.returncode == 1, done.stdout + done.stderr
    outcomes = results(repo / "results.json")
    assert sorted(outcomes) == sorted(
        (case, model)
        for case in ("Status is looked up", "Cancellation is handed over and confirmed", "Unmocked cancel is blocked")
        for model in MODELS.split(",")
    )
    for (case, model), result in outcomes.items():
        if case == "Unmocked cancel is blocked":
            assert result["status"] == "failed", (model, result)
            assert result["reason"].startswith("cancel_order has no mock, so it was blocked"), result["reason"]
        else:
            assert result["status"] == "passed", (case, model, result["reason"])
    # Nothing the shop's tools do happened: every call was mocked or blocked, none ran.
    assert markers(repo) == []


def test_it_replays_offline_and_reports_a_changed_instruction_in_the_teams_code_stale(package_env, repo):
    # The committed recordings replay on the wheel with no model and no network.
    committed = agenttest(package_env, repo, "run", ".", "--suite", "shop", "--models", MODELS, "--mode", "replay")
    assert committed.returncode == 0, committed.stdout + committed.stderr

    with local_stub(package_env, repo):
        recorded = agenttest(package_env, repo, "run", ".", "--suite", "shop", "--models", MODELS, "--mode", "record")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr

    replayed = agenttest(package_env, repo, "run", ".", "--suite", "shop", "--models", MODELS, "--mode", "replay",
                         "--results", "results.json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert {item["status"] for item in results(repo / "results.json").values()} == {"passed"}

    code = repo / "shop" / "agents.py"
    assert INSTRUCTION in code.read_text()
    code.write_text(code.read_text().replace(INSTRUCTION, "Hand every cancellation to the orders agent."))
    stale = agenttest(package_env, repo, "run", ".", "--suite", "shop", "--models", MODELS, "--mode", "replay",
                      "--results", "stale.json")

    assert stale.returncode == 2, stale.stdout + stale.stderr
    outcomes = results(repo / "stale.json")
    assert {item["status"] for item in outcomes.values()} == {"error"}
    for result in outcomes.values():
        assert result["reason"].startswith("stale recording: the request at turn 0 step 0 differs"), result["reason"]
        # The SDK's default model calls the Responses API, its instructions a field of the request.
        assert "First difference: settings.instructions" in result["reason"]
        assert "now '…u say anything about it. Hand every cancellation" in result["reason"]
    assert markers(repo) == []


def test_it_replays_the_sdks_loop_step_by_step_with_as_many_model_calls_as_recorded(package_env, repo, stub):
    # The scripted provider logs every request it is sent: the framework's model calls while recording.
    providers = repo / "providers.toml"
    providers.write_text(providers.read_text().replace('script = "script.json"',
                                                       'script = "script.json"\nrequests_log = "requests.jsonl"'))
    # Recorded and replayed by `agenttest run_suite --inline` on the repository's database, in one process each.
    case_results(package_env, repo, f"""
        from django.core.management import call_command
        call_command("migrate", verbosity=0)
        call_command("apply", ".", verbosity=0)
        call_command("run_suite", "shop", models="{MODELS}", mode="record", inline=True)
    """)
    sent_to_scripted = len((repo / "requests.jsonl").read_text().splitlines())
    stub.stop()
    point_local_at(repo, f"{REFUSED}/v1")

    runs = case_results(package_env, repo, f"""
        from django.core.management import call_command
        call_command("run_suite", "shop", models="{MODELS}", mode="replay", inline=True)
    """)

    by_mode: dict[str, dict[tuple[str, str], dict]] = {}
    for result in runs:
        assert result["status"] == "passed", result
        by_mode.setdefault(result["mode"], {})[(result["case"], result["model"])] = result
    record, replay = by_mode["record"], by_mode["replay"]
    assert sorted(record) == sorted(replay) and len(record) == 4
    # Each of the SDK's model calls was recorded as one step and replayed as one: the loop ran again, step by step.
    assert {key: result["model_calls"] for key, result in replay.items()} == {
        key: result["model_calls"] for key, result in record.items()
    }
    on_scripted = sum(result["model_calls"] for (_, model), result in replay.items() if model.startswith("scripted"))
    assert on_scripted == sent_to_scripted == 2 + 4
    # The hand-off is in the transcript as routing, and the calls after it are the orders agent's, in the replay as
    # in the recording.
    for mode in (record, replay):
        cancellation = mode[("Cancellation is handed over and confirmed", "local:gpt-4o-mini")]
        assert cancellation["results"] == [
            ["transfer_to_orders_agent", "routed"], ["cancel_order", "mocked"], ["send_email", "mocked"],
        ]
        assert cancellation["calls"] == [
            ["cancel_order", "Orders agent", "mocked"], ["send_email", "Orders agent", "mocked"],
        ]
    assert markers(repo) == []
