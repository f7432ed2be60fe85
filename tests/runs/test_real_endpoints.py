"""Real model endpoints through whole cases, against the realistic stub: an ordinary and a reasoning model side by
side, structured output for the judge, usage details and their prices, every odd answer an endpoint gives, rate
limits — each ends in a result that says what happened."""

from __future__ import annotations

import io
import socket
from decimal import Decimal

import pytest
from django.core.management import call_command

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message
from agenthost.testing.openai_stub import REASONING_TOKENS, HttpError, OpenAIStub, RawCompletion, rate_limited
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.engine.numbers import format_cost
from runs.models import CaseResult, Run
from runs.selectors import run_summary
from runs.services import run_create
from runs.tasks import run_execute
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

ORDINARY = "stub:gpt-4o-mini"
REASONING = "stub:gpt-5-mini"
PRICES = {
    "gpt-4o-mini": {"input_price": 0.15, "cached_input_price": 0.075, "output_price": 0.6},
    "gpt-5-mini": {"input_price": 0.25, "cached_input_price": 0.025, "output_price": 2.0, "reasoning_price": 2.0},
}
LOOKUP = {
    "name": "find_order",
    "description": "Find an order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
}


def stub_models(**options: dict) -> list[dict]:
    models = [
        {"name": "gpt-4o-mini", **PRICES["gpt-4o-mini"]},
        {"name": "gpt-5-mini", **PRICES["gpt-5-mini"], "accepts_temperature": False, "reasoning_effort": "low"},
    ]
    for model in models:
        model.update(options.get(model["name"], {}))
    return models


def configure(settings, stub: OpenAIStub, *, max_retries: int = 0, **options: dict) -> None:
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "stub": {
            "kind": "openai", "base_url": stub.base_url, "api_key_env": "", "timeout": WAIT_SECONDS,
            "max_retries": max_retries, "models": stub_models(**options),
        },
    }


def desk_answer(body: dict) -> Answer | str:
    """An order desk that looks the order up, then reports it; a judge that scores it."""
    if body.get("response_format"):
        return Answer('{"score": 5, "reason": "it reports the order"}')
    last = body["messages"][-1]
    if last["role"] == "tool":
        return "Order 1043 is still processing."
    return Answer(tool_calls=[Call("find_order", {"order_id": "1043"})])


@pytest.fixture
def stub(settings):
    with OpenAIStub(models=("gpt-4o-mini", "gpt-5-mini")) as running:
        configure(settings, running)
        running.respond_with(desk_answer)
        yield running


def make_suite(*, cases: int = 1, judge: str = "", max_steps: int | None = None, timeout: int = 20) -> Suite:
    agent = Agent.objects.create(
        name="desk", instruction="You run the order desk.", provider="stub", model="gpt-4o-mini",
        functions=[LOOKUP, {"name": "void_order", "description": "Cancel an order."}], max_steps=max_steps,
    )
    suite = Suite.objects.create(name="desk", agent=agent, judge_model=judge, case_timeout_seconds=timeout)
    for number in range(cases):
        case = Case.objects.create(suite=suite, name=f"looks order 1043 up ({number})")
        Turn.objects.create(case=case, position=0, user_message="Where is order 1043?")
        Mock.objects.create(case=case, position=0, function_name="find_order", result='{"status": "processing"}')
        Mock.objects.create(case=case, position=1, function_name="void_order", result='{"cancelled": true}')
        Assertion.objects.create(case=case, position=0, type="toolCalled", params={"function": "find_order"})
        Assertion.objects.create(case=case, position=1, type="outputContains", params={"text": "processing"})
        if judge:
            Assertion.objects.create(
                case=case, position=2, type="llmJudge", params={"criterion": "Reports the order.", "min_score": 4}
            )
    return suite


def execute(suite: Suite, models: tuple[str, ...] = (ORDINARY,), mode: str = Run.Mode.LIVE) -> Run:
    return run_execute(run_id=run_create(suite=suite, model_keys=list(models), mode=mode).pk)


