"""A provider's concurrency limit and a case's timeout hold at the server: against real local OpenAI-compatible
servers (the stub, answering slowly and counting the requests it is working on), through real runs.

- `max_concurrency = 1` means one request in flight however many cases run side by side, the agents' and the
  llmJudge's calls alike (issue 27, item 10);
- a case that timed out while its call waited for a slot sends nothing: the server never has more than the limit
  in flight (item 11);
- a case ends at its timeout: the call in flight is cut there, no retry starts past it, and the result's duration
  is the timeout plus a short grace — not the provider's timeout × attempts (item 17).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agenthost.llm.scripted import Answer, Call, Hang
from agenthost.models import Agent
from agenthost.testing.openai_stub import HttpError, OpenAIStub, echo_reply
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Recording, Run
from runs.services import run_create, run_execute
from runs.tapes.replay import HANG
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.runs.test_concurrency import stub_provider
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

AGENT_MODEL = "stub:gpt-4o-mini"
JUDGE_MODEL = "judge:gpt-4o-mini"
VERDICT = '{"score": 5, "reason": "it looked the order up"}'
# A provider as configured by default: a minute per attempt, three attempts.
PATIENT = {"timeout": 60.0, "max_retries": 2}
_names = itertools.count()


def answer(body: dict) -> Answer:
    """The judge's verdict for a judge request (it asks for a JSON Schema), else the echo rules."""
    if body.get("response_format"):
        return Answer(VERDICT)
    return echo_reply(body)


@pytest.fixture
def stubs(settings) -> Iterator[tuple[OpenAIStub, OpenAIStub]]:
    with OpenAIStub() as agent_stub, OpenAIStub() as judge_stub:
        agent_stub.respond_with(answer)
        judge_stub.respond_with(answer)
        configure(settings, agent=agent_stub, judge=judge_stub)
        yield agent_stub, judge_stub


def configure(settings, *, agent: OpenAIStub, judge: OpenAIStub, agent_options=None, judge_options=None) -> None:
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "stub": stub_provider(agent.base_url, **(agent_options or {})),
        "judge": stub_provider(judge.base_url, **(judge_options or {})),
    }


def make_suite(
    *, cases: int, concurrency: int, timeout: int = 30, judge: str = "", model: str = AGENT_MODEL
) -> Suite:
    """Cases of one turn that looks an order up; with a judge model, each also has an llmJudge on its turn."""
    name = f"desk-{next(_names)}"
    provider, _, model_name = model.partition(":")
    agent = Agent.objects.create(
        name=name, instruction="You run the order desk.", provider=provider, model=model_name,
        functions=[{"name": "find_order", "description": "Find an order.",
                    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}],
    )
    suite = Suite.objects.create(
        name=name, agent=agent, judge_model=judge, case_timeout_seconds=timeout, case_concurrency=concurrency
    )
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"case {index:02d}")
        turn = Turn.objects.create(case=case, position=0, user_message=f"please find_order {1000 + index}")
        Mock.objects.create(case=case, function_name="find_order", result=f'{{"order_id": "{1000 + index}"}}')
        Assertion.objects.create(
            case=case, turn=turn, position=0, type="toolCalled", params={"function": "find_order"}
        )
        if judge:
            Assertion.objects.create(
                case=case, turn=turn, position=1, type="llmJudge", params={"criterion": "Looks the order up."}
            )
    return suite


def execute(suite: Suite, mode: str = Run.Mode.LIVE, model: str = AGENT_MODEL) -> Run:
    run = run_create(suite=suite, model_keys=[model], mode=mode)
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def results(run: Run) -> list[CaseResult]:
    return list(CaseResult.objects.filter(run=run).order_by("position"))


def judged(stub: OpenAIStub) -> int:
    return sum(1 for body in stub.requests if body.get("response_format"))


