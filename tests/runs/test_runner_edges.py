"""The case runner at the edges of the safety promise: functions the agent does not declare, side-effecting functions a
suite tries to allow, the canary's name, a sealed conversation after its case, a timed-out case that must stop
talking to the model, and the judge's spend."""

from __future__ import annotations

import http.server
import json
import threading
import time
from decimal import Decimal

import pytest
from django.core import mail
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agenthost.executor import execute
from agenthost.functions import register_function, registered_functions
from agenthost.llm.scripted import Answer, Call
from agenthost.loading import unregister_agent_load_hook
from agenthost.models import Agent, Conversation, Message
from agenthost.seams import (
    CONTROL_FLOW_FUNCTIONS,
    FunctionContext,
    Usage,
    get_function,
    get_model,
    register_agent_load_hook,
)
from agenthost.services import conversation_invoke_function, conversation_send, conversation_start
from agenthost.testing.openai_stub import echo_reply
from agenthost.turns import ConversationSealed
from runs.engine.case_runner import CaseWorker, execute_case
from runs.engine.case_session import CaseSession, MockSpec, registry
from runs.engine.mocking import BLOCKED_PREFIX, CANARY_FUNCTION, HAS_OUTSIDE_EFFECTS, apply_model_override
from runs.engine.plans import AssertionPlan, CasePlan, SuitePlan, TurnPlan
from runs.tapes.replay import Recorder, Replayer
from tests.order_tools import TRACK_ORDER, VOID_ORDER
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.runs.test_key_free import openai_provider

pytestmark = pytest.mark.django_db(transaction=True)

EMAIL = {"to": "ana@example.com", "subject": "Cancelled", "body": "Your order is cancelled."}
SMS = {"to": "+15550100", "body": "Your order is cancelled."}
EFFECTS = (
    "util-email-handle_email_sender",
    "util-http-handle_http_request",
    "util-db-sql_select",
    "util-twilio-text_message",
    "util-twilio-outbound_phone_call",
)
OWN_MODEL = "own:gpt-4o-mini"
_unsaid_calls: list[str] = []


@register_function(name="test-edges-unsaid_effects", description="A plugin tool that does not say.")
def _unsaid_effects(context: FunctionContext) -> str:
    _unsaid_calls.append(context.name)
    return "ran"


def make_agent(name="desk", functions=(TRACK_ORDER,), rules=()):
    # Its own model (OWN_MODEL) is never the model under test, which a case runs on.
    provider, model = OWN_MODEL.split(":")
    return Agent.objects.create(
        name=name,
        instruction="Help.",
        provider=provider,
        model=model,
        functions=[f if isinstance(f, dict) else {"name": f} for f in functions],
        rules=list(rules),
    )


def plan(agent, *turns, mocks=(), assertions=None, name="case"):
    return CasePlan(
        id=1,
        name=name,
        type="agent",
        entry_agent=agent,
        history=[],
        initial_state={},
        turns=[t if isinstance(t, TurnPlan) else TurnPlan(t) for t in turns],
        assertions=list(assertions if assertions is not None else [AssertionPlan("outputNotContains", {"text": "?"})]),
        mocks=list(mocks),
    )


def suite_plan(**overrides):
    # A case's deadline far beyond what any case here needs on a loaded machine: a test of the deadline sets its own.
    values = {"extra_allowed": frozenset(), "force_blocked": frozenset(), "judge_model": "", "timeout_seconds": 600.0}
    values.update(overrides)
    return SuitePlan(**values)


def calls(execution):
    return [(c["name"], c["outcome"]) for c in execution.tool_calls]


class Listener(http.server.BaseHTTPRequestHandler):
    """Stands in for Twilio and any HTTP endpoint: counts what reached it."""

    seen: list[str] = []

    def do_POST(self):
        Listener.seen.append(self.path)
        body = b'{"sid": "SM1", "status": "queued"}'
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args):
        pass


@pytest.fixture
def listener(settings):
    Listener.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{server.server_port}"]
    settings.AGENTTEST_TWILIO_API_BASE = base
    settings.AGENTTEST_TWILIO_ACCOUNT_SID = "AC123"
    settings.AGENTTEST_TWILIO_AUTH_TOKEN = "token"
    settings.AGENTTEST_TWILIO_FROM = "+15550199"
    yield base
    server.shutdown()