def only_result(run: Run) -> CaseResult:
    (result,) = CaseResult.objects.filter(run=run)
    return result


def reasoning_requests(stub: OpenAIStub) -> list[dict]:
    return [body for body in stub.requests if body["model"] == "gpt-5-mini"]


# --- Reasoning models, structured output, usage details ------------------------------------------------------------


def test_it_passes_a_run_on_an_ordinary_and_a_reasoning_model_with_the_judge_on_the_reasoning_one(stub):
    suite = make_suite(cases=2, judge=REASONING)

    run = execute(suite, (ORDINARY, REASONING))

    results = list(CaseResult.objects.filter(run=run).order_by("position"))
    assert [(r.model, r.status) for r in results] == [
        (ORDINARY, "passed"), (REASONING, "passed"), (ORDINARY, "passed"), (REASONING, "passed")
    ], [r.reason for r in results]
    assert run.status == Run.Status.PASSED
    sent_to_reasoning = reasoning_requests(stub)
    assert sent_to_reasoning and all("temperature" not in body for body in sent_to_reasoning)
    assert all(body["reasoning_effort"] == "low" for body in sent_to_reasoning)
    assert all(body["temperature"] == 0.0 for body in stub.requests if body["model"] == "gpt-4o-mini")
    judged = [body for body in sent_to_reasoning if body.get("response_format")]
    assert len(judged) == 4, "every result's judge call went to the reasoning model"
    schema = judged[0]["response_format"]
    assert schema["type"] == "json_schema" and schema["json_schema"]["name"] == "judge_verdict"
    assert schema["json_schema"]["strict"] is True
    assert {"score", "reason"} <= set(schema["json_schema"]["schema"]["properties"])
    assert all(a["status"] == "passed" for r in results for a in r.assertions if a["type"] == "llmJudge")


def test_it_records_cached_and_reasoning_tokens_and_prices_them_in_the_summary(stub, member_client):
    run = execute(make_suite(cases=2), (ORDINARY, REASONING))

    summaries = {summary.model: summary for summary in run_summary(run=run)}
    for key, summary in summaries.items():
        prices = PRICES[key.partition(":")[2]]
        results = CaseResult.objects.filter(run=run, model=key)
        expected = sum(
            (
                Decimal(r.input_tokens - r.cached_input_tokens) * Decimal(str(prices["input_price"]))
                + Decimal(r.cached_input_tokens) * Decimal(str(prices["cached_input_price"]))
                + Decimal(r.output_tokens - r.reasoning_tokens) * Decimal(str(prices["output_price"]))
                + Decimal(r.reasoning_tokens) * Decimal(str(prices.get("reasoning_price", prices["output_price"])))
            )
            / 1_000_000
            for r in results
        )
        assert summary.cost == pytest.approx(expected, abs=Decimal("1e-8"))
        # The second step of each case resends the first one's prompt: the endpoint serves it from its cache.
        assert summary.cached_input_tokens > 0
        assert summary.cached_input_tokens == sum(r.cached_input_tokens for r in results)
    assert summaries[REASONING].reasoning_tokens == 2 * 2 * REASONING_TOKENS, "two cases × two model steps"
    assert summaries[ORDINARY].reasoning_tokens == 0
    # Priced apart: at the plain input price the cached tokens would have cost more.
    ordinary = summaries[ORDINARY]
    plain = Decimal(ordinary.input_tokens * 0.15 + ordinary.output_tokens * 0.6) / 1_000_000
    assert ordinary.cost < plain
    data = member_client.get(f"/api/runs/{run.pk}/").json()
    shown = {item["model"]: item for item in data["summary"]}
    assert shown[REASONING]["reasoning_tokens"] == summaries[REASONING].reasoning_tokens
    assert shown[ORDINARY]["cached_input_tokens"] == summaries[ORDINARY].cached_input_tokens
    assert sum(item["cached_input_tokens"] for item in data["results"]) == sum(
        summary.cached_input_tokens for summary in summaries.values()
    )


