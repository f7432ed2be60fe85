"""What a run stores of a finished case survives what happens while it is stored: a transient database error under
the result's transaction (the retry writes the test conversation whole), an executor that lost its lease (no
recording is left behind) and a model answer with an absurd usage figure (bounded and reported, never fatal)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.backends.signals import connection_created
from django.urls import reverse
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from agenthost.llm.base import MAX_ANSWER_LATENCY_MS, MAX_ANSWER_TOKENS, ModelResponse, Usage
from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Conversation, Message
from agenthost.testing.openai_stub import OpenAIStub
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.engine.leases import run_sweep_expired
from runs.models import CaseResult, Recording, Run
from runs.services import run_create, run_execute
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

LOOKUP = Answer(tool_calls=[Call("find_order", {"order_id": "1042"})])
INT_MAX = 2**31 - 1


def desk_suite(provider: str, model: str, *, cases: int = 1, name: str = "desk") -> Suite:
    agent = Agent.objects.create(
        name=f"{name}-agent", instruction="Help with orders.", provider=provider, model=model,
        functions=[{"name": "find_order"}],
    )
    suite = Suite.objects.create(name=name, agent=agent, case_timeout_seconds=30)
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"case {index}")
        turn = Turn.objects.create(case=case, user_message=f"Where is order {1042 + index}?")
        Mock.objects.create(case=case, function_name="find_order", result='{"status": "shipped"}')
        Assertion.objects.create(case=case, turn=turn, type="toolCalled", params={"function": "find_order"})
    return suite


def looks_up_then_answers(request: Any) -> Answer | str:
    return "It has shipped." if request.messages[-1]["role"] == "tool" else LOOKUP


# --- A transient error while the result is stored -----------------------------------------------------------------


@pytest.fixture
def result_insert_fails_once() -> Iterator[dict[str, int]]:
    """The first INSERT of a case result fails with a transient error raised by the database itself (a trigger):
    on PostgreSQL a serialization failure (SQLSTATE 40001), on SQLite an error from a SQL function the trigger calls.
    Either way the whole result transaction rolls back, as a real blip would. Yields how often the trigger fired."""
    fired = {"count": 0}
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("CREATE SEQUENCE agenttest_fault_seq")
            cursor.execute(
                """
                CREATE FUNCTION agenttest_fault() RETURNS trigger AS $$
                BEGIN
                    -- A sequence is not transactional: the rollback of the failed insert does not undo the count.
                    IF nextval('agenttest_fault_seq') = 1 THEN
                        RAISE EXCEPTION 'injected transient failure' USING ERRCODE = '40001';
                    END IF;
                    RETURN NEW;
                END $$ LANGUAGE plpgsql
                """
            )
            cursor.execute(
                "CREATE TRIGGER agenttest_fault BEFORE INSERT ON runs_caseresult "
                "FOR EACH ROW EXECUTE FUNCTION agenttest_fault()"
            )
        yield fired
        with connection.cursor() as cursor:
            cursor.execute("SELECT last_value, is_called FROM agenttest_fault_seq")
            last_value, is_called = cursor.fetchone()
            fired["count"] = last_value if is_called else 0
            cursor.execute("DROP TRIGGER agenttest_fault ON runs_caseresult")
            cursor.execute("DROP FUNCTION agenttest_fault()")
            cursor.execute("DROP SEQUENCE agenttest_fault_seq")
        assert fired["count"] >= 2, "the injected fault never fired, or the result was never written again"
        return

    def fault() -> int:
        fired["count"] += 1
        if fired["count"] == 1:
            raise RuntimeError("injected transient failure")
        return 0

    def register(connection: Any, **kwargs: Any) -> None:
        if connection.vendor == "sqlite":
            connection.connection.create_function("agenttest_fault", 0, fault)

    # Every connection that may compile the INSERT needs the function: the one open now and any reconnection.
    connection_created.connect(register)
    connection.ensure_connection()
    register(connection)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TRIGGER agenttest_fault BEFORE INSERT ON runs_caseresult BEGIN SELECT agenttest_fault(); END"
        )
    yield fired
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER agenttest_fault")
    connection_created.disconnect(register)
    assert fired["count"] >= 2, "the injected fault never fired, or the result was never written again"


def test_it_writes_the_whole_test_conversation_when_storing_the_result_is_retried_after_a_transient_error(
    scripted_model, result_insert_fails_once
):
    scripted_model.respond_with(looks_up_then_answers)
    suite = desk_suite("scripted", "scripted")
    run = run_create(suite=suite, model_keys=[scripted_model.key])

    run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert run.status == Run.Status.PASSED, run.reason
    result = CaseResult.objects.get(run=run)
    conversation = Conversation.objects.get(pk=result.conversation_id)
    stored = list(Message.objects.filter(conversation=conversation).order_by("seq").values_list("seq", "role"))
    assert stored == [(m["seq"], m["role"]) for m in result.transcript]
    assert [role for _, role in stored] == ["user", "assistant", "tool_call", "tool_result", "assistant"]
    assert [seq for seq, _ in stored] == list(range(5))
    assert (conversation.message_count, conversation.turn_count) == (5, 1)
    assert conversation.turn_claimed_until is None, "the test conversation is still claimed after its run ended"


# --- A lost lease ---------------------------------------------------------------------------------------------------


def stub_provider(base_url: str) -> dict[str, Any]:
    return {
        "kind": "openai", "base_url": base_url, "api_key_env": "", "timeout": WAIT_SECONDS, "max_retries": 0,
        "models": [
            {"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.6, "label": ""},
            # Priced as the dearest models are: a bounded absurd answer still costs more than a result holds.
            {"name": "pricey-model", "input_price": 150.0, "output_price": 600.0, "label": ""},
        ],
    }


@pytest.fixture
def stub(settings) -> Iterator[OpenAIStub]:
    # A lease long enough that its heartbeat never renews it while a test takes it away.
    settings.AGENTTEST_RUN_LEASE_SECONDS = 600
    with OpenAIStub() as server:
        settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "stub": stub_provider(server.base_url)}
        yield server


def sweep_while_answering(run_id: int) -> Any:
    """Answer as the order desk model does, but first let the run's lease run out and sweep it — as a worker does
    when the executor stalled past its lease — so the executor finishes the case without holding its run."""

    def reply(body: dict[str, Any]) -> Answer | str:
        if body["messages"][-1]["role"] == "tool":
            return "It has shipped."
        try:
            Run.objects.filter(pk=run_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
            assert run_sweep_expired() == [run_id]
        finally:
            connection.close()
        return LOOKUP

    return reply


def test_it_writes_no_recording_for_a_case_whose_executor_lost_the_run_and_keeps_the_recording_before(stub):
    suite = desk_suite("stub", "gpt-4o-mini")
    case = suite.cases.get()
    stub.respond_with(lambda body: "It has shipped." if body["messages"][-1]["role"] == "tool" else LOOKUP)
    first = run_create(suite=suite, model_keys=["stub:gpt-4o-mini"], mode=Run.Mode.RECORD)
    run_execute(run_id=first.pk)
    kept = Recording.objects.get(case=case)
    assert kept.run_id == first.pk

    second = run_create(suite=suite, model_keys=["stub:gpt-4o-mini"], mode=Run.Mode.RECORD)
    stub.respond_with(sweep_while_answering(second.pk))
    run_execute(run_id=second.pk)

    second.refresh_from_db()
    assert second.status == Run.Status.ERROR
    assert second.reason.endswith("0 of 1 results were kept"), second.reason
    assert not CaseResult.objects.filter(run=second).exists()
    recording = Recording.objects.get(case=case)
    assert (recording.run_id, recording.entries, recording.updated_at) == (first.pk, kept.entries, kept.updated_at)


# --- An absurd usage figure from an endpoint -------------------------------------------------------------------------


ABSURD = Usage(
    input_tokens=5_000_000_000, output_tokens=3_000_000_000, cached_input_tokens=4_000_000_000,
    reasoning_tokens=2_500_000_000,
)


def test_it_bounds_an_absurd_usage_from_an_endpoint_reports_it_on_the_result_and_keeps_every_result(
    stub, admin_client
):
    def reply(body: dict[str, Any]) -> Answer:
        # The case asking about order 1042 gets answers that claim billions of tokens; the others, ordinary ones.
        asked = next(message["content"] for message in body["messages"] if message["role"] == "user")
        usage = ABSURD if "1042" in asked else None
        if body["messages"][-1]["role"] == "tool":
            return Answer("It has shipped.", usage=usage)
        return Answer(tool_calls=LOOKUP.tool_calls, usage=usage)

    stub.respond_with(reply)
    suite = desk_suite("stub", "pricey-model", cases=3)
    run = run_create(suite=suite, model_keys=["stub:pricey-model"])

    run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert (run.status, run.reason) == (Run.Status.PASSED, "all 3 results passed")
    absurd, *ordinary = CaseResult.objects.filter(run=run).order_by("case_name")
    assert absurd.case_name == "case 0" and absurd.status == CaseResult.Status.PASSED
    assert (absurd.input_tokens, absurd.output_tokens, absurd.cached_input_tokens, absurd.reasoning_tokens) == (
        INT_MAX, INT_MAX, INT_MAX, INT_MAX
    )
    assert absurd.cost == Decimal("999999.99999999")
    assert absurd.reason.startswith(
        "the endpoint reported absurd usage in 2 answer(s): the model pricey-model reported prompt tokens 5000000000 "
        f"(counted as {INT_MAX}), completion tokens 3000000000 (counted as {INT_MAX}), cached prompt tokens "
        f"4000000000 (counted as {INT_MAX}), reasoning tokens 2500000000 (counted as {INT_MAX}) — "
    ), absurd.reason
    assert f"this result used more than it can hold (input tokens {2 * INT_MAX}, output tokens {2 * INT_MAX}, " in (
        absurd.reason
    )
    for result in ordinary:
        assert result.status == CaseResult.Status.PASSED and result.reason == ""
        assert 0 < result.input_tokens < 100_000 and 0 < result.cost < 1
    page = admin_client.get(reverse("runs:result", args=[run.pk, absurd.pk]))
    assert "the endpoint reported absurd usage in 2 answer(s)" in page.content.decode()


@given(
    figures=st.lists(st.integers(min_value=0, max_value=10**30), min_size=4, max_size=4),
    latency=st.floats(min_value=0, max_value=1e300),
)
def test_it_holds_every_figure_of_a_model_answer_within_its_bound_and_names_each_one_it_bounded(
    figures: list[int], latency: float
):
    response = ModelResponse(text="ok", usage=Usage(*figures), latency_ms=latency)

    bounded = [
        response.usage.input_tokens, response.usage.output_tokens, response.usage.cached_input_tokens,
        response.usage.reasoning_tokens,
    ]
    assert bounded == [min(value, MAX_ANSWER_TOKENS) for value in figures]
    assert response.latency_ms == min(latency, MAX_ANSWER_LATENCY_MS)
    named = [value for value in figures if value > MAX_ANSWER_TOKENS]
    assert [note.split(" (counted as")[0].rsplit(" ", 1)[1] for note in response.notes if "tokens" in note] == [
        str(value) for value in named
    ]
    assert any("latency" in note for note in response.notes) == (latency > MAX_ANSWER_LATENCY_MS)
    assert "notes" not in response.as_dict()