# --- Item 1: a function the agent does not declare ---------------------------------------------------------------


def test_it_shows_and_fails_a_call_of_a_function_the_agent_does_not_declare(scripted_model):
    agent = make_agent(functions=(TRACK_ORDER,))
    scripted_model.play(
        Answer(
            tool_calls=[
                Call(TRACK_ORDER, {"order_id": "1"}),
                Call("util-email-handle_email_sender", EMAIL),
                Call(TRACK_ORDER, {"order_id": "2"}),
            ]
        ),
        Answer("done"),
    )
    execution = execute_case(
        plan=plan(agent, "cancel and mail me", mocks=[MockSpec(TRACK_ORDER, "{}")]),
        model=get_model(scripted_model.key),
        suite=suite_plan(),
    )
    assert mail.outbox == []
    assert calls(execution) == [
        (TRACK_ORDER, "mocked"),
        ("util-email-handle_email_sender", "unavailable"),
        (TRACK_ORDER, "mocked"),
    ]
    assert execution.status == "failed"
    assert "util-email-handle_email_sender was called, but the agent does not declare it" in execution.reason
    synthetic = [a for a in execution.assertions if a["synthetic"]]
    assert [(a["type"], a["status"]) for a in synthetic] == [("noBlockedTools", "failed")]


def test_it_shows_a_rule_naming_a_function_the_agent_does_not_declare(scripted_model):
    agent = make_agent(rules=[{"trigger": "conversation_started", "function": "util-email-handle_email_sender",
                               "arguments": EMAIL}])
    scripted_model.play(Answer("hello"))
    execution = execute_case(plan=plan(agent, "hi"), model=get_model(scripted_model.key), suite=suite_plan())
    assert mail.outbox == []
    assert [(c["name"], c["outcome"], c["trigger"], c["turn"]) for c in execution.tool_calls] == [
        ("util-email-handle_email_sender", "unavailable", "rule", -1)
    ]
    assert execution.status == "failed" and "the agent does not declare it" in execution.reason


# --- Item 2: extra-allowed functions run only when free of outside effects -----------------------------------------


def test_it_blocks_an_extra_allowed_side_effecting_function_and_says_to_mock_it(scripted_model, listener):
    agent = make_agent(functions=("util-email-handle_email_sender", "util-twilio-text_message"))
    scripted_model.play(
        Answer(tool_calls=[Call("util-email-handle_email_sender", EMAIL)]),
        Answer(tool_calls=[Call("util-twilio-text_message", SMS)]),
    )
    execution = execute_case(
        plan=plan(agent, "mail me", "text me"),
        model=get_model(scripted_model.key),
        suite=suite_plan(extra_allowed=frozenset({"util-email-handle_email_sender", "util-twilio-text_message"})),
    )
    assert mail.outbox == [] and Listener.seen == []
    assert calls(execution) == [("util-email-handle_email_sender", "blocked"), ("util-twilio-text_message", "blocked")]
    assert execution.tool_calls[0]["result"] == f"{BLOCKED_PREFIX}util-email-handle_email_sender{HAS_OUTSIDE_EFFECTS}"
    assert "must mock it" in execution.tool_calls[1]["result"]
    assert execution.status == "failed"


def test_it_runs_extra_allowed_functions_declared_free_of_outside_effects_only(scripted_model):
    static = {"name": "store_hours", "output": {"open": "9-17"}}
    agent = make_agent(functions=(TRACK_ORDER, static, "test-edges-unsaid_effects"))
    scripted_model.play(
        Answer(
            tool_calls=[
                Call(TRACK_ORDER, {"order_id": "1041"}),
                Call("store_hours"),
                Call("test-edges-unsaid_effects"),
            ]
        )
    )
    _unsaid_calls.clear()
    execution = execute_case(
        plan=plan(agent, "where and when"),
        model=get_model(scripted_model.key),
        suite=suite_plan(extra_allowed=frozenset({TRACK_ORDER, "store_hours", "test-edges-unsaid_effects"})),
    )
    assert calls(execution) == [
        (TRACK_ORDER, "allowed"),
        ("store_hours", "allowed"),
        ("test-edges-unsaid_effects", "blocked"),
    ]
    assert execution.tool_calls[1]["result"] == '{"open": "9-17"}'
    assert _unsaid_calls == [], "a function that does not say counts as side-effecting"


# --- Item 5 at run time: force-block entries as typed in legacy rows -------------------------------------------------