def test_it_sends_a_models_max_completion_tokens_extra_body_and_headers_from_the_environment(
    stub, settings, monkeypatch
):
    monkeypatch.setenv("ORG_HEADER_VALUE", "team-42")
    configure(settings, stub, **{"gpt-5-mini": {
        "max_completion_tokens": 256, "extra_body": {"service_tier": "flex"},
        "headers_env": {"X-Org": "ORG_HEADER_VALUE"},
    }})

    run = execute(make_suite(), (REASONING,))

    assert only_result(run).status == "passed", only_result(run).reason
    body = reasoning_requests(stub)[0]
    assert (body["max_completion_tokens"], body["service_tier"]) == (256, "flex")
    assert "max_tokens" not in body
    assert stub.headers[0]["x-org"] == "team-42"


def test_it_omits_the_temperature_of_an_agent_that_leaves_it_to_the_model(stub):
    suite = make_suite()
    Agent.objects.filter(pk=suite.agent_id).update(temperature=None)

    run = execute(suite, (ORDINARY,))

    assert only_result(run).status == "passed", only_result(run).reason
    agent_requests = [body for body in stub.requests if not body.get("response_format")]
    assert agent_requests and all("temperature" not in body for body in agent_requests)


# --- Every odd answer ------------------------------------------------------------------------------------------------


def test_it_shows_the_servers_message_and_the_option_to_change_for_an_unsupported_parameter(stub, settings):
    configure(settings, stub, **{"gpt-5-mini": {"accepts_temperature": True}})

    result = only_result(execute(make_suite(), (REASONING,)))

    assert result.status == "error"
    assert "HTTP 400" in result.reason
    assert "Unsupported value: 'temperature' does not support 0.0 with this model" in result.reason
    assert "set accepts_temperature = false for model 'gpt-5-mini' of provider 'stub' in the providers file" in (
        result.reason
    )


def test_it_answers_every_call_of_parallel_tool_calls(stub):
    stub.queue(Answer(tool_calls=[Call("find_order", {"order_id": "1043"}), Call("void_order", {"id": "1043"})]))

    result = only_result(execute(make_suite()))

    assert [call["name"] for call in result.tool_calls] == ["find_order", "void_order"]
    assert result.status == "passed", result.reason
    answered = stub.requests[1]["messages"]
    assert [m["role"] for m in answered[-3:]] == ["assistant", "tool", "tool"]
    assert [m["tool_call_id"] for m in answered[-2:]] == [c["id"] for c in answered[-3]["tool_calls"]]


@pytest.mark.parametrize("content", [None, ""])
def test_it_takes_an_empty_content_beside_tool_calls_and_sends_it_back_as_an_empty_string(settings, content):
    # The stub is as strict as llama.cpp's server, whose chat template needs a string content on every message: a
    # missing key and null both answer HTTP 500 ("'dict object' has no attribute 'content'"), "" answers.
    with OpenAIStub() as stub:
        configure(settings, stub)
        stub.queue(RawCompletion({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": content, "tool_calls": [{
                    "id": "call_a", "type": "function",
                    "function": {"name": "find_order", "arguments": '{"order_id": "1043"}'},
                }],
            }}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }))
        stub.respond_with(desk_answer)

        result = only_result(execute(make_suite()))
        sent_back = stub.requests[1]["messages"]

    assert result.status == "passed", result.reason
    assistant = next(m for m in sent_back if m["role"] == "assistant")
    assert assistant["content"] == "" and assistant["tool_calls"][0]["id"] == "call_a"


def test_it_errors_on_a_refusal_saying_what_the_model_said(stub):
    stub.queue(Answer(refusal="I can't help with that request."))

    result = only_result(execute(make_suite()))

    assert result.status == "error"
    assert "the model stub:gpt-4o-mini failed at turn 0 step 0: the model refused to answer: I can't help with " in (
        result.reason
    )


