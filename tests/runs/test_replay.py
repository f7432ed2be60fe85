"""Record a run against a real (local) OpenAI-compatible server once, then replay it with the server gone: the same
verdicts, the same tool calls, no cost — and every way a replay cannot be trusted is an Error that says why."""

from __future__ import annotations

import time

import pytest

from agenthost.llm.scripted import Answer, Hang
from agenthost.models import Agent
from agenthost.testing.openai_stub import HttpError, echo_reply, rate_limited
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.engine.case_session import registry
from runs.models import CaseResult, Recording, Run
from runs.selectors import REPLAY_COST_NOTE, run_summary
from runs.services import RunError, run_create, run_execute
from runs.tapes.replay import HANG
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

STUB = "stub:gpt-4o-mini"
INSTRUCTION = "You run the order desk. Use find_order to find an order."


def stub_provider(base_url: str, *, max_retries: int = 0) -> dict:
    return {
        "kind": "openai", "base_url": base_url, "api_key_env": "", "timeout": WAIT_SECONDS, "max_retries": max_retries,
        "models": [{"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.6, "label": ""}],
    }


def stub_answer(body: dict) -> Answer | str:
    """A judge gets a score; the agent gets the stub's echo rules (call a tool the user names, then report it)."""
    if '"score"' in body["messages"][0]["content"]:
        return Answer('{"score": 5, "reason": "it reports the order"}')
    return echo_reply(body)


@pytest.fixture
def stub(openai_stub, settings):
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": stub_provider(openai_stub.base_url)}
    openai_stub.respond_with(stub_answer)
    return openai_stub


def add_case(suite: Suite, name: str, turns: list[str], assertions: list[tuple[str, dict]]) -> Case:
    case = Case.objects.create(suite=suite, name=name)
    for position, text in enumerate(turns):
        Turn.objects.create(case=case, position=position, user_message=text)
    Mock.objects.create(case=case, position=0, function_name="find_order", result='{"order_id": "1043"}')
    # The agent's start-up rule calls load_profile; its call id carries the conversation id, which replay normalises.
    Mock.objects.create(case=case, position=1, function_name="load_profile", result='{"tier": "gold"}')
    for position, (kind, params) in enumerate(assertions):
        Assertion.objects.create(case=case, position=position, type=kind, params=params)
    return case


@pytest.fixture
def suite(stub) -> Suite:
    agent = Agent.objects.create(
        name="desk", instruction=INSTRUCTION, provider="stub", model="gpt-4o-mini",
        functions=[{"name": "find_order", "description": "Find an order.",
                    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}},
                   {"name": "load_profile", "description": "The customer's profile."}],
        rules=[{"trigger": "conversation_started", "function": "load_profile", "arguments": {}}],
    )
    suite = Suite.objects.create(name="desk", agent=agent, judge_model=STUB, case_timeout_seconds=20)
    add_case(suite, "looks the order up", ["please find_order 1043"], [
        ("toolCalled", {"function": "find_order"}),
        ("outputContains", {"text": "Done"}),
        ("llmJudge", {"criterion": "Reports the order.", "min_score": 4}),
    ])
    add_case(suite, "small talk calls no tool", ["hello there", "and goodbye"], [
        ("outputContains", {"text": "echo: and goodbye"}),
        ("toolCalled", {"function": "find_order"}),
    ])
    return suite


def execute(suite: Suite, mode: str, models: tuple[str, ...] = (STUB,)) -> Run:
    return run_execute(run_id=run_create(suite=suite, model_keys=list(models), mode=mode).pk)


def results(run: Run) -> list[CaseResult]:
    return list(CaseResult.objects.filter(run=run).order_by("position"))


def record(suite: Suite) -> Run:
    run = execute(suite, Run.Mode.RECORD)
    assert [r.status for r in results(run)] == ["passed", "failed"], [r.reason for r in results(run)]
    return run


def test_it_replays_a_recorded_run_identically_after_the_model_server_is_gone(suite, stub):
    recorded = record(suite)
    requests_while_recording = len(stub.requests)
    stub.stop()

    replayed = execute(suite, Run.Mode.REPLAY)

    assert len(stub.requests) == requests_while_recording
    pairs = list(zip(results(recorded), results(replayed), strict=True))
    for before, after in pairs:
        assert (after.status, after.reason) == (before.status, before.reason)
        assert after.assertions == before.assertions
        assert after.tool_calls == before.tool_calls
        assert [m["content"] for m in after.transcript] == [m["content"] for m in before.transcript]
        assert (after.input_tokens, after.output_tokens) == (before.input_tokens, before.output_tokens)
        assert before.cost > 0 and after.cost == 0
    # The rule's call and the judge were replayed too: the whole conversation, not just the agent's answers.
    assert pairs[0][1].tool_calls[0]["name"] == "load_profile"
    assert any(a["type"] == "llmJudge" and a["status"] == "passed" for a in pairs[0][1].assertions)
    # Named as the run names the model, whichever of the harness's providers (here the replay's) carried the call.
    assert {m["model"] for m in pairs[0][1].transcript} == {"", STUB}
    summary = run_summary(run=replayed)[0]
    assert (summary.mode, summary.cost, summary.cost_note) == ("replay", 0, REPLAY_COST_NOTE)
    assert run_summary(run=recorded)[0].cost_note == ""


def test_it_keeps_one_recording_per_case_and_model_and_replaces_it_when_recorded_again(suite):
    first = record(suite)
    second = record(suite)

    recordings = Recording.objects.filter(case__suite=suite)
    assert recordings.count() == 2
    assert set(recordings.values_list("run", flat=True)) == {second.pk}
    entries = recordings.get(case__name="looks the order up").entries
    # The agent's tool call, its final answer, the judge.
    assert [(e["purpose"], e["turn"], e["step"], e["kind"]) for e in entries] == [
        ("agent", 0, 0, "answer"), ("agent", 0, 1, "answer"), ("judge", None, None, "answer")
    ]
    assert entries[0]["response"]["tool_calls"][0]["name"] == "find_order"
    assert all(e["latency_ms"] > 0 and e["response"]["usage"]["input_tokens"] > 0 for e in entries)
    assert "rule_<conversation>_" in str(entries[0]["request"]["messages"])
    assert first.pk != second.pk


@pytest.mark.parametrize("edit", ["instruction", "tool schema"])
def test_it_reports_every_replayed_case_as_stale_when_the_agent_changed(suite, edit):
    record(suite)
    agent = suite.agent
    if edit == "instruction":
        agent.instruction = INSTRUCTION.replace("order desk", "returns desk")
        difference = "First difference: messages[0].content: recorded 'You run the order desk."
    else:
        agent.functions[0]["parameters"]["properties"]["order_id"]["type"] = "integer"
        difference = (
            "First difference: tools[0].function.parameters.properties.order_id.type: recorded 'string' now 'integer'"
        )
    agent.save()

    run = execute(suite, Run.Mode.REPLAY)

    assert run.status == Run.Status.ERROR
    for result in results(run):
        assert result.status == "error"
        assert result.reason.startswith(
            "stale recording: the request at turn 0 step 0 differs from the recording — re-record. "
        )
        assert difference in result.reason
        assert result.assertions == []


def test_it_reports_a_changed_judge_criterion_as_stale(suite):
    record(suite)
    Assertion.objects.filter(type="llmJudge").update(params={"criterion": "Is polite.", "min_score": 4})

    result = results(execute(suite, Run.Mode.REPLAY))[0]

    assert result.status == "error"
    assert result.reason.startswith("stale recording: the judge request for the case differs from the recording")
    assert "messages[1].content: recorded 'Criterion: Reports the order." in result.reason


def test_it_errors_when_the_recording_runs_out_naming_turn_and_step(suite):
    record(suite)
    recording = Recording.objects.get(case__name="small talk calls no tool")
    recording.entries = recording.entries[:1]
    recording.save()

    result = results(execute(suite, Run.Mode.REPLAY))[1]

    assert result.status == "error"
    assert result.reason == (
        "the recording of case 'small talk calls no tool' on stub:gpt-4o-mini is exhausted: it has 1 entries and "
        "none for the request at turn 1 step 0 — re-record"
    )


def test_it_errors_for_a_case_that_was_never_recorded(suite):
    record(suite)
    Recording.objects.filter(case__name="looks the order up").delete()

    first, second = results(execute(suite, Run.Mode.REPLAY))

    assert (first.status, first.reason) == (
        "error",
        "no recording of case 'looks the order up' on any model: run it in record mode on stub:gpt-4o-mini first",
    )
    assert second.status == "failed"


def test_it_names_the_model_a_case_is_recorded_on_when_another_is_replayed(suite):
    # A draft recorded from a production trace is recorded on the trace's model, not on the one the run asked for.
    record(suite)
    Recording.objects.filter(case__name="looks the order up").update(model="function:support-model")

    first, second = results(execute(suite, Run.Mode.REPLAY))

    assert (first.status, first.reason) == (
        "error",
        "no recording of case 'looks the order up' on stub:gpt-4o-mini: its recording is on function:support-model; "
        "replay it on that model, or run it in record mode on stub:gpt-4o-mini first",
    )
    assert second.status == "failed"


def test_it_times_out_on_a_recorded_hang_and_lets_the_case_thread_end(suite):
    record(suite)
    # Long enough for the replayed first step on a slow machine; the hang is what times the case out.
    suite.case_timeout_seconds = 2
    suite.save()
    recording = Recording.objects.get(case__name="looks the order up")
    recording.entries[1] = {**recording.entries[1], "kind": HANG}
    recording.save()

    started = time.monotonic()
    result = results(execute(suite, Run.Mode.REPLAY))[0]

    # The recorded hang lasts an hour (MAX_HANG_SECONDS): the case ended at its timeout, however loaded the machine.
    assert time.monotonic() - started < WAIT_SECONDS
    assert result.status == "error"
    assert result.reason == (
        "the case timed out after 2 s (replayed the hang recorded for the request at turn 0 step 1)"
    )
    # This run's case threads, not the registry's size: a case another test left behind in this process (its call
    # still in flight until its provider's timeout) is not this one.
    ours = list(CaseResult.objects.filter(run=result.run).values_list("conversation_id", flat=True))
    assert ours and None not in ours
    deadline = time.monotonic() + WAIT_SECONDS
    while any(registry.get(conversation) for conversation in ours) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(registry.get(conversation) for conversation in ours), "a case thread of the run is still running"


def test_it_replays_a_provider_error_recorded_live(suite, stub):
    stub.queue(HttpError(400, "the request is malformed"))
    recorded = results(execute(suite, Run.Mode.RECORD))[0]
    assert recorded.status == "error" and "HTTP 400" in recorded.reason
    stub.stop()

    replayed = results(execute(suite, Run.Mode.REPLAY))[0]

    assert replayed.status == "error"
    assert replayed.reason == recorded.reason and "the request is malformed" in replayed.reason
    entry = Recording.objects.get(case__name="looks the order up").entries[0]
    assert (entry["kind"], entry["error"]["code"]) == ("error", "http_400")


def test_it_replays_a_rate_limit_the_recording_waited_out_without_waiting(suite, stub):
    stub.queue(*[rate_limited(0.3)] * 3)
    recorded = results(execute(suite, Run.Mode.RECORD))[0]
    assert recorded.status == "passed" and recorded.reason.startswith("waited 0.9 s for rate limits (3 times")
    stub.stop()

    replayed = results(execute(suite, Run.Mode.REPLAY))[0]

    assert replayed.status == "passed" and replayed.reason.startswith("replayed 3 HTTP 429 answer(s)")
    entries = Recording.objects.get(case__name="looks the order up").entries
    assert (entries[0]["kind"], entries[0]["error"]["code"]) == ("error", "rate_limited")


def test_it_replays_an_error_after_partial_output(suite):
    record(suite)
    recording = Recording.objects.get(case__name="looks the order up")
    first = recording.entries[0]
    recording.entries[0] = {
        **{k: v for k, v in first.items() if k not in ("response", "latency_ms")},
        "kind": "error", "error": {"code": "server_error", "message": "the stream broke", "partial_text": "Let me"},
    }
    recording.save()

    result = results(execute(suite, Run.Mode.REPLAY))[0]

    assert result.status == "error"
    assert "the stream broke (after partial output 'Let me')" in result.reason


def test_it_replays_a_model_that_is_no_longer_configured(suite, settings):
    record(suite)
    settings.AGENTTEST_PROVIDERS = {k: v for k, v in settings.AGENTTEST_PROVIDERS.items() if k != "stub"}

    run = execute(suite, Run.Mode.REPLAY)

    assert [r.status for r in results(run)] == ["passed", "failed"]
    with pytest.raises(RunError, match="is not configured"):
        run_create(suite=suite, model_keys=[STUB])
    with pytest.raises(RunError, match="has no recording of it to replay"):
        run_create(suite=suite, model_keys=["stub:gpt-4o"], mode=Run.Mode.REPLAY)


def test_it_refuses_trials_in_record_mode(suite):
    with pytest.raises(RunError) as raised:
        run_create(suite=suite, model_keys=[STUB], mode=Run.Mode.RECORD, trials=3)

    assert raised.value.field == "trials"
    assert "live mode" in str(raised.value)
    assert not Run.objects.exists()


def test_it_replays_every_trial_from_the_recording_for_free(suite, stub):
    recorded = record(suite)
    requests_while_recording = len(stub.requests)
    stub.stop()

    replayed = run_execute(run_id=run_create(suite=suite, model_keys=[STUB], mode=Run.Mode.REPLAY, trials=3).pk)

    assert len(stub.requests) == requests_while_recording
    trials = results(replayed)
    assert sorted((r.case.name, r.trial) for r in trials) == sorted(
        (r.case.name, trial) for r in results(recorded) for trial in range(3)
    )
    verdicts = {r.case.name: r.status for r in results(recorded)}
    assert all(r.status == verdicts[r.case.name] and r.cost == 0 for r in trials)
    summary = run_summary(run=replayed)[0]
    # One case passes every trial, the other none: pass^3 is one case of two.
    assert (summary.mode, summary.cost, summary.pass_k) == ("replay", 0, 0.5)


def test_it_records_a_call_still_hanging_at_the_timeout_as_a_hang_and_replays_it(scripted_model, make_case):
    agent = Agent.objects.create(name="slow", instruction="Answer.", provider="scripted", model="scripted")
    # Long enough for the hanging call to start on a slow machine: a call is never started past the timeout.
    suite = Suite.objects.create(name="slow", agent=agent, case_timeout_seconds=2)
    make_case(
        suite, "waits", turns=("hi",), mocks=(), assertions=({"type": "outputContains", "params": {"text": "hi"}},)
    )
    scripted_model.play(Hang(seconds=30))

    recorded = results(execute(suite, Run.Mode.RECORD, models=(scripted_model.key,)))[0]
    scripted_model.release_hangs()
    replayed = results(execute(suite, Run.Mode.REPLAY, models=(scripted_model.key,)))[0]

    assert recorded.reason == "the case timed out after 2 s"
    assert [entry["kind"] for entry in Recording.objects.get(case__suite=suite).entries] == [HANG]
    assert replayed.reason == (
        "the case timed out after 2 s (replayed the hang recorded for the request at turn 0 step 0)"
    )
    assert len(scripted_model.requests) == 1