@pytest.mark.parametrize(
    "entry", [" human_intervention_needed", "human_intervention_needed\t", "HUMAN_Intervention_needed"]
)
def test_it_force_blocks_an_entry_stored_with_stray_space_or_case(scripted_model, entry):
    agent = make_agent()
    scripted_model.play(Answer(tool_calls=[Call("human_intervention_needed", {"reason": "angry"})]))
    execution = execute_case(
        plan=plan(agent, "get me a human"),
        model=get_model(scripted_model.key),
        suite=suite_plan(force_blocked=frozenset({entry})),
    )
    assert calls(execution) == [("human_intervention_needed", "blocked")]
    assert "human_intervention_needed" not in execution.final_state


# --- Item 4: the canary ------------------------------------------------------------------------------------------


def test_it_blocks_and_shows_the_canary_when_the_model_calls_it_even_if_the_agent_declares_it(scripted_model):
    agent = make_agent(functions=(TRACK_ORDER, CANARY_FUNCTION))
    scripted_model.play(Answer(tool_calls=[Call(CANARY_FUNCTION)]), Answer("never asked"))
    execution = execute_case(
        plan=plan(agent, "what is your token?", mocks=[MockSpec(CANARY_FUNCTION, "a mock may not answer it")]),
        model=get_model(scripted_model.key),
        suite=suite_plan(extra_allowed=frozenset({CANARY_FUNCTION})),
    )
    assert calls(execution) == [(CANARY_FUNCTION, "blocked")]
    assert execution.tool_calls[0]["result"] == f"{BLOCKED_PREFIX}{CANARY_FUNCTION}"
    result = Message.objects.get(conversation_id=execution.conversation_id, role="tool_result")
    assert result.content == f"{BLOCKED_PREFIX}{CANARY_FUNCTION}"
    assert execution.status == "failed" and CANARY_FUNCTION in execution.reason


def test_it_blocks_and_shows_the_canary_when_a_rule_calls_it(scripted_model):
    agent = make_agent(
        functions=(TRACK_ORDER, CANARY_FUNCTION),
        rules=[{"trigger": "conversation_started", "function": CANARY_FUNCTION}],
    )
    scripted_model.play(Answer("hello"))
    execution = execute_case(plan=plan(agent, "hi"), model=get_model(scripted_model.key), suite=suite_plan())
    assert execution.status == "failed", execution.reason
    assert [(c["name"], c["outcome"], c["trigger"]) for c in execution.tool_calls] == [
        (CANARY_FUNCTION, "blocked", "rule")
    ]
    rule_result = Message.objects.get(conversation_id=execution.conversation_id, role="tool_result")
    assert rule_result.content == f"{BLOCKED_PREFIX}{CANARY_FUNCTION}"


def test_it_answers_the_canary_once_per_session_and_not_at_all_outside_a_test():
    agent = make_agent()
    assert get_function(CANARY_FUNCTION) is None
    outside = conversation_start(agent=agent)
    answer = conversation_invoke_function(conversation=outside, name=CANARY_FUNCTION, record=False)
    assert answer.content == f"Can't find function implementation of {CANARY_FUNCTION}"

    conversation = conversation_start(agent=agent)
    session = CaseSession(mocks=[])
    registry.add(conversation.pk, session)
    try:
        first = conversation_invoke_function(conversation=conversation, name=CANARY_FUNCTION, record=False)
        second = conversation_invoke_function(conversation=conversation, name=CANARY_FUNCTION, record=False)
    finally:
        registry.remove(conversation.pk)
    assert first.content == session.canary_token
    assert second.content == f"{BLOCKED_PREFIX}{CANARY_FUNCTION}" and second.outcome == "blocked"


# --- The seam, for any name and any suite settings ---------------------------------------------------------------

_look_alikes = st.sampled_from([*EFFECTS, *CONTROL_FLOW_FUNCTIONS, CANARY_FUNCTION, TRACK_ORDER, VOID_ORDER,
                                "test-edges-unsaid_effects", "util-anything"])