@pytest.mark.parametrize(
    ("options", "sent", "named"),
    [
        ({"max_completion_tokens": 16}, {"max_completion_tokens": 16},
         "raise max_completion_tokens (set to 16) for model 'gpt-4o-mini' of provider 'stub' in the providers file"),
        # llama-cpp-python ignores max_completion_tokens (753 tokens under a limit of 40) and honours max_tokens.
        ({"extra_body": {"max_tokens": 40}}, {"max_tokens": 40},
         "raise extra_body.max_tokens (set to 40) for model 'gpt-4o-mini' of provider 'stub' in the providers file"),
        ({}, {}, "raise the server's own limit (none is set for model 'gpt-4o-mini' of provider 'stub' in the "
                 "providers file: set max_completion_tokens, or extra_body.max_tokens for a server that ignores it)"),
    ],
)
def test_it_errors_on_an_answer_cut_off_at_the_length_limit_naming_the_option_that_was_set(
    stub, settings, options, sent, named
):
    configure(settings, stub, **{"gpt-4o-mini": options})
    stub.queue(Answer("Order 1043 is still proc", finish_reason="length"))

    result = only_result(execute(make_suite()))

    assert result.status == "error"
    assert "the answer was cut off at the length limit (finish_reason: length)" in result.reason
    assert named in result.reason, result.reason
    request = stub.requests[0]
    assert {key: request.get(key) for key in sent} == sent
    assert "max_completion_tokens" in request or "max_completion_tokens" not in options
    # The cut-off text is kept in the transcript, where it can be read.
    assert any(m["content"] == "Order 1043 is still proc" for m in result.transcript)


def test_it_answers_malformed_tool_arguments_invalid_and_lets_the_model_go_on(stub):
    stub.queue(
        Answer(tool_calls=[Call("find_order", '{"order_id": "10')]),
        Answer(tool_calls=[Call("find_order", {"order_id": "1043"})]),
    )

    result = only_result(execute(make_suite()))

    message = Message.objects.get(conversation_id=result.conversation_id, role=Message.Role.TOOL_RESULT, seq=3)
    assert message.outcome == "invalid" and message.content.startswith("Invalid arguments for find_order: the")
    assert "not valid JSON" in message.content
    # The model corrected itself with a valid call, so the case still passes.
    assert result.status == "passed", result.reason


def test_it_fails_a_call_of_a_tool_the_agent_does_not_declare_naming_it(stub):
    stub.queue(Answer(tool_calls=[Call("delete_all_orders", {})]))

    result = only_result(execute(make_suite()))

    assert result.status == "failed"
    blocked = next(a for a in result.assertions if a["type"] == "noBlockedTools")
    assert blocked["message"] == "delete_all_orders was called, but the agent does not declare it, so it did not run"
    assert result.tool_calls[0]["outcome"] == "unavailable"


def test_it_errors_on_an_answer_with_no_choices(stub):
    stub.queue(RawCompletion({"id": "x", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
                              "choices": []}))

    result = only_result(execute(make_suite()))

    assert result.status == "error"
    assert "answered with an empty 'choices' list (no answer at all)" in result.reason


# --- Seen with llama.cpp: items 10–13 -------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_it_leaves_results_that_never_got_an_answer_out_of_p50_and_p95(stub, settings, admin_client):
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "down": {"kind": "openai", "base_url": f"http://127.0.0.1:{closed_port()}/v1", "api_key_env": "",
                 "timeout": 2.0, "max_retries": 0, "models": [{"name": "smollm2"}]},
    }

    suite = make_suite(cases=2)
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("run_suite", suite.name, "--models", f"{ORDINARY},down:smollm2", "--inline", stdout=out)
    run = Run.objects.get(suite=suite)

    assert "down:smollm2: 2 result(s) without an answer from the model (not in p50/p95)" in out.getvalue()
    summaries = {summary.model: summary for summary in run_summary(run=run)}
    down = summaries["down:smollm2"]
    assert (down.errored, down.unanswered) == (2, 2)
    assert down.latency_p50_ms is None and down.latency_p95_ms is None
    assert summaries[ORDINARY].unanswered == 0 and summaries[ORDINARY].latency_p50_ms > 0
    page = admin_client.get(f"/runs/{run.pk}/").content.decode()
    assert "2 without an answer" in page


