"""A run's budget stops it with what finished kept; an interrupted run resumes only the pairs without a result."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agenthost.llm.scripted import Answer
from agenthost.models import Agent
from agenthost.seams import Usage
from cases.models import Assertion, Case, Suite, Turn
from runs.models import CaseResult, Run
from runs.selectors import run_summary
from runs.services import RunConflict, RunError, run_cancel, run_create, run_execute, run_prepare_resume
from tests.runs.conftest import CAREFUL, HASTY

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def suite(make_suite, make_case, order_desk):
    suite = make_suite()
    for name in ["a", "b", "c"]:
        make_case(suite, name, assertions=({"type": "toolCalled", "params": {"function": "cancel_order"}},))
    return suite


def test_it_stops_a_run_whose_token_budget_is_exhausted_and_keeps_what_finished(suite):
    probe = run_execute(run_id=run_create(suite=suite, model_keys=[CAREFUL]).pk)
    tokens_per_case = CaseResult.objects.filter(run=probe).first().total_tokens
    run = run_create(suite=suite, model_keys=[CAREFUL, HASTY], budget_tokens=tokens_per_case + 1)
    run = run_execute(run_id=run.pk)
    assert run.status == Run.Status.ERROR
    assert run.reason.startswith("budget exhausted after 2 of 6 results: ")
    assert "tokens used of a budget of" in run.reason
    assert CaseResult.objects.filter(run=run).count() == 2


def test_it_stops_on_a_cost_budget(suite, settings):
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "scripted": {**settings.AGENTTEST_PROVIDERS["scripted"], "models": [
            {"name": "careful", "input_price": 1000.0, "output_price": 1000.0, "label": ""},
            {"name": "hasty", "input_price": 0.0, "output_price": 0.0, "label": ""},
        ]},
    }
    run = run_execute(run_id=run_create(suite=suite, model_keys=[CAREFUL], budget_cost=Decimal("0.01")).pk)
    assert run.status == Run.Status.ERROR and run.reason.startswith("budget exhausted after 1 of 3 results: $")
    assert CaseResult.objects.get(run=run).cost > Decimal("0.01")


@pytest.mark.parametrize("field,value", [("budget_tokens", 0), ("budget_cost", -1), ("trials", 0), ("mode", "dry")])
def test_it_refuses_bad_run_options_naming_the_field(suite, field, value):
    with pytest.raises(RunError) as raised:
        run_create(suite=suite, model_keys=[CAREFUL], **{field: value})
    assert raised.value.field == field
    assert not Run.objects.exists()


def test_it_resumes_an_interrupted_run_running_only_the_missing_pairs(suite):
    run = run_create(suite=suite, model_keys=[CAREFUL, HASTY])
    first_case = suite.cases.order_by("name").first()
    kept = CaseResult.objects.create(run=run, case=first_case, case_name=first_case.name, model=CAREFUL,
                                     status="passed", reason="kept from before")
    Run.objects.filter(pk=run.pk).update(status=Run.Status.ERROR, passed=1,
                                         reason="the worker restarted while this run was in progress")
    run = run_prepare_resume(run=Run.objects.get(pk=run.pk))
    assert run.status == Run.Status.PENDING and run.reason == "resumed with 1 of 6 results kept"
    run = run_execute(run_id=run.pk)
    results = CaseResult.objects.filter(run=run)
    assert results.count() == 6
    assert results.get(case=first_case, model=CAREFUL).reason == "kept from before"
    assert kept.pk in results.values_list("pk", flat=True)
    assert run.status == Run.Status.PASSED and run.done == 6 and run.passed == 6


def test_it_resumes_a_cancelled_run_including_the_cancelled_pairs(suite):
    run = run_create(suite=suite, model_keys=[CAREFUL])
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    run = run_execute(run_id=run.pk)
    assert run.status == Run.Status.CANCELLED
    assert CaseResult.objects.filter(run=run, status="cancelled").count() == 3
    run = run_execute(run_id=run_prepare_resume(run=run).pk)
    assert run.status == Run.Status.PASSED and run.cancelled == 0 and run.passed == 3


def test_it_refuses_to_resume_a_run_that_is_complete_or_in_progress(suite):
    run = run_execute(run_id=run_create(suite=suite, model_keys=[CAREFUL]).pk)
    with pytest.raises(RunConflict, match="only a run that ended in Error or Cancelled"):
        run_prepare_resume(run=run)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.ERROR)
    with pytest.raises(RunConflict, match="nothing to resume"):
        run_prepare_resume(run=Run.objects.get(pk=run.pk))


def test_it_cancels_a_pending_run_at_once_and_refuses_a_finished_one(suite):
    run = run_cancel(run=run_create(suite=suite, model_keys=[CAREFUL]))
    assert run.status == Run.Status.CANCELLED and run.cancelled == 3
    assert run_execute(run_id=run.pk) is None
    with pytest.raises(RunConflict, match="already finished"):
        run_cancel(run=run)


def _interrupted(suite):
    run = run_create(suite=suite, model_keys=[CAREFUL])
    first_case = suite.cases.order_by("name").first()
    CaseResult.objects.create(run=run, case=first_case, case_name=first_case.name, model=CAREFUL, status="passed")
    Run.objects.filter(pk=run.pk).update(status=Run.Status.ERROR, passed=1, reason="the worker restarted")
    return Run.objects.get(pk=run.pk)


def test_it_resumes_from_the_cli_inline(suite, capsys):
    from django.core.management import call_command

    run = _interrupted(suite)
    call_command("run_suite", "--resume", str(run.pk), "--inline")  # exit code 0: no SystemExit
    output = capsys.readouterr().out
    assert f"Resuming run #{run.pk} of suite 'orders': 1 of 3 results kept." in output
    run.refresh_from_db()
    assert run.status == Run.Status.PASSED and CaseResult.objects.filter(run=run).count() == 3


def test_it_resumes_through_the_api_for_admins_only(suite, admin_client_api, member_client, run_queue):
    run = _interrupted(suite)
    assert member_client.post(f"/api/runs/{run.pk}/resume/").status_code == 403
    response = admin_client_api.post(f"/api/runs/{run.pk}/resume/")
    assert response.status_code == 200, response.content
    run.refresh_from_db()
    assert run.status == Run.Status.PASSED and CaseResult.objects.filter(run=run).count() == 3
    again = admin_client_api.post(f"/api/runs/{run.pk}/resume/")
    assert again.status_code == 409 and "only a run that ended in Error or Cancelled" in again.json()["detail"]


def test_it_offers_resume_on_the_run_page_to_admins(suite, client, admin_user, member, run_queue):
    run = _interrupted(suite)
    client.force_login(member)
    assert b"data-resume-form" not in client.get(f"/runs/{run.pk}/").content
    assert client.post(f"/runs/{run.pk}/resume/").status_code == 403
    client.force_login(admin_user)
    assert b"data-resume-form" in client.get(f"/runs/{run.pk}/").content
    response = client.post(f"/runs/{run.pk}/resume/")
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == Run.Status.PASSED


def test_it_takes_mode_trials_and_budget_on_the_trigger_page(suite, client, admin_user, run_queue):
    client.force_login(admin_user)
    response = client.post("/runs/new/", {"suite": suite.pk, "models": [CAREFUL], "trials": 2,
                                          "budget_tokens": 100000})
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get()
    assert (run.trials, run.total, run.budget_tokens, run.mode) == (2, 6, 100000, "live")
    refused = client.post("/runs/new/", {"suite": suite.pk, "models": [CAREFUL], "mode": "record", "trials": 3})
    assert refused.status_code == 400 and b"trials" in refused.content
    assert Run.objects.count() == 1


def _judged_suite(scripted_model, cases: int = 2):
    agent = Agent.objects.create(name="plain", instruction="Answer.", provider="scripted", model="scripted")
    suite = Suite.objects.create(name="judged", agent=agent, judge_model=scripted_model.key, case_timeout_seconds=30)
    for index in range(cases):
        case = Case.objects.create(suite=suite, name=f"case {index}")
        turn = Turn.objects.create(case=case, user_message=f"question {index}")
        Assertion.objects.create(case=case, turn=turn, type="llmJudge", params={"criterion": "it is polite"})
    return suite


def _judge_spends(scripted_model, *, judge_tokens: int) -> None:
    def answer(request):
        if (request.metadata or {}).get("purpose") == "judge":
            return Answer('{"score": 5, "reason": "polite"}', usage=Usage(judge_tokens // 2, judge_tokens // 2))
        return Answer("Certainly, happy to help.", usage=Usage(5, 5))

    scripted_model.respond_with(answer)


def test_it_counts_the_judges_tokens_and_cost_in_the_result_the_summary_and_the_budget(scripted_model):
    suite = _judged_suite(scripted_model, cases=3)
    _judge_spends(scripted_model, judge_tokens=2000)
    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key], budget_tokens=500).pk)
    assert run.status == Run.Status.ERROR
    assert run.reason == "budget exhausted after 1 of 3 results: 2010 tokens used of a budget of 500"
    result = CaseResult.objects.get(run=run)
    assert (result.status, result.input_tokens + result.output_tokens, result.judge_tokens) == ("passed", 10, 2000)
    # The scripted model's prices are $1 / $2 per million input / output tokens.
    assert result.judge_cost == Decimal("0.003") and result.total_tokens == 2010
    [summary] = run_summary(run=run)
    assert (summary.judge_tokens, summary.total_tokens) == (2000, 2010)
    assert summary.total_cost == summary.cost + Decimal("0.003")


def test_it_keeps_counting_the_judges_spend_of_kept_results_when_a_run_resumes(scripted_model):
    suite = _judged_suite(scripted_model, cases=3)
    _judge_spends(scripted_model, judge_tokens=2000)
    run = run_execute(run_id=run_create(suite=suite, model_keys=[scripted_model.key], budget_tokens=3000).pk)
    assert run.reason.startswith("budget exhausted after 2 of 3 results: 4020 tokens used")
    run = run_execute(run_id=run_prepare_resume(run=run).pk)
    assert run.status == Run.Status.ERROR and run.reason.startswith("budget exhausted after 2 of 3 results: ")
    assert CaseResult.objects.filter(run=run).count() == 2


def test_it_stops_without_a_verdict_when_another_executor_took_the_run_over(scripted_model):
    suite = _judged_suite(scripted_model, cases=3)
    run = run_create(suite=suite, model_keys=[scripted_model.key])
    swept = "swept while its executor hung"

    def answer(request):
        if (request.metadata or {}).get("purpose") == "judge":
            return Answer('{"score": 5, "reason": "polite"}')
        if request.messages[-1]["content"] == "question 1":
            # What the sweep does to a run whose executor stopped renewing its lease.
            Run.objects.filter(pk=run.pk).update(status=Run.Status.ERROR, reason=swept, lease_owner="")
        return Answer("Certainly.")

    scripted_model.respond_with(answer)
    run = run_execute(run_id=run.pk)
    assert (run.status, run.reason) == (Run.Status.ERROR, swept)
    assert list(CaseResult.objects.filter(run=run).values_list("case_name", flat=True)) == ["case 0"]
    assert run.passed == 1 and run.done == 1


def test_it_refuses_to_resume_a_run_whose_executor_still_holds_its_lease(suite, admin_client_api, run_queue):
    run = _interrupted(suite)
    Run.objects.filter(pk=run.pk).update(lease_owner="elsewhere:1:x", lease_expires_at=timezone.now() + timedelta(60))
    response = admin_client_api.post(f"/api/runs/{run.pk}/resume/")
    assert response.status_code == 409
    assert f"run #{run.pk} is still held by its executor (lease until " in response.json()["detail"]
    assert Run.objects.get(pk=run.pk).status == Run.Status.ERROR
