"""A hermetic suite may run its cases side by side, and gets the same results as a serial run: statuses, assertion
results, JUnit order, recordings keyed per case — with budgets and cancel still exact, and a provider's 429s met by
lowering the run's concurrency for it (AIMD), not by Error. Against a real local OpenAI-compatible server."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import pytest
from django.urls import reverse

from agenthost.llm.scripted import Answer
from agenthost.models import Agent
from agenthost.testing.openai_stub import HttpError, OpenAIStub, echo_reply
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Recording, Run
from runs.services import run_cancel, run_create, run_execute
from runs.web.junit import run_to_junit
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

STUB = "stub:gpt-4o-mini"
CASES = 12


def stub_provider(base_url: str, **options: object) -> dict:
    # The timeout bounds a call to the in-process stub on a machine CI may load with every core busy: it is not what
    # these tests measure (a case still ends at the suite's 30 s), so it leaves room for a starved stub thread.
    return {
        "kind": "openai", "base_url": base_url, "api_key_env": "", "timeout": 25.0, "max_retries": 0,
        "models": [{"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.6, "label": ""}], **options,
    }


class Server:
    """The stub's echo rules after a fixed latency, counting the calls in flight at once (the most ever seen)."""

    def __init__(self, stub: OpenAIStub, *, latency: float = 0.03, storm_above: int | None = None) -> None:
        self.stub, self.latency, self.storm_above = stub, latency, storm_above
        self.in_flight = self.most = self.refused = 0
        self._lock = threading.Lock()
        stub.respond_with(self.reply)

    def reply(self, body: dict) -> Answer | str | HttpError:
        with self._lock:
            if self.storm_above is not None and self.in_flight >= self.storm_above:
                self.refused += 1
                return HttpError(429, "slow down")
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            time.sleep(self.latency)
            return echo_reply(body)
        finally:
            with self._lock:
                self.in_flight -= 1


@pytest.fixture
def stub(settings) -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": stub_provider(server.base_url)}
        yield server


def make_suite(name: str = "desk", cases: int = CASES, **fields: object) -> Suite:
    agent = Agent.objects.create(
        name=f"{name}-agent", instruction="You run the order desk.", provider="stub", model="gpt-4o-mini",
        functions=[{"name": "find_order", "description": "Find an order.",
                    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}},
                   {"name": "void_order"}],
    )
    suite = Suite.objects.create(name=name, agent=agent, **{"case_timeout_seconds": 30, **fields})
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"case {index:02d}")
        turns = [
            Turn.objects.create(case=case, position=position, user_message=text)
            for position, text in enumerate([f"please find_order {1000 + index}", "thanks", "bye"])
        ]
        Mock.objects.create(case=case, function_name="find_order", result=f'{{"order_id": "{1000 + index}"}}')
        Assertion.objects.create(case=case, turn=turns[0], type="toolCalled", params={"function": "find_order"})
        # Every third case fails on its last turn, so a mix of verdicts must come out in the same places.
        expected = "echo: nope" if index % 3 == 0 else "echo: bye"
        Assertion.objects.create(case=case, turn=turns[2], position=1, type="outputContains", params={"text": expected})
    return suite


def execute(suite: Suite, **options: object) -> Run:
    run = run_create(suite=suite, model_keys=[STUB], **options)
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def comparable_junit(run: Run) -> str:
    """The JUnit report without what differs between any two runs: timings, the run's id, its start."""
    text = run_to_junit(run)
    text = re.sub(r' time="[0-9.]+"', "", text)
    text = re.sub(r' timestamp="[^"]*"', "", text)
    text = re.sub(r"run #\d+", "run #N", text)
    return re.sub(r'(name="run" value=)"\d+"', r'\1"N"', text)


def outcomes(run: Run) -> list[tuple]:
    return [
        (r.position, r.case_name, r.status, r.reason, [(a["type"], a["status"]) for a in r.assertions], r.tool_calls)
        for r in CaseResult.objects.filter(run=run).order_by("position")
    ]


def set_concurrency(suite: Suite, concurrency: int) -> None:
    Suite.objects.filter(pk=suite.pk).update(case_concurrency=concurrency)
    suite.refresh_from_db()


def test_it_gives_the_same_results_and_junit_running_eight_cases_at_once_as_serially(stub):
    server = Server(stub)
    suite = make_suite()
    serial = execute(suite)
    assert server.most == 1

    set_concurrency(suite, 8)
    concurrent = execute(suite)

    assert server.most > 1, "the cases really ran side by side"
    assert serial.status == concurrent.status == "failed", [o for o in outcomes(concurrent) if o[2] == "error"]
    assert (serial.passed, serial.failed, serial.errored) == (concurrent.passed, concurrent.failed, 0) == (8, 4, 0)
    assert outcomes(serial) == outcomes(concurrent)
    assert comparable_junit(serial) == comparable_junit(concurrent)
    assert concurrent.reason == serial.reason == "4 of 12 results failed"