def test_it_names_the_users_model_in_the_same_reason_in_live_record_and_replay(stub):
    suite = make_suite()
    reasons = {}
    for mode in (Run.Mode.LIVE, Run.Mode.RECORD, Run.Mode.REPLAY):
        if mode != Run.Mode.REPLAY:
            stub.queue(HttpError(400, "the request is malformed"))
        reasons[mode] = only_result(execute(suite, (ORDINARY,), mode)).reason

    assert reasons[Run.Mode.LIVE] == reasons[Run.Mode.RECORD] == reasons[Run.Mode.REPLAY]
    assert reasons[Run.Mode.LIVE].startswith("the model call failed at turn 0: the model stub:gpt-4o-mini failed at")
    assert "agenttest-" not in reasons[Run.Mode.LIVE]


PYDANTIC_LIST = (
    "2 validation errors for ChatCompletionRequest\n"
    "messages.1.content\n"
    "  Input should be a valid string [type=string_type, input_value=None, input_type=NoneType]\n"
    "    For further information visit https://errors.pydantic.dev/2.9/v/string_type\n"
    "messages.1.tool_calls.0.function.arguments\n"
    "  Field required [type=missing, input_value={'name': 'x'}, input_type=dict]\n"
)


def test_it_keeps_every_problem_of_a_long_server_error_on_its_own_line(stub):
    stub.queue(HttpError(500, PYDANTIC_LIST, {"x-should-retry": "false"}))

    result = only_result(execute(make_suite()))

    lines = result.reason.splitlines()
    assert lines[0].endswith(": HTTP 500 from " + stub.base_url + ": 2 validation errors for ChatCompletionRequest")
    assert lines[1:] == [
        "- messages.1.content: Input should be a valid string (string_type)",
        "- messages.1.tool_calls.0.function.arguments: Field required (missing)",
    ]


def test_it_lists_a_fastapi_detail_list_one_problem_a_line_and_the_cli_indents_them(stub):
    detail = [{"loc": ["body", "messages", index, "content"], "msg": "Field required", "type": "missing"}
              for index in range(3)]
    stub.queue(HttpError(422, body={"detail": detail}))
    suite = make_suite()

    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("run_suite", suite.name, "--models", ORDINARY, "--inline", stdout=out)

    text = out.getvalue()
    assert "HTTP 422 from" in text and "the server refused the request:\n" in text
    for index in range(3):
        assert f"\n          - body.messages.{index}.content: Field required\n" in text


def test_it_says_what_a_looping_agent_repeated_when_it_hits_the_step_limit(stub):
    turns = iter([Call("find_order", {"order_id": "1043"}), Call("void_order", {"id": "1043"})] * 5)
    stub.respond_with(lambda body: Answer(tool_calls=[next(turns)]))

    result = only_result(execute(make_suite(max_steps=6)))

    assert result.status == "error"
    assert (
        "did not finish turn 0 within 6 model steps: the agent repeated find_order → void_order 3 times "
        "(raise the agent's max_steps" in result.reason
    )


# --- Rate limits ----------------------------------------------------------------------------------------------------


