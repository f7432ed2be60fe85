"""The llmJudge's calls in a run go through the run's throttle for the judge model's provider, as the agent's do:
that provider's max_concurrency caps them (together with its agent calls), a 429 lowers the limit and is backed off
and made again, and the run page says so — while the judge's usage is counted exactly as before. Against two real
local OpenAI-compatible servers: one for the agent, one for the judge."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from decimal import Decimal

import pytest
from django.urls import reverse

from agenthost.llm.base import Usage
from agenthost.llm.scripted import Answer
from agenthost.models import Agent
from agenthost.testing.openai_stub import HttpError, OpenAIStub, echo_reply
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.runs.test_concurrency import stub_provider
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

AGENT_MODEL = "stub:gpt-4o-mini"
JUDGE_MODEL = "judge:gpt-4o-mini"
VERDICT = '{"score": 5, "reason": "it looked the order up"}'
# What each judge answer says it used, so a result's judge tokens show how many of its judge calls were counted.
JUDGE_USAGE = Usage(input_tokens=10, output_tokens=5)
# Per case: one judge call after its turn and one over the whole case.
JUDGES_PER_CASE = 2


class Counting:
    """Answers after a fixed latency — the agent's echo rules, or the judge's verdict — counting the calls in flight
    at once (the most ever seen); the calls that arrive as number `refuse` (from 0) are refused with a 429.

    The first `together` calls are held until that many are in flight: whether calls the product lets run side by side
    did overlap is then up to the product, not to how the machine's load spread the cases out in time."""

    def __init__(
        self, stub: OpenAIStub, *, latency: float = 0.05, refuse: range = range(0), retry_after: float | None = None,
        together: int = 1,
    ) -> None:
        self.latency, self.refuse, self.retry_after = latency, refuse, retry_after
        self.arrived = self.in_flight = self.most = self.refused = self.judged = 0
        self._lock = threading.Lock()
        self._together = threading.Barrier(together, timeout=WAIT_SECONDS)
        stub.respond_with(self.reply)

    def reply(self, body: dict) -> Answer | HttpError:
        with self._lock:
            number, self.arrived = self.arrived, self.arrived + 1
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            if number < self._together.parties:
                # A product that never lets them overlap breaks the barrier at its timeout: `most` then says so.
                with suppress(threading.BrokenBarrierError):
                    self._together.wait()
            time.sleep(self.latency)
            if number in self.refuse:
                with self._lock:
                    self.refused += 1
                headers = {} if self.retry_after is None else {
                    "Retry-After": f"{self.retry_after:g}", "retry-after-ms": f"{self.retry_after * 1000:g}"
                }
                return HttpError(429, "slow down", headers)
            if body.get("response_format"):
                with self._lock:
                    self.judged += 1
                return Answer(VERDICT, usage=JUDGE_USAGE)
            return echo_reply(body)
        finally:
            with self._lock:
                self.in_flight -= 1


@pytest.fixture
def servers(settings) -> Iterator[tuple[OpenAIStub, OpenAIStub]]:
    with OpenAIStub() as agent_stub, OpenAIStub() as judge_stub:
        settings.AGENTTEST_PROVIDERS = {
            **settings.AGENTTEST_PROVIDERS,
            "stub": stub_provider(agent_stub.base_url),
            "judge": stub_provider(judge_stub.base_url, max_concurrency=3),
        }
        yield agent_stub, judge_stub


def make_suite(*, cases: int, concurrency: int, judge: str = JUDGE_MODEL, timeout: int = 30) -> Suite:
    agent = Agent.objects.create(
        name="desk", instruction="You run the order desk.", provider="stub", model="gpt-4o-mini",
        functions=[{"name": "find_order", "description": "Find an order.",
                    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}],
    )
    suite = Suite.objects.create(
        name="desk", agent=agent, judge_model=judge, case_timeout_seconds=timeout, case_concurrency=concurrency
    )
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"case {index:02d}")
        turn = Turn.objects.create(case=case, position=0, user_message=f"please find_order {1000 + index}")
        Mock.objects.create(case=case, function_name="find_order", result=f'{{"order_id": "{1000 + index}"}}')
        Assertion.objects.create(
            case=case, turn=turn, position=0, type="toolCalled", params={"function": "find_order"}
        )
        Assertion.objects.create(
            case=case, turn=turn, position=1, type="llmJudge", params={"criterion": "Looks the order up."}
        )
        Assertion.objects.create(case=case, position=2, type="llmJudge", params={"criterion": "Reports the order."})
    return suite