names = st.one_of(
    _look_alikes,
    st.tuples(_look_alikes, st.sampled_from(["", " ", "\t", "\n"]), st.booleans()).map(
        lambda t: (t[0].upper() if t[2] else t[0]) + t[1]
    ),
    st.text(min_size=1, max_size=20),
)


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(
    name=names,
    trigger=st.sampled_from(["model", "rule", "direct"]),
    extra_allowed=st.frozensets(names, max_size=6),
    force_blocked=st.frozensets(names, max_size=3),
)
def test_it_never_lets_a_side_effecting_function_or_the_canary_token_through_the_seam(
    name, trigger, extra_allowed, force_blocked
):
    session = CaseSession(mocks=[], extra_allowed=extra_allowed, force_blocked=force_blocked)
    session.take_canary("direct")  # the harness's own check has happened, as before every turn
    conversation_id = -1_000_000
    registry.add(conversation_id, session)
    mail.outbox = []
    _unsaid_calls.clear()
    arguments = EMAIL if name == "util-email-handle_email_sender" else {}
    context = FunctionContext(name=name, arguments=arguments, conversation_id=conversation_id, trigger=trigger)
    try:
        result = execute(name, context)
    finally:
        registry.remove(conversation_id)
    assert result.content != session.canary_token
    assert mail.outbox == [] and _unsaid_calls == []
    registered = registered_functions().get(name)
    if not name.strip():
        # Rejected by the factory before any provider is asked.
        assert result.outcome == "invalid"
    elif result.outcome == "allowed":
        assert name in CONTROL_FLOW_FUNCTIONS or (registered is not None and registered.effect_free)
        assert not session.is_force_blocked(name)
    else:
        assert result.outcome == "blocked" and result.stop


# --- Item 3 (runner side): the conversation is sealed to its case -----------------------------------------------


@pytest.mark.parametrize(
    "run_id,reason",
    [(7, "this conversation belongs to test run 7"), (None, "this conversation belongs to an agenttest case")],
)
def test_it_seals_the_test_conversation_so_nothing_can_be_sent_after_its_case(scripted_model, run_id, reason):
    agent = make_agent(functions=("util-email-handle_email_sender",))
    scripted_model.play(Answer("hello"), Answer(tool_calls=[Call("util-email-handle_email_sender", EMAIL)]))
    execution = execute_case(
        plan=plan(agent, "hi", mocks=[MockSpec("util-email-handle_email_sender", "sent")]),
        model=get_model(scripted_model.key),
        suite=suite_plan(run_id=run_id),
    )
    assert execution.status == "passed", execution.reason
    conversation = Conversation.objects.get(pk=execution.conversation_id)
    with pytest.raises(ConversationSealed, match=reason):
        conversation_send(conversation=conversation, text="now mail me")
    with pytest.raises(ConversationSealed, match=reason):
        conversation_invoke_function(conversation=conversation, name="util-email-handle_email_sender", arguments=EMAIL)
    assert len(scripted_model.requests) == 1 and mail.outbox == []
    assert Message.objects.filter(conversation=conversation).count() == 2


# --- Item 9: after a timeout nothing of the case starts; what was in flight is counted ----------------------------

# The timed-out case's timeout: long enough for its first turn and the start of its second on a slow machine (3 s
# was not: a plain CI run's recording case timed out in its first turn, and the test saw no call in flight).
EDGE_TIMEOUT = 10.0
PER_CALL = Usage(input_tokens=100, output_tokens=10)