def test_it_rides_out_a_429_storm_with_every_case_passed_and_the_waiting_shown(stub, settings):
    configure(settings, stub, max_retries=1)
    # Each case's first call meets four 429s: the SDK retries once (honouring Retry-After), the case waits out the
    # rest within its timeout.
    storm = [rate_limited(0.2)] * 4
    stub.queue(*storm)
    suite = make_suite(cases=3)
    for case in suite.cases.all():
        case.turns.update(user_message="Where is order 1043?")

    run = execute(suite, (ORDINARY,))

    results = list(CaseResult.objects.filter(run=run).order_by("position"))
    assert [r.status for r in results] == ["passed"] * 3, [r.reason for r in results]
    assert run.status == Run.Status.PASSED
    waited = [r for r in results if r.reason.startswith("waited ")]
    assert [r.reason for r in waited] == [
        "waited 0.4 s for rate limits (2 times after HTTP 429 outlasted the provider's retries)"
    ]
    # Every retry, the SDK's and the case's, waited the Retry-After the stub asked for.
    gaps = [later - earlier for earlier, later in zip(stub.times[:4], stub.times[1:5], strict=True)]
    assert all(gap >= 0.19 for gap in gaps), gaps


def test_it_errors_a_rate_limited_case_once_waiting_would_outlast_its_timeout(stub):
    # Each wait is more than half the case's timeout, so a second one never fits however fast the machine; the first
    # fits if the case's first call starts within 11.5 s (a loaded machine is slow to the first call: 4 s of spare
    # with a 6 s wait in a 10 s case was not enough beside a busy suite).
    stub.queue(*[rate_limited(18)] * 3)

    result = only_result(execute(make_suite(timeout=30)))

    assert result.status == "error"
    assert "rate limited (HTTP 429)" in result.reason and "waited 18.0 s for rate limits (1 time" in result.reason


# --- The judge's odd answers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "reason"),
    [
        (Answer(refusal="I won't grade this."), "the judge's answer is unusable: the model refused to answer: I won't"),
        (Answer('{"score": 5, "rea', finish_reason="length"), "the judge's answer is unusable: the answer was cut off"),
    ],
)
def test_it_errors_when_the_judge_refuses_or_is_cut_off(stub, verdict, reason):
    def answer(body: dict) -> Answer | str:
        return verdict if body.get("response_format") else desk_answer(body)

    stub.respond_with(answer)

    result = only_result(execute(make_suite(judge=REASONING)))

    assert result.status == "error"
    assert result.reason.startswith("llmJudge (case) could not be evaluated: ") and reason in result.reason


def test_it_parses_the_judges_free_text_when_its_model_has_no_structured_output(stub, settings):
    configure(settings, stub, **{"gpt-5-mini": {"structured_output": False}})

    def answer(body: dict) -> Answer | str:
        if body["messages"][0]["content"].startswith("You grade one reply"):
            return 'My verdict: {"score": 4, "reason": "clear enough"}'
        return desk_answer(body)

    stub.respond_with(answer)

    result = only_result(execute(make_suite(judge=REASONING)))

    assert result.status == "passed", result.reason
    assert not any(body.get("response_format") for body in stub.requests)


def test_it_stops_a_run_at_its_budget_counting_reasoning_tokens_at_their_price(stub, settings):
    # Reasoning tokens priced far above output ones: only they can exhaust this budget after one case.
    configure(settings, stub, **{"gpt-5-mini": {"reasoning_price": 1000.0}})
    suite = make_suite(cases=3)

    run = Run.objects.get(pk=run_execute(run_id=run_create(
        suite=suite, model_keys=[REASONING], budget_cost=Decimal("0.04")
    ).pk).pk)

    (first,) = CaseResult.objects.filter(run=run)
    assert first.reasoning_tokens == 2 * REASONING_TOKENS
    assert first.cost >= Decimal(2 * REASONING_TOKENS * 1000) / 1_000_000
    assert run.status == Run.Status.ERROR
    assert run.reason == (
        f"budget exhausted after 1 of 3 results: {format_cost(first.cost)} spent of a budget of $0.04"
    )


def test_it_passes_a_case_whose_first_call_meets_a_5xx_the_sdk_retries(stub, settings):
    configure(settings, stub, max_retries=1)
    stub.queue(HttpError(503, "The server is overloaded or not ready yet."))

    result = only_result(execute(make_suite()))

    assert result.status == "passed" and result.reason == ""
    assert len(stub.requests) == 3, "the refused attempt, its retry, and the call after the tool result"