def test_it_keys_recordings_per_case_when_recording_side_by_side_so_a_serial_replay_matches(stub):
    Server(stub, latency=0.01)
    suite = make_suite(cases=8)
    set_concurrency(suite, 4)
    recorded = execute(suite, mode=Run.Mode.RECORD)
    assert Recording.objects.filter(case__suite=suite).count() == 8
    for recording in Recording.objects.filter(case__suite=suite).select_related("case"):
        number = 1000 + int(recording.case.name.split()[1])
        assert f"find_order {number}" in str(recording.entries[0]["request"]), "each case's own traffic"
    stub.stop()

    set_concurrency(suite, 1)
    replayed = execute(suite, mode=Run.Mode.REPLAY)

    assert outcomes(replayed) == outcomes(recorded)
    assert comparable_junit(replayed) == comparable_junit(recorded)


def test_it_starts_nothing_once_the_budget_is_crossed_and_counts_the_cases_in_flight(stub):
    Server(stub, latency=0.05)
    suite = make_suite(cases=CASES)
    set_concurrency(suite, 4)
    run = execute(suite, budget_tokens=1)

    results = list(CaseResult.objects.filter(run=run).order_by("position"))
    tokens = sum(result.total_tokens for result in results)
    assert run.status == "error"
    assert run.reason == (
        f"budget exhausted after {len(results)} of {CASES} results: {tokens} tokens used of a budget of 1"
    )
    # Whatever started is stored and counted, and at most the pairs already in flight ran past the crossing.
    assert 1 <= len(results) <= 4
    assert [r.position for r in results] == list(range(len(results)))
    conversations = {r.conversation_id for r in results}
    assert len(conversations) == len(results) and None not in conversations


def test_it_starts_nothing_after_a_cancel_and_stores_every_case_in_flight(stub):
    Server(stub, latency=0.1)
    suite = make_suite(cases=40)
    set_concurrency(suite, 4)
    run = run_create(suite=suite, model_keys=[STUB])
    worker = threading.Thread(target=run_execute, kwargs={"run_id": run.pk})
    worker.start()
    deadline = time.monotonic() + WAIT_SECONDS
    while CaseResult.objects.filter(run=run).count() < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    run_cancel(run=Run.objects.get(pk=run.pk))
    worker.join(60)
    assert not worker.is_alive()

    run.refresh_from_db()
    ran = list(CaseResult.objects.filter(run=run).exclude(status="cancelled"))
    cancelled = CaseResult.objects.filter(run=run, status="cancelled").count()
    assert run.status == "cancelled" and run.reason == f"cancelled after {len(ran)} of 40 results"
    assert len(ran) + cancelled == 40 and 3 <= len(ran) < 40
    # Every case that started has its result: its conversation, stored before the verdict.
    test_conversations = {r.conversation_id for r in ran}
    assert len(test_conversations) == len(ran)
    assert sorted(r.position for r in CaseResult.objects.filter(run=run)) == list(range(40))


def test_it_lowers_concurrency_on_a_429_storm_and_ends_without_error(stub, admin_client):
    server = Server(stub, latency=0.05, storm_above=2)
    # Sixteen cases of four calls each share at most two calls at once: on a loaded machine (a CI run with a CPU hog
    # beside it) the eight cases started together waited past 30 s for their turns and timed out as Error. Their
    # time is not what this test measures.
    suite = make_suite(cases=16, case_timeout_seconds=300)
    set_concurrency(suite, 8)
    run = execute(suite)

    assert server.refused >= 1, "the stub refused calls past two at once"
    assert run.errored == 0 and run.status == "failed", [o for o in outcomes(run) if o[2] == "error"]
    assert (run.passed, run.failed) == (10, 6)
    throttle = run.throttle["stub"]
    assert throttle["throttled"] >= 1 and throttle["start"] == 8 and throttle["lowest"] <= 4
    page = admin_client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert f"stub throttled: {throttle['throttled']} × 429, concurrency 8 → {throttle['lowest']}" in page


def test_it_keeps_a_providers_calls_within_its_max_concurrency(stub, settings):
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS, "stub": stub_provider(stub.base_url, max_concurrency=2)
    }
    server = Server(stub, latency=0.05)
    suite = make_suite(cases=8)
    set_concurrency(suite, 6)
    run = execute(suite)

    assert server.most == 2
    assert run.errored == 0 and run.throttle == {}


def test_it_runs_serially_a_suite_that_is_no_longer_hermetic(stub):
    server = Server(stub, latency=0.02)
    suite = make_suite(cases=4)
    # As a legacy row could hold it: an extra-allowed function that is not declared free of outside effects.
    Suite.objects.filter(pk=suite.pk).update(case_concurrency=4, extra_allowed_functions=["void_order"])
    run = execute(Suite.objects.get(pk=suite.pk))
    assert server.most == 1 and run.done == 4