def execute(suite: Suite, mode: str = Run.Mode.LIVE) -> Run:
    run = run_create(suite=suite, model_keys=[AGENT_MODEL], mode=mode)
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


@pytest.mark.parametrize("mode", [Run.Mode.LIVE, Run.Mode.RECORD])
def test_it_lowers_the_judge_providers_concurrency_on_its_429s_and_ends_without_error(servers, admin_client, mode):
    agent_stub, judge_stub = servers
    Counting(agent_stub, latency=0.02)
    judge = Counting(judge_stub, refuse=range(2, 10), together=2)
    run = execute(make_suite(cases=12, concurrency=6), mode)

    # The run's outcome first: when cases end in Error, their reasons are what a failure here must show (calls that
    # stalled in the stub left 3 cases unjudged, and the count below said only that 18 of 24 judge calls were made).
    assert run.errored == 0 and run.status == "passed", [r.reason for r in CaseResult.objects.filter(run=run)]
    assert judge.refused == 8 and judge.judged == 12 * JUDGES_PER_CASE
    assert 2 <= judge.most <= 3, "the judge's calls ran side by side, never more than its max_concurrency"
    throttle = run.throttle["judge"]
    assert (throttle["throttled"], throttle["start"], throttle["lowest"]) == (8, 3, 1)
    assert "stub" not in run.throttle, "the agent's provider met no 429"
    page = admin_client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "judge throttled: 8 × 429, concurrency 3 → 1" in page
    # Exactly the judge answers are counted: a refused call used nothing.
    results = list(CaseResult.objects.filter(run=run))
    assert {(r.judge_input_tokens, r.judge_output_tokens) for r in results} == {(20, 10)}
    assert sum(r.judge_cost for r in results) == Decimal("0.000108")


def test_it_replays_a_recording_of_the_judges_throttled_429s_without_calling_it(servers):
    agent_stub, judge_stub = servers
    Counting(agent_stub, latency=0.01)
    Counting(judge_stub, refuse=range(1, 5))
    suite = make_suite(cases=6, concurrency=3)
    recorded = execute(suite, Run.Mode.RECORD)
    assert recorded.status == "passed" and recorded.throttle["judge"]["throttled"] == 4
    agent_stub.stop()
    judge_stub.stop()

    replayed = execute(suite, Run.Mode.REPLAY)

    assert replayed.status == "passed" and replayed.errored == 0, replayed.reason
    assert replayed.throttle == {}, "a replay calls no model, so nothing is throttled"


def test_it_counts_the_judges_calls_within_the_limit_its_provider_shares_with_the_agent(servers, settings):
    agent_stub, _ = servers
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS, "stub": stub_provider(agent_stub.base_url, max_concurrency=2)
    }
    server = Counting(agent_stub, latency=0.05, together=2)
    run = execute(make_suite(cases=8, concurrency=6, judge=AGENT_MODEL))

    assert run.status == "passed", run.reason
    assert server.judged == 8 * JUDGES_PER_CASE
    assert server.most == 2, "agent and judge calls of one provider together stay within its max_concurrency"


def test_it_errors_the_judges_assertion_as_rate_limited_when_its_429s_outlast_the_case_timeout(servers):
    agent_stub, judge_stub = servers
    Counting(agent_stub, latency=0.01)
    # Each 429 asks for a minute, which no 30 s case can wait: the judge errors at its first refusal, whatever the
    # machine's speed (with back-offs of its own choosing it waited until just before a 3 s timeout, and a slow
    # machine's last call ran past it: "timed out").
    judge = Counting(judge_stub, latency=0.01, refuse=range(10**6), retry_after=60)
    run = execute(make_suite(cases=2, concurrency=2, timeout=30))

    assert run.status == "error" and run.errored == 2
    for result in CaseResult.objects.filter(run=run):
        assert result.reason.startswith(
            "llmJudge (turn 0) could not be evaluated: the judge model failed: "
            "provider 'judge': rate limited (HTTP 429)"
        ), result.reason
        assert "timed out" not in result.reason
        judged = [a for a in result.assertions if a["type"] == "llmJudge"]
        assert len(judged) == JUDGES_PER_CASE
        assert all(a["status"] == "error" and "rate limited (HTTP 429)" in a["message"] for a in judged), judged
        assert result.duration_ms < 30_000, "it gave up before the case's timeout rather than hang until it"
    assert run.throttle["judge"]["throttled"] >= 2
    # Never asked again sooner than the minute the judge's endpoint asked for.
    assert judge.arrived == 2 * JUDGES_PER_CASE
