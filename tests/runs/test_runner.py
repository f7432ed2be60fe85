"""One case on one model under the mock seam: nothing real runs, and every result says honestly what happened."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
from django.core import mail

from agenthost.executor import unregister_executor_provider
from agenthost.llm.scripted import Answer, Call, Fail
from agenthost.models import Agent, Message
from agenthost.seams import executor_providers, get_model, register_executor_provider
from agenthost.services import conversation_send, conversation_start
from runs.engine.case_runner import execute_case
from runs.engine.case_session import ALLOWED_FUNCTIONS, CaseSession, MockSpec, registry
from runs.engine.mocking import BLOCKED_PREFIX, mock_provider
from runs.engine.plans import AssertionPlan, CasePlan, SuitePlan, TurnPlan
from tests.order_tools import TRACK_ORDER, VOID_ORDER

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent(scripted_model):
    # Its own model is not the model under test, which a case runs on (the agent load hook); a conversation outside
    # a case has to be moved onto the scripted one.
    return Agent.objects.create(
        name="mailer",
        instruction="Help.",
        provider="scripted",
        model="own",
        functions=[
            {"name": TRACK_ORDER},
            {"name": "util-email-handle_email_sender"},
            {"name": "util-http-handle_http_request"},
            {"name": "response_to_user"},
        ],
    )


def plan(agent, *turns, mocks=(), assertions=(), history=(), initial_state=None):
    return CasePlan(
        id=1,
        name="case",
        type="agent",
        entry_agent=agent,
        history=list(history),
        initial_state=initial_state or {},
        turns=[t if isinstance(t, TurnPlan) else TurnPlan(t) for t in turns],
        assertions=list(assertions),
        mocks=list(mocks),
    )


def replies(text):
    return AssertionPlan("outputContains", {"text": text})


def called(function):
    return AssertionPlan("toolCalled", {"function": function})


def suite_plan(**overrides):
    # A case's deadline far beyond what any case here needs on a loaded machine: a test of the deadline sets its own.
    values = {"extra_allowed": frozenset(), "force_blocked": frozenset(), "judge_model": "", "timeout_seconds": 600.0}
    values.update(overrides)
    return SuitePlan(**values)


EMAIL = {"to": "ana@example.com", "subject": "Cancelled", "body": "Your order is cancelled."}


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self):
        Recorder.seen.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server(settings):
    Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{server.server_port}"]
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_it_blocks_unmocked_side_effects_under_test_while_the_same_agent_sends_outside(
    agent, scripted_model, http_server
):
    email = Answer(tool_calls=[Call("util-email-handle_email_sender", EMAIL)])
    http = Answer(tool_calls=[Call("util-http-handle_http_request", {"method": "GET", "url": f"{http_server}/hook"})])
    scripted_model.play(email, http)
    execution = execute_case(
        plan=plan(agent, "cancel and tell me", "ping the hook", assertions=[called("util-email-handle_email_sender")]),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert mail.outbox == [] and Recorder.seen == []
    assert execution.status == "failed"
    assert "util-email-handle_email_sender" in execution.reason
    assert [(c["name"], c["outcome"]) for c in execution.tool_calls] == [
        ("util-email-handle_email_sender", "blocked"),
        ("util-http-handle_http_request", "blocked"),
    ]
    synthetic = [a for a in execution.assertions if a["synthetic"]]
    assert synthetic[0]["type"] == "noBlockedTools" and synthetic[0]["status"] == "failed"

    scripted_model.play(email, Answer("sent"), http, Answer("called"))
    conversation = conversation_start(agent=agent)
    agent.provider, agent.model = scripted_model.provider_name, scripted_model.model
    agent.save()
    conversation_send(conversation=conversation, text="cancel and tell me")
    conversation_send(conversation=conversation, text="ping the hook")
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["ana@example.com"]
    assert Recorder.seen == ["/hook"]


def test_it_stops_the_turn_at_a_blocked_call_with_the_blocked_marker(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call("util-email-handle_email_sender", EMAIL)]), Answer("never asked"))
    execution = execute_case(
        plan=plan(agent, "mail me", assertions=[called("util-email-handle_email_sender")]),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert len(scripted_model.requests) == 1
    assert execution.tool_calls[0]["result"] == f"{BLOCKED_PREFIX}util-email-handle_email_sender"


def test_it_allows_exactly_the_five_control_flow_functions():
    assert ALLOWED_FUNCTIONS == {
        "route_to_agent",
        "response_to_user",
        "human_intervention_needed",
        "util-routing-fallback_to_router",
        "util-instruct-execute_template",
    }
    session = CaseSession(mocks=[])
    for name in [
        "util-email-handle_email_sender",
        "util-http-handle_http_request",
        "util-db-sql_select",
        "util-twilio-text_message",
        "util-twilio-outbound_phone_call",
        "util-anything",
    ]:
        assert not session.is_allowed(name), name
    assert all(session.is_allowed(name) for name in ALLOWED_FUNCTIONS)


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ('{{ order|ljust:"3000000" }}', '|ljust:"3000000" asks for 3,000,000'),
        ("{% for a in long %}{% for b in long %}{{ a }}{{ b }}{% endfor %}{% endfor %}", "renders more than 100,000"),
        ("{% for a in long %}{% for b in long %}{% for c in long %}{% endfor %}{% endfor %}{% endfor %}",
         "takes more than 200,000 rendering steps"),
    ],
)
def test_it_answers_a_template_that_would_render_too_much_with_a_tool_error_and_goes_on(
    agent, scripted_model, template, words
):
    # util-instruct-execute_template runs for real under test: `ljust:"300000000"` once returned 300,000,000
    # characters (690 MB). The render stops before building the text; the model reads why and the case goes on.
    call = Call("util-instruct-execute_template", {"template": template, "variables": {"long": "x" * 1000}})
    scripted_model.play(Answer(tool_calls=[call]), Answer("done"))
    started = time.monotonic()
    execution = execute_case(
        plan=plan(agent, "x", assertions=[replies("done")], initial_state={"order": "1042"}),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    result = execution.tool_calls[0]["result"]
    assert execution.status == "passed", execution.reason
    assert words in result and len(result) < 1000, result[:300]
    # Rendering the template whole would take hours (10^10 characters): a loaded machine's seconds must not decide
    # the verdict (issue 40), so the bound only tells refused-early from rendered.
    assert time.monotonic() - started < 120
    assert scripted_model.requests[1].messages[-1]["content"] == result


def test_it_bounds_a_template_rendering_a_state_value_beyond_the_limit(agent, scripted_model):
    # The arguments a model sends are refused beyond 100,000 characters, but the state a template reads is not.
    call = Call("util-instruct-execute_template", {"template": "Notes: {{ notes }}"})
    scripted_model.play(Answer(tool_calls=[call]), Answer("done"))
    execution = execute_case(
        plan=plan(agent, "x", assertions=[replies("done")], initial_state={"notes": "n" * 100_001}),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    result = execution.tool_calls[0]["result"]
    assert "renders more than 100,000 characters" in result and len(result) < 1000


def test_it_lets_the_suite_allow_more_and_force_block_wins(agent, scripted_model):
    session = CaseSession(
        mocks=[MockSpec(TRACK_ORDER, "mocked")],
        extra_allowed=frozenset({TRACK_ORDER}),
        force_blocked=frozenset({TRACK_ORDER, "response_to_user"}),
    )
    assert not session.is_allowed(TRACK_ORDER) and not session.is_allowed("response_to_user")
    scripted_model.play(Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1"})]))
    execution = execute_case(
        plan=plan(agent, "x", assertions=[called(TRACK_ORDER)]),
        model=get_model(scripted_model.key),
        suite=suite_plan(force_blocked=frozenset({TRACK_ORDER})),
    )
    assert execution.tool_calls[0]["outcome"] == "blocked"


def test_it_runs_an_extra_allowed_function_for_real(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1041"})]), Answer("shipped"))
    execution = execute_case(
        plan=plan(
            agent, TurnPlan("where", [AssertionPlan("stateEquals", {"key": "order_status", "value": "shipped"})])
        ),
        model=get_model(scripted_model.key),
        suite=suite_plan(extra_allowed=frozenset({TRACK_ORDER})),
    )
    assert execution.status == "passed", execution.reason
    assert execution.tool_calls[0]["outcome"] == "allowed"


def test_it_chooses_mocks_by_arguments_then_call_index_then_unconditional(agent, scripted_model):
    mocks = [
        MockSpec(TRACK_ORDER, "fallback"),
        MockSpec(TRACK_ORDER, "second call", call_index=1),
        MockSpec(TRACK_ORDER, "order 7", arguments={"order_id": "7"}),
    ]
    calls = [
        Call(TRACK_ORDER, {"order_id": "1"}),
        Call(TRACK_ORDER, {"order_id": "2"}),
        Call(TRACK_ORDER, {"order_id": "7"}),
        Call(TRACK_ORDER, {"order_id": "3"}),
    ]
    scripted_model.play(Answer(tool_calls=calls), Answer("done"))
    execution = execute_case(
        plan=plan(agent, "x", mocks=mocks, assertions=[replies("done")]),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert [c["result"] for c in execution.tool_calls] == ["fallback", "second call", "order 7", "fallback"]
    assert [c["call_index"] for c in execution.tool_calls] == [0, 1, 2, 3]


def test_it_applies_mock_state_writes_and_stop_completions(agent, scripted_model):
    mocks = [MockSpec(TRACK_ORDER, '{"status": "lost"}', stop=True, state_writes={"order_status": "lost"})]
    scripted_model.play(Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1"})]))
    execution = execute_case(
        plan=plan(
            agent,
            TurnPlan(
                "x",
                [
                    AssertionPlan("outputContains", {"text": "lost"}),
                    AssertionPlan("stateEquals", {"key": "order_status", "value": "lost"}),
                ],
            ),
            mocks=mocks,
        ),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert execution.status == "passed", execution.reason


def test_it_holds_interception_when_the_conversation_runs_on_another_thread(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call("util-email-handle_email_sender", EMAIL)]), Answer("done"))
    conversation = conversation_start(agent=agent)
    agent.provider, agent.model = scripted_model.provider_name, scripted_model.model
    agent.save()
    session = CaseSession(mocks=[])
    registry.add(conversation.pk, session)
    outcome = {}

    def other_thread():
        from django.db import connection

        try:
            outcome["turn"] = conversation_send(conversation=conversation, text="mail")
        finally:
            connection.close()

    try:
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join(20)
    finally:
        registry.remove(conversation.pk)
    assert mail.outbox == []
    assert outcome["turn"].tool_calls[0].outcome == "blocked"


def test_it_errors_when_the_canary_is_dead(agent, scripted_model):
    unregister_executor_provider(mock_provider)
    try:
        execution = execute_case(
            plan=plan(agent, "x", assertions=[replies("x")]), model=get_model(scripted_model.key), suite=suite_plan()
        )
    finally:
        register_executor_provider(mock_provider)
    assert mock_provider in executor_providers()
    assert execution.status == "error"
    assert execution.reason.startswith("the mock seam is not live: ")
    assert "Can't find function implementation" in execution.reason
    assert scripted_model.requests == []


def test_it_errors_on_a_case_with_no_turns(agent, scripted_model):
    execution = execute_case(plan=plan(agent), model=get_model(scripted_model.key), suite=suite_plan())
    assert (execution.status, execution.reason) == ("error", "the case has no turns, so it would verify nothing")


def test_it_errors_on_a_case_with_turns_but_no_assertions_without_asking_the_model(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call("util-email-handle_email_sender", EMAIL)]), Answer("sent"))
    execution = execute_case(
        plan=plan(agent, "mail me", "and again", mocks=[MockSpec("util-email-handle_email_sender", "ok")]),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert (execution.status, execution.reason) == ("error", "the case has no assertions, so it verifies nothing")
    assert scripted_model.requests == [] and execution.conversation_id is None


def test_it_errors_when_the_case_times_out_and_refuses_the_late_call_without_running_it(agent, scripted_model):
    def slow_model(request):
        if len(request.messages) == 2:
            # Answers after the timeout, however long the case took to reach its first call.
            time.sleep(max(0.0, request.deadline + 0.3 - time.monotonic()))
            return Answer(tool_calls=[Call("util-email-handle_email_sender", EMAIL)])
        return Answer("late")

    scripted_model.respond_with(slow_model)
    execution = execute_case(
        plan=plan(agent, "x", "y", assertions=[replies("late")]),
        model=get_model(scripted_model.key),
        suite=suite_plan(timeout_seconds=2.0),
    )
    assert (execution.status, execution.reason) == ("error", "the case timed out after 2 s")
    # The call in flight was waited for (it is paid for), and the case thread has ended with it.
    assert execution.conversation_id not in _registered_ids()
    assert len(scripted_model.requests) == 1, "no model call started after the timeout"
    late = Message.objects.get(conversation_id=execution.conversation_id, role="tool_result")
    assert (late.function_name, late.outcome) == ("util-email-handle_email_sender", "blocked")
    assert "the case timed out" in late.content
    assert [(c["name"], c["outcome"]) for c in execution.tool_calls] == [("util-email-handle_email_sender", "blocked")]
    assert mail.outbox == [], "the late email call stayed blocked"


def _registered_ids():
    return set(registry._sessions)


def test_it_errors_when_the_model_fails(agent, scripted_model):
    scripted_model.play(Fail(code="http_500", message="too many requests"))
    execution = execute_case(
        plan=plan(agent, "x", assertions=[replies("x")]), model=get_model(scripted_model.key), suite=suite_plan()
    )
    assert execution.status == "error"
    assert execution.reason.startswith("the model call failed at turn 0:") and "too many requests" in execution.reason


def test_it_errors_when_a_turn_hits_the_step_limit(agent, scripted_model, settings):
    settings.AGENTTEST_MAX_STEPS = 2
    scripted_model.play(*[Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1"})]) for _ in range(3)])
    execution = execute_case(
        plan=plan(agent, "x", mocks=[MockSpec(TRACK_ORDER, "{}")], assertions=[called(TRACK_ORDER)]),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert execution.status == "error" and "within 2 model steps" in execution.reason


@pytest.mark.parametrize(
    "judge_answer,reason",
    [
        (None, "no judge model is configured"),
        (Answer("I think it is fine."), "no JSON object"),
        (Answer('{"score": 9, "reason": "x"}'), "outside 1–5"),
        (Answer('{"score": "high"}'), "whole number"),
        (Answer("{score: 5"), "no JSON object"),
        (Fail(code="http_500", message="judge down"), "the judge model failed"),
    ],
)
def test_it_reports_every_judge_failure_as_error(agent, scripted_model, judge_answer, reason):
    entries = [Answer("Your order is on its way.")]
    if judge_answer is not None:
        entries.append(judge_answer)
    scripted_model.play(*entries)
    execution = execute_case(
        plan=plan(agent, TurnPlan("x", [AssertionPlan("llmJudge", {"criterion": "polite"})])),
        model=get_model(scripted_model.key),
        suite=suite_plan(judge_model=scripted_model.key if judge_answer is not None else ""),
    )
    assert execution.status == "error", execution.reason
    assert reason in execution.reason


@pytest.mark.parametrize("score,status", [(4, "passed"), (2, "failed")])
def test_it_scores_with_the_judge_seeing_only_criterion_and_reply(agent, scripted_model, score, status):
    scripted_model.play(Answer("Your order is on its way."), Answer(json.dumps({"score": score, "reason": "ok"})))
    execution = execute_case(
        plan=plan(
            agent,
            TurnPlan("secret question", [AssertionPlan("llmJudge", {"criterion": "polite"})]),
            initial_state={"secret": "s3cr3t"},
        ),
        model=get_model(scripted_model.key),
        suite=suite_plan(judge_model=scripted_model.key),
    )
    assert execution.status == status
    judge_request = scripted_model.requests[-1]
    text = json.dumps(judge_request.messages)
    assert "polite" in text and "Your order is on its way." in text
    assert "secret question" not in text and "s3cr3t" not in text and judge_request.tools == []


def test_it_errors_rather_than_fails_on_a_regex_that_does_not_compile(agent, scripted_model):
    # A pattern stored before patterns were checked at save: the agent did nothing wrong, the harness cannot judge.
    scripted_model.play(Answer("hello"))
    execution = execute_case(
        plan=plan(agent, TurnPlan("x", [AssertionPlan("outputRegex", {"pattern": "(unclosed"})])),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert execution.status == "error" and "does not compile" in execution.reason


def test_it_errors_rather_than_fails_when_a_regex_times_out_on_the_reply(agent, scripted_model):
    # (a|aa)+$ backtracks exponentially on a run of a's that does not end the reply; it is refused at save today,
    # but a case stored before that still runs. The agent did not regress: whether the reply matches is unknown.
    scripted_model.play(Answer("a" * 60 + "!"))
    execution = execute_case(
        plan=plan(agent, TurnPlan("x", [AssertionPlan("outputRegex", {"pattern": "(a|aa)+$"})])),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert execution.status == "error", execution.reason
    # The regex's own limit ended it (the search alone would take centuries), not the case's deadline.
    assert "could not tell whether the reply matches: the regex took longer than 1 s" in execution.reason


def test_it_skips_remaining_turns_after_a_fatal_failure(agent, scripted_model):
    scripted_model.play(Answer("no"), Answer("never"))
    execution = execute_case(
        plan=plan(agent, TurnPlan("a", [AssertionPlan("outputContains", {"text": "yes"}, fatal=True)]), "b"),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert execution.status == "failed" and "1 turn(s) skipped" in execution.reason
    assert len(scripted_model.requests) == 1


def test_it_evaluates_case_level_assertions_over_the_whole_conversation(agent, scripted_model):
    scripted_model.play(Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "5"})]), Answer("first"), Answer("second"))
    mocks = [MockSpec(TRACK_ORDER, "{}", state_writes={"order_status": "shipped"})]
    assertions = [
        AssertionPlan("outputContains", {"text": "first"}),
        AssertionPlan("outputContains", {"text": "second"}),
        AssertionPlan("toolCalled", {"function": TRACK_ORDER.upper(), "arguments": {"order_id": "5"}}),
        AssertionPlan("toolNotCalled", {"function": VOID_ORDER}),
        AssertionPlan("stateEquals", {"key": "order_status", "value": "shipped"}),
        AssertionPlan("stateEquals", {"key": "refund", "value": "full"}),
    ]
    execution = execute_case(
        plan=plan(agent, "a", "b", mocks=mocks, assertions=assertions),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert [a["status"] for a in execution.assertions] == ["passed"] * 5 + ["failed"]
    assert execution.assertions[-1]["message"] == "state 'refund' is not set"
    assert execution.status == "failed"


def test_it_runs_on_the_model_under_test_through_the_agent_load_hook(agent, scripted_model):
    scripted_model.play(Answer("hi"))
    execution = execute_case(
        plan=plan(agent, "x", assertions=[replies("hi")]), model=get_model(scripted_model.key), suite=suite_plan()
    )
    assert execution.status == "passed", execution.reason
    assert [r.model for r in scripted_model.requests] == ["scripted"]
    agent.refresh_from_db()
    assert agent.model_key == "scripted:own"


def test_it_keeps_the_verdict_of_a_case_whose_conversation_was_deleted_while_it_ran(agent, scripted_model):
    from agenthost.models import Conversation

    def respond(request):
        Conversation.objects.filter(pk=request.metadata["conversation_id"]).delete()
        return Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1042"})]) if len(request.messages) == 2 else (
            Answer("It has shipped.")
        )

    scripted_model.respond_with(respond)
    execution = execute_case(
        plan=plan(
            agent, "Where is order 1042?", assertions=[called(TRACK_ORDER)],
            mocks=[MockSpec(TRACK_ORDER, '{"status": "shipped"}')],
        ),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )

    assert (execution.status, execution.conversation_id) == ("passed", None), execution.reason
    assert execution.reason == (
        "its test conversation was deleted while the case ran; the transcript is kept in this result"
    )