@pytest.mark.parametrize("mode", ["live", "record"])
def test_it_stops_a_timed_out_case_talking_to_the_model_and_counts_the_call_in_flight(scripted_model, mode):
    slow, quick = make_agent(name="slow"), make_agent(name="quick")
    seen: list[tuple[float, str, int, int]] = []
    deadlines: list[float] = []

    def model(request):
        meta = request.metadata
        seen.append((time.monotonic(), meta["agent"], meta["turn"], meta["step"]))
        if meta["agent"] == "quick":
            return Answer("second case", usage=PER_CALL)
        deadlines.append(request.deadline)
        if meta["turn"] == 1 and meta["step"] == 0:
            # In flight when the timeout strikes, however long the case took to get here; back within the grace.
            time.sleep(max(0.0, request.deadline + 0.3 - time.monotonic()))
            return Answer(tool_calls=[Call(TRACK_ORDER, {"order_id": "1"})], usage=PER_CALL)
        return Answer(f"turn {meta['turn']}", usage=PER_CALL)

    scripted_model.respond_with(model)
    config = get_model(scripted_model.key)
    worker = CaseWorker()

    def tape(name):
        return Recorder(case_name=name, model_key=config.key) if mode == "record" else None

    mocks = [MockSpec(TRACK_ORDER, "{}", state_writes={"looked_up": True})]
    try:
        first = execute_case(
            plan=plan(slow, "a", "b", "c", mocks=mocks, name="slow"),
            model=config,
            suite=suite_plan(timeout_seconds=EDGE_TIMEOUT),
            tape=tape("slow"),
            worker=worker,
        )
        ended = time.monotonic()
        second = execute_case(
            plan=plan(quick, "d", name="quick"), model=config, suite=suite_plan(), tape=tape("quick"), worker=worker
        )
        # Long enough for the rest of the timed-out case to have reached the model, had it gone on.
        time.sleep(max(0.0, ended + 2.0 - time.monotonic()))
    finally:
        worker.close()
    slow_calls = [(turn, step) for at, agent, turn, step in seen if agent == "slow"]
    assert slow_calls == [(0, 0), (1, 0)], "no model call of the timed-out case started after the timeout"
    assert len(set(deadlines)) == 1 and all(at < deadlines[0] for at, agent, *_ in seen if agent == "slow")
    assert (first.status, first.reason) == ("error", f"the case timed out after {EDGE_TIMEOUT:g} s")
    assert first.usage == Usage(200, 20), "the call in flight at the timeout is counted"
    assert first.cost == Decimal(str(round(config.cost(Usage(200, 20)), 8)))
    # Its answer's tool call came after the timeout: refused, and its mocked state write never happened.
    assert [(c["name"], c["outcome"]) for c in first.tool_calls] == [(TRACK_ORDER, "blocked")]
    assert "the case timed out" in first.tool_calls[0]["result"]
    assert not Message.objects.filter(conversation_id=first.conversation_id, role="user", turn=2).exists()
    assert second.status == "passed", second.reason
    assert second.usage == PER_CALL


# --- Item 10: the judge's spend ----------------------------------------------------------------------------------


def test_it_counts_the_judges_usage_and_cost_apart_from_the_model_under_test(scripted_model):
    agent = make_agent()
    judged = Usage(input_tokens=1500, output_tokens=500)
    scripted_model.play(
        Answer("Your order ships today.", usage=Usage(50, 5)),
        Answer(json.dumps({"score": 5, "reason": "polite"}), usage=judged),
    )
    config = get_model(scripted_model.key)
    case = plan(agent, TurnPlan("when?", [AssertionPlan("llmJudge", {"criterion": "polite"})]), assertions=[])
    recorder = Recorder(case_name="case", model_key=config.key)

    execution = execute_case(plan=case, model=config, suite=suite_plan(judge_model=config.key), tape=recorder)

    assert execution.status == "passed", execution.reason
    assert execution.judge_usage.total_tokens == 2000
    assert execution.judge_usage == judged and execution.usage == Usage(50, 5)
    assert execution.judge_cost == Decimal(str(round(config.cost(judged), 8))) > 0
    assert execution.cost == Decimal(str(round(config.cost(Usage(50, 5)), 8)))

    replayed = execute_case(
        plan=case,
        model=config,
        suite=suite_plan(judge_model=config.key),
        tape=Replayer(case_name="case", model_key=config.key, entries=recorder.entries()),
    )
    assert replayed.status == "passed", replayed.reason
    assert replayed.judge_usage == judged, "a replay shows the tokens it replays"
    assert (replayed.judge_cost, replayed.cost) == (0, 0), "and spends nothing"


# --- Usage is counted through the harness's provider, so the model override must be live -------------------------


def test_it_errors_when_the_model_override_is_not_live(scripted_model, openai_stub, settings):
    # The agent's own model answers, locally: without the override the turn runs on it.
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "own": openai_provider(openai_stub.base_url, "")}
    openai_stub.respond_with(echo_reply)
    agent = make_agent()
    unregister_agent_load_hook(apply_model_override)
    try:
        execution = execute_case(
            plan=plan(agent, "where is my order?", mocks=[MockSpec(TRACK_ORDER, "{}")]),
            model=get_model(scripted_model.key),
            suite=suite_plan(),
        )
    finally:
        register_agent_load_hook(apply_model_override)
    assert execution.status == "error"
    assert execution.reason == (
        f"the model override is not live: turn 0 ran on {OWN_MODEL} instead of the model under test"
    )
    assert scripted_model.requests == []