def settle(*stubs: OpenAIStub) -> None:
    """Wait until the servers work on nothing any more (a request whose client hung up is dropped)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while any(stub.in_flight for stub in stubs) and time.monotonic() < deadline:
        time.sleep(0.05)


# --- Item 10: max_concurrency = 1 is one request in flight --------------------------------------------------------


@hypothesis_settings(
    max_examples=5, deadline=None, derandomize=True,
    suppress_health_check=SUPPRESSED_WITH_FIXTURES,
)
@given(
    limit=st.integers(min_value=1, max_value=2),
    concurrency=st.integers(min_value=2, max_value=4),
    cases=st.integers(min_value=2, max_value=5),
)
def test_it_keeps_a_providers_requests_in_flight_within_its_max_concurrency_with_cases_side_by_side(
    stubs, settings, limit, concurrency, cases
):
    agent_stub, judge_stub = stubs
    configure(settings, agent=agent_stub, judge=judge_stub, agent_options={"max_concurrency": limit})
    agent_stub.delay = 0.05
    agent_stub.most_in_flight = 0
    judged_before = judged(agent_stub)

    run = execute(make_suite(cases=cases, concurrency=concurrency, judge=AGENT_MODEL))

    assert run.status == "passed", run.reason
    assert judged(agent_stub) - judged_before == cases, "every case's judge call went to the agent's provider"
    assert agent_stub.most_in_flight <= limit, (
        f"the server had {agent_stub.most_in_flight} requests in flight at once; the limit is {limit}"
    )


def test_it_keeps_one_judge_request_in_flight_on_a_judge_provider_limited_to_one(stubs, settings):
    agent_stub, judge_stub = stubs
    configure(settings, agent=agent_stub, judge=judge_stub, judge_options={"max_concurrency": 1})
    agent_stub.delay = judge_stub.delay = 0.05

    run = execute(make_suite(cases=6, concurrency=4, judge=JUDGE_MODEL))

    assert run.status == "passed", run.reason
    assert judged(judge_stub) == 6
    assert agent_stub.most_in_flight > 1, "the agent's provider, unlimited, took the cases side by side"
    assert judge_stub.most_in_flight == 1


# --- Item 11: a case that timed out waiting for a slot sends nothing ----------------------------------------------


def test_it_sends_nothing_for_cases_that_timed_out_waiting_for_a_slot(stubs, settings):
    agent_stub, judge_stub = stubs
    configure(settings, agent=agent_stub, judge=judge_stub, agent_options={**PATIENT, "max_concurrency": 2})
    # Slower than the cases' timeout: the two cases with a slot time out in their call, the others waiting for one.
    # Longer than any loaded machine takes to end them (issue 40): a run that waited for the answers would take this.
    agent_stub.delay = WAIT_SECONDS

    started = time.monotonic()
    run = execute(make_suite(cases=4, concurrency=4, timeout=2))
    elapsed = time.monotonic() - started
    settle(agent_stub)

    assert agent_stub.most_in_flight <= 2, (
        f"the server had {agent_stub.most_in_flight} requests in flight at once; the limit is 2"
    )
    assert [(r.status, r.reason) for r in results(run)] == [("error", "the case timed out after 2 s")] * 4
    assert elapsed < WAIT_SECONDS, "the cases ended at their timeout, not the server's answer"


def test_it_sends_no_judge_request_for_cases_that_timed_out_waiting_for_the_judges_slot(stubs, settings):
    agent_stub, judge_stub = stubs
    configure(settings, agent=agent_stub, judge=judge_stub, judge_options={**PATIENT, "max_concurrency": 1})
    # The judge answers after any case's timeout; the timeout leaves the agent's two answers time to come on a loaded
    # machine (2 s did not, with the suite on one core: no case reached the judge).
    judge_stub.delay = WAIT_SECONDS

    run = execute(make_suite(cases=3, concurrency=3, timeout=30, judge=JUDGE_MODEL))
    settle(judge_stub)

    assert judge_stub.most_in_flight == 1
    assert len(agent_stub.requests) == 3 * 2, "every case's agent answered (a tool call, then its reply)"
    assert [(r.status, r.reason) for r in results(run)] == [("error", "the case timed out after 30 s")] * 3


def test_it_sends_nothing_for_timed_out_cases_behind_a_call_its_provider_does_not_end(scripted_model, settings):
    """A provider kind that ignores the request's deadline (the scripted one, a plugin's): its stuck call keeps the
    only slot past the timeout. The cases waiting for the slot give up without calling; once the stuck case is left
    behind, its slot is given back and the cases after it run."""
    scripted = {**settings.AGENTTEST_PROVIDERS["scripted"], "max_concurrency": 1}
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "scripted": scripted}
    lock, asked = threading.Lock(), []

    def model(request):
        with lock:
            asked.append(request)
            first = len(asked) == 1
        if first:
            return Hang(seconds=30)
        if request.messages[-1]["role"] == "tool":
            return Answer("It has shipped.")
        return Answer(tool_calls=[Call("find_order", {"order_id": "1000"})])

    scripted_model.respond_with(model)

    run = execute(make_suite(cases=4, concurrency=2, timeout=3, model=scripted_model.key), model=scripted_model.key)

    statuses = [(r.status, r.reason) for r in results(run)]
    assert statuses[:2] == [("error", "the case timed out after 3 s")] * 2, statuses
    assert [status for status, _ in statuses[2:]] == ["passed", "passed"], statuses
    assert len(asked) == 1 + 2 * 2, "the case that timed out waiting for the slot called nothing"


# --- Item 17: a case ends at its timeout ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [Run.Mode.LIVE, Run.Mode.RECORD])
def test_it_ends_a_case_at_its_timeout_while_the_model_is_still_answering(stubs, settings, mode):
    agent_stub, judge_stub = stubs
    configure(settings, agent=agent_stub, judge=judge_stub, agent_options=PATIENT)
    agent_stub.delay = WAIT_SECONDS

    started = time.monotonic()
    run = execute(make_suite(cases=2, concurrency=1, timeout=4), mode)
    elapsed = time.monotonic() - started
    settle(agent_stub)

    timed_out = results(run)
    assert [(r.status, r.reason) for r in timed_out] == [("error", "the case timed out after 4 s")] * 2
    # Not bounded by the timeout itself (a loaded machine ends them later): by the answer they did not wait for.
    for result in timed_out:
        assert result.duration_ms < WAIT_SECONDS * 1000, result.duration_ms
    assert elapsed < WAIT_SECONDS, "neither case waited for the server's answer"
    # Each case's call reached the server at most once. On one loaded core a case may spend its whole timeout
    # before its call starts (a pinned run: the second case sent nothing); one of them must have been cut while the
    # server was answering, or the test saw nothing of what it is about.
    reached = Counter(_user_message(body) for body in agent_stub.requests)
    assert reached, "no call reached the server before its case's timeout"
    assert set(reached.values()) == {1}, f"the call cut at the timeout was retried: {reached}"
    assert agent_stub.in_flight == 0, "the cut calls hung up"
    if mode == Run.Mode.RECORD:
        # Cut by the timeout, not failed by the model: a replay times out at the same place.
        for recording in Recording.objects.filter(case__suite=run.suite).prefetch_related("case__turns"):
            if recording.case.turns.get().user_message in reached:
                assert [entry["kind"] for entry in recording.entries] == [HANG]


def _user_message(body: dict) -> str:
    return next(message["content"] for message in body["messages"] if message["role"] == "user")


def test_it_starts_no_retry_past_the_cases_timeout(stubs, settings):
    agent_stub, judge_stub = stubs
    configure(settings, agent=agent_stub, judge=judge_stub, agent_options={"timeout": 60.0, "max_retries": 10})
    agent_stub.respond_with(
        # Retries 12 s apart in a 20 s case: the first fits (at about 12 s), the next would start past the timeout,
        # however slow the machine — the first call may start as late as 8 s in, the retry's answer take 8 s. (With
        # retries 1.5 s apart in a 4 s case, a machine pinned to one core answered the third after the timeout.)
        lambda body: HttpError(503, "overloaded", {"Retry-After": "12", "retry-after-ms": "12000"})
    )

    started = time.monotonic()
    run = execute(make_suite(cases=1, concurrency=1, timeout=20))
    elapsed = time.monotonic() - started

    (result,) = results(run)
    arrived = agent_stub.times
    assert len(arrived) == 2, "retried once as the server asked, while the case had time for it"
    assert 12 <= arrived[1] - arrived[0] < 20, "the retry waited as asked, and no retry started past the timeout"
    assert result.status == "error"
    assert result.reason.startswith("the model call failed at turn 0: "), result.reason
    assert "provider 'stub': HTTP 503 from" in result.reason and "timed out" not in result.reason
    # The run did not wait for the provider's ten retries (two minutes): it ended with the call that failed.
    assert result.duration_ms < 20_000 and elapsed < 60