def test_it_refuses_concurrency_for_a_suite_that_is_not_hermetic_and_names_the_field(admin_client_api, stub):
    suite = make_suite(cases=1)
    Suite.objects.filter(pk=suite.pk).update(extra_allowed_functions=["void_order"])

    response = admin_client_api.patch(f"/api/suites/{suite.pk}/", {"case_concurrency": 4}, format="json")

    assert response.status_code == 400
    assert "case_concurrency" in str(response.json()), response.json()
    assert "only a hermetic suite may run cases side by side" in str(response.json())
    assert Suite.objects.get(pk=suite.pk).case_concurrency == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [("case_concurrency", 0), ("case_concurrency", 65), ("case_concurrency", "many"), ("isolation_group", "GPU box"),
     ("isolation_group", ""), ("isolation_group", "a,b"), ("isolation_group", "x" * 51)],
)
def test_it_refuses_a_bad_group_or_concurrency_with_a_400_naming_the_field(admin_client_api, stub, field, value):
    suite = make_suite(cases=1)
    response = admin_client_api.patch(f"/api/suites/{suite.pk}/", {field: value}, format="json")
    assert response.status_code == 400
    assert field in str(response.json())
    suite.refresh_from_db()
    assert (suite.case_concurrency, suite.isolation_group) == (1, "default")


def test_it_accepts_concurrency_and_a_group_for_a_hermetic_suite(admin_client_api, stub):
    suite = make_suite(cases=1)
    response = admin_client_api.patch(
        f"/api/suites/{suite.pk}/", {"case_concurrency": 8, "isolation_group": "gpu-1"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert (response.json()["case_concurrency"], response.json()["isolation_group"]) == (8, "gpu-1")
    run = run_create(suite=Suite.objects.get(pk=suite.pk), model_keys=[STUB])
    assert run.isolation_group == "gpu-1"


def test_it_shows_the_refusal_on_the_admin_form(admin_client, stub):
    suite = make_suite(cases=1)
    Suite.objects.filter(pk=suite.pk).update(extra_allowed_functions=["void_order"])
    url = reverse("admin:cases_suite_change", args=[suite.pk])
    form = {
        "name": suite.name, "description": "", "agent": suite.agent_id, "judge_model": "",
        "extra_allowed_functions": '["void_order"]', "force_blocked_functions": "[]", "case_timeout_seconds": 30,
        "enabled": "on", "isolation_group": "default", "case_concurrency": 4,
    }
    response = admin_client.post(url, form)
    assert response.status_code == 200
    assert "only a hermetic suite may run cases side by side" in response.content.decode()
    assert Suite.objects.get(pk=suite.pk).case_concurrency == 1


def test_it_starts_no_case_once_the_cases_in_flight_spent_the_budget_whichever_finishes_first(scripted_model):
    """The budget crossed by two cases in flight, neither alone over it, and the one that finishes first holding
    less than the budget: nothing new starts (a third case once did, only to be refused its first model call)."""
    from agenthost.llm.base import Usage

    agent = Agent.objects.create(name="spender", instruction="Answer.", provider="scripted", model="scripted")
    suite = Suite.objects.create(name="spender", agent=agent, case_timeout_seconds=WAIT_SECONDS, case_concurrency=2)
    for name, messages, expected in (("a", ["a: first", "a: second"], "second"), ("b", ["b: only"], "only"),
                                     ("c", ["c: only"], "first")):
        case = Case.objects.create(suite=suite, name=name)
        for position, text in enumerate(messages):
            turn = Turn.objects.create(case=case, position=position, user_message=text)
        Assertion.objects.create(case=case, turn=turn, type="outputContains", params={"text": expected})
    run = run_create(suite=suite, model_keys=[scripted_model.key], budget_tokens=100)
    a_in_flight, b_stored = threading.Event(), threading.Event()

    def answer(request):
        text = request.messages[-1]["content"]
        if text == "a: second":
            a_in_flight.set()
            # Case a is still in flight, 60 tokens spent, when case b's 50 cross the budget and b is stored. Given a
            # second more, the loop of old started case c then.
            wait_for_b = time.monotonic() + WAIT_SECONDS
            while not CaseResult.objects.filter(run=run, case_name="b").exists() and time.monotonic() < wait_for_b:
                time.sleep(0.05)
            b_stored.set()
            time.sleep(1)
            return Answer("second", usage=Usage(input_tokens=10))
        if text == "b: only":
            a_in_flight.wait(WAIT_SECONDS)
            return Answer("only", usage=Usage(input_tokens=50))
        return Answer("first", usage=Usage(input_tokens=60))

    scripted_model.respond_with(answer)
    run_execute(run_id=run.pk)
    run.refresh_from_db()

    assert b_stored.is_set()
    assert sorted(CaseResult.objects.filter(run=run).values_list("case_name", flat=True)) == ["a", "b"]
    assert run.status == Run.Status.ERROR
    assert run.reason == "budget exhausted after 2 of 3 results: 120 tokens used of a budget of 100"
