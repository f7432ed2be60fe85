"""The run pages: list, trigger, the run itself (live progress, then summary, chart and case × model matrix), one
result, run vs baseline. The matrix cells are built in runs/web/matrix.py, the CSV / JUnit downloads in
runs/web/exports.py, results side by side in runs/web/side_by_side.py, the figures written by runs/engine/numbers.py
and runs/web/charts.py.

Any signed-in user may look; only staff may trigger or cancel, because a run spends token quota — members are shown
no button and get 403 when they post anyway. Each page runs a fixed number of queries whatever the number of cases and
models: results are read as plain values without their transcripts, and only the result page loads one transcript.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from html import escape as html_escape
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agenthost.seams import conversation_page_url
from cases.models import Suite
from cases.selectors import case_hidden_from, enabled_cases, suite_list, trace_hider
from common.durations import format_ms
from common.forms import unknown_fields_message, unknown_form_fields
from common.inputs import parse_id, printable_json, text_is_storable
from runs.engine.numbers import (
    format_cost,
    format_cost_delta,
    format_duration,
    format_pass_rate,
    format_signed,
    format_tokens,
    format_tokens_delta,
    models_priced,
)
from runs.engine.run_checks import MAX_TRIALS
from runs.engine.throttle import throttle_lines
from runs.engine.workers import live_workers
from runs.models import CaseResult, CaseSnapshot, Run
from runs.selectors import ModelSummary, run_list, run_pickup_stall, run_summary
from runs.services import (
    QueueUnavailable,
    RunConflict,
    RunError,
    result_freeze,
    run_bless,
    run_cancel,
    run_resume,
    run_trigger,
    run_unbless,
)
from runs.web.charts import model_chart, pass_rate_band
from runs.web.comparison import (
    BROKE,
    ComparisonError,
    Flipped,
    baseline_get,
    change_anchor,
    compared_results_of,
    default_baseline,
    earlier_runs,
    model_deltas,
    result_in_baseline,
    run_compare,
    run_differences,
    run_flipped,
    runs_verdicts,
    same_case,
    verdict_of,
    with_default_baseline,
)
from runs.web.forms import RunTriggerForm
from runs.web.matrix import (
    CASE_TIME_TITLE,
    FIRST_FAILURE,
    MATRIX_SORTS,
    MatrixQueryError,
    MatrixView,
    live_matrix,
    matrix_body,
    matrix_view,
    new_cells,
    results_base,
    short_reason,
)
from runs.web.readable import assertion_outcomes, readable, result_transcript
from runs.web.verifications import result_mock_verifications

RUNS_PER_PAGE = 25
MATRIX_FILTERS = {"all": "All cases", "failures": "Failures only", "disagree": "Where models disagree"}


def _forbidden(
    request: HttpRequest, message: str, *, status: int = 403, title: str = "Not allowed"
) -> HttpResponse:
    return render(request, "runs/forbidden.html", {"message": message, "title": title}, status=status)


def _unknown_fields(request: HttpRequest, nothing_done: str) -> HttpResponse | None:
    """A 400 for a POST to a button (which sends only the CSRF token) that carries any other field: a client sending
    one expects it to mean something, and it would be silently ignored (as the API refuses it too)."""
    unknown = unknown_form_fields(request.POST, ())
    if not unknown:
        return None
    return _forbidden(request, f"{unknown_fields_message(unknown, ())} {nothing_done}", status=400)


def _elapsed(run: Run, now: datetime | None = None) -> float | None:
    """Seconds the run has been running (so far, or in all); None before it starts."""
    if run.started_at is None:
        return None
    end = run.finished_at or now or timezone.now()
    return max((end - run.started_at) / timedelta(seconds=1), 0.0)


# --- Runs list ----------------------------------------------------------------------------------------------------


def _pass_rates_and_baselines(runs: list[Any]) -> None:
    """Attach to a page of runs (from with_default_baseline) their per-model pass rates (passed / ran) and what
    flipped since each one's default baseline, from one grouped query over their results and their baselines'."""
    baseline_ids = {run.baseline_id for run in runs if run.baseline_id is not None}
    verdicts = runs_verdicts(run_ids=list({run.pk for run in runs} | baseline_ids))
    for run in runs:
        mine = verdicts[run.pk]
        run.pass_rates = []
        for model in run.model_keys:
            ran, passed = mine.totals(model)
            rate = passed / ran if ran else None
            run.pass_rates.append(
                {"model": model, "passed": passed, "ran": ran, "percent": format_pass_rate(rate),
                 "width": round((rate or 0) * 100), "band": pass_rate_band(rate)}
            )
        run.since_baseline = None
        if run.baseline_id is not None and mine.by_model:
            regressions, fixes = mine.flips_since(verdicts[run.baseline_id])
            run.since_baseline = {
                "id": run.baseline_id, "blessed": run.baseline_rank == 0, "regressions": regressions, "fixes": fixes,
            }


@login_required
@require_GET
def run_list_page(request: HttpRequest) -> HttpResponse:
    suite_id = request.GET.get("suite", "")
    status = request.GET.get("status", "")
    if status not in Run.Status.values:
        status = ""
    queryset = with_default_baseline(
        run_list(suite_id=parse_id(suite_id), status=status).defer(
            "case_ids", "agent_snapshot", "suite__agent__instruction", "suite__agent__functions", "suite__agent__rules"
        )
    )
    page = Paginator(queryset, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    runs = list(page.object_list)
    if runs:
        _pass_rates_and_baselines(runs)
    now = timezone.now()
    for run in runs:
        run.duration_text = format_duration(_elapsed(run, now))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "page": page,
        "runs": runs,
        "suites": Suite.objects.order_by("name").values_list("id", "name"),
        "statuses": Run.Status.choices,
        "filters": {"suite": suite_id, "status": status},
        "query": query.urlencode(),
        "can_trigger": request.user.is_staff,
    }
    return render(request, "runs/run_list.html", context)


# --- Trigger ------------------------------------------------------------------------------------------------------


def case_count_message(*, matching: int, enabled: int, case_filter: str) -> str:
    plural = "s" if enabled != 1 else ""
    if not enabled:
        return "This suite has no enabled case: a run would be refused"
    if not case_filter:
        return f"All {enabled} enabled case{plural}"
    if not matching:
        return f"Matches none of the {enabled} enabled case{plural}: a run would be refused"
    return f"Matches {matching} of {enabled} enabled case{plural}"


def _case_count(suite: Suite, case_filter: str) -> dict[str, Any]:
    case_filter = case_filter.strip()
    enabled = enabled_cases(suite=suite).count()
    if not case_filter:
        matching = enabled
    else:
        matching = enabled_cases(suite=suite, case_filter=case_filter).count() if text_is_storable(case_filter) else 0
    return {
        "suite": suite.pk,
        "case_filter": case_filter,
        "matching": matching,
        "enabled": enabled,
        "message": case_count_message(matching=matching, enabled=enabled, case_filter=case_filter),
    }


@login_required
@require_GET
def cases_count(request: HttpRequest) -> JsonResponse:
    """How many enabled cases of a suite a case filter selects, for the trigger form to show before submitting."""
    suite_id = parse_id(request.GET.get("suite", ""))
    if suite_id is None:
        return JsonResponse({"error": "suite must be a suite id (a whole number from 1)"}, status=400)
    suite = Suite.objects.filter(pk=suite_id).first()
    if suite is None:
        return JsonResponse({"error": f"there is no suite {suite_id}"}, status=404)
    case_filter = request.GET.get("case_filter", "")
    if len(case_filter) > 200:
        return JsonResponse({"error": "the case filter is longer than 200 characters"}, status=400)
    return JsonResponse(_case_count(suite, case_filter))


def _initial_from_query(request: HttpRequest) -> dict[str, Any]:
    """"Run again" links prefill the form with what the run was:
    ?suite=<id>&models=<key>&models=<key>&case_filter=<text>&mode=<mode>&trials=<n>. A value the form would refuse
    is left out, so the field keeps its default."""
    initial: dict[str, Any] = {}
    if (suite_id := parse_id(request.GET.get("suite", ""))) is not None:
        initial["suite"] = suite_id
    if request.GET.getlist("models"):
        initial["models"] = request.GET.getlist("models")
    case_filter = request.GET.get("case_filter", "")
    if case_filter and text_is_storable(case_filter):
        initial["case_filter"] = case_filter[:200]
    if request.GET.get("mode", "") in Run.Mode.values:
        initial["mode"] = request.GET["mode"]
    trials = parse_id(request.GET.get("trials", ""))
    if trials is not None and trials <= MAX_TRIALS:
        initial["trials"] = trials
    return initial


@login_required
@require_http_methods(["GET", "POST"])
def run_trigger_page(request: HttpRequest) -> HttpResponse:
    if not request.user.is_staff:
        return _forbidden(request, "Only admins can trigger runs: every run spends model token quota.")
    suites = suite_list()
    status = 200
    if request.method == "POST":
        form = RunTriggerForm(request.POST, suites=suites)
        status = 400
        if form.is_valid():
            data = form.cleaned_data
            try:
                run = run_trigger(
                    suite=data["suite"], model_keys=data["models"], case_filter=data["case_filter"],
                    triggered_by=request.user, mode=data["mode"], trials=data["trials"],
                    budget_tokens=data["budget_tokens"], budget_cost=data["budget_cost"],
                )
            except QueueUnavailable as exc:
                form.add_error(None, f"{exc}. Nothing was queued; start the message broker and try again.")
                status = 503
            except RunError as exc:
                form.add_run_error(exc)
            else:
                # Tagged so the run page's poller can take the notice down once the run has started.
                messages.success(
                    request, f"Run #{run.pk} is queued: {run.total} case × model results to go.",
                    extra_tags="run-queued",
                )
                return redirect("runs:detail", run_id=run.pk)
    else:
        form = RunTriggerForm(initial=_initial_from_query(request), suites=suites)
    count = None
    chosen = parse_id(form["suite"].value())
    if chosen is not None:
        suite = Suite.objects.filter(pk=chosen).first()
        if suite is not None:
            count = _case_count(suite, str(form["case_filter"].value() or ""))
    context = {"form": form, "count": count, "has_suites": suites.exists()}
    return render(request, "runs/run_trigger.html", context, status=status)


# --- The run page -------------------------------------------------------------------------------------------------


def _progress(run: Run, since: int | None = None) -> dict[str, Any]:
    """Where a run stands: counts, done / total per model, the case in progress, elapsed time. One query. With
    `since` (the last result id the page has), also the matrix cells of results written after it, rendered, so the
    page can link them as they land: two more queries when there are any."""
    done_by_model = dict(
        CaseResult.objects.filter(run=run).order_by().values_list("model").annotate(count=Count("id"))
    )
    per_model = run.total // len(run.model_keys) if run.model_keys else 0
    elapsed = _elapsed(run)
    return {
        "id": run.pk,
        "status": run.status,
        "status_label": run.get_status_display(),
        "finished": run.is_finished,
        "cancel_requested": run.cancel_requested,
        "reason": run.reason,
        "done": run.done,
        "total": run.total,
        "percent": round(100 * run.done / run.total) if run.total else 0,
        "passed": run.passed,
        "failed": run.failed,
        "errored": run.errored,
        "cancelled": run.cancelled,
        "current": run.current,
        "elapsed_seconds": None if elapsed is None else round(elapsed, 1),
        "elapsed": format_duration(elapsed) if elapsed is not None else "not started",
        "models": [
            {
                "model": model,
                "done": done_by_model.get(model, 0),
                "total": per_model,
                "percent": round(100 * done_by_model.get(model, 0) / per_model) if per_model else 0,
            }
            for model in run.model_keys
        ],
        **(new_cells(run, since) if since is not None else {}),
    }



def _summary_numbers(run: Run, summaries: list[ModelSummary]) -> None:
    """The figures of each summary as the pages write them: percentages, milliseconds, tokens, one cost format."""
    priced = models_priced(summary.model for summary in summaries)
    # Each summary is given its figures as text here, for the templates (none is a field of ModelSummary).
    summary: Any
    for summary in summaries:
        summary.band = pass_rate_band(summary.pass_rate)
        summary.percent = format_pass_rate(summary.pass_rate)
        summary.width = round((summary.pass_rate or 0) * 100)
        summary.pass_k_percent = format_pass_rate(summary.pass_k)
        summary.p50 = format_ms(summary.latency_p50_ms)
        summary.p95 = format_ms(summary.latency_p95_ms)
        summary.tokens_text = f"{format_tokens(summary.input_tokens)} / {format_tokens(summary.output_tokens)}"
        summary.judge_tokens_text = format_tokens(summary.judge_tokens)
        summary.cached_tokens_text = format_tokens(summary.cached_input_tokens)
        summary.reasoning_tokens_text = format_tokens(summary.reasoning_tokens)
        summary.total_tokens_text = format_tokens(summary.total_tokens)
        # A replayed run called no model: its $0 is exact whatever the model's price.
        is_priced = priced[summary.model] or run.mode == Run.Mode.REPLAY
        summary.priced = is_priced
        summary.cost_text = format_cost(summary.total_cost, priced=is_priced)
        summary.trial_cost_text = format_cost(summary.trial_cost, priced=is_priced)
        summary.judge_cost_text = format_cost(summary.judge_cost)


# The run page lists this many flipped cases at most; the compare page has all of them.
FLIPS_LISTED = 25


def _flipped_context(run: Run, flipped: Flipped) -> dict[str, Any]:
    """The flipped cases as the top of the run page lists them: regressions first, each with its links."""
    base = results_base(run)
    baseline_base = reverse("runs:detail", kwargs={"run_id": flipped.baseline_id}) + "results/"
    compare_url = reverse("runs:compare", kwargs={"run_id": run.pk}) + f"?baseline={flipped.baseline_id}"
    listed = []
    for flip in [*flipped.regressions, *flipped.fixes][:FLIPS_LISTED]:
        listed.append({
            "flip": flip,
            "url": f"{base}{flip.current_result_id}/",
            "baseline_url": f"{baseline_base}{flip.baseline_result_id}/",
            "side_by_side_url": f"{base}{flip.current_result_id}/side-by-side/?with={flip.baseline_result_id}",
            "reason": short_reason(flip.current_reason if flip.kind == BROKE else flip.baseline_reason),
            "change_url": f"{compare_url}#{flip.change_anchor}",
        })
    return {
        "flipped": flipped,
        "flips_listed": listed,
        "flips_unlisted": flipped.count - len(listed),
        "compare_url": compare_url,
    }


def _query_link(request: HttpRequest, **changes: str) -> str:
    """This page's query string with `changes` (an empty value drops the parameter), the others kept: a link that
    sorts the matrix keeps its model filter, and the other way round. The partial body's own flag never carries."""
    query = request.GET.copy()
    query.pop("partial", None)
    for name, value in changes.items():
        query.pop(name, None)
        if value:
            query[name] = value
    encoded = query.urlencode()
    return f"?{encoded}" if encoded else "?"


def _matrix_controls(request: HttpRequest, run: Run, view: MatrixView) -> dict[str, Any]:
    """The links that filter the matrix by model and sort it (server-side), and the CSV of what it shows."""
    csv_query = _query_link(request, show="")
    return {
        "model_links": [
            {"label": label, "url": _query_link(request, model=key) + "#matrix", "current": view.model == key,
             "is_model": bool(key)}
            for key, label in [("", "All models"), *((model, model) for model in run.model_keys)]
        ] if len(run.model_keys) > 1 or view.model else [],
        "sort_links": [
            {"label": label, "url": _query_link(request, sort=key) + "#matrix", "current": view.sort == key}
            for key, label in MATRIX_SORTS.items()
        ],
        "csv_url": reverse("runs:matrix-csv", kwargs={"run_id": run.pk}) + (csv_query if csv_query != "?" else ""),
        "view": view,
    }


def _results_context(request: HttpRequest, run: Run, view: MatrixView) -> dict[str, Any]:
    summaries = run_summary(run=run)
    models = [summary.model for summary in summaries]
    flipped = run_flipped(run=run)
    rows, counts = matrix_body(
        run, models, html_escape(results_base(run)), flipped, view, viewer=request.user
    )
    _summary_numbers(run, summaries)
    show = request.GET.get("show", "all")
    filters = dict(MATRIX_FILTERS)
    if flipped is not None:
        filters["flipped"] = f"Flipped since #{flipped.baseline_id}"
    results = sum(summary.total for summary in summaries)
    return {
        "summaries": summaries,
        "chart": model_chart(summaries),
        "models": [view.model] if view.model else models,
        "rows": rows,
        "matrix_counts": counts,
        "matrix_filters": [
            (key, label, counts[key], _query_link(request, show="" if key == "all" else key) + "#matrix")
            for key, label in filters.items()
        ],
        "first_failure": FIRST_FAILURE if f'id="{FIRST_FAILURE}"' in rows else "",
        **_matrix_controls(request, run, view),
        "show": show if show in filters else "all",
        "missing": max(run.total - results, 0),
        "baselines": list(earlier_runs(run=run)),
        # The form preselects what the compare page would use by default: the blessed run, else the previous one.
        "default_baseline_id": getattr(run, "baseline_id", None),
        "case_time_title": CASE_TIME_TITLE,
        **(_flipped_context(run, flipped) if flipped is not None else {}),
    }


def _run_context(request: HttpRequest, run: Run, view: MatrixView) -> dict[str, Any]:
    elapsed = _elapsed(run)
    context: dict[str, Any] = {
        "run": run,
        "elapsed": format_duration(elapsed) if elapsed is not None else "not started",
        "can_manage": request.user.is_staff,
        "budget_cost": format_cost(run.budget_cost) if run.budget_cost else "",
        "budget_tokens": format_tokens(run.budget_tokens) if run.budget_tokens else "",
        "unserved_group": _unserved_group(run),
        "throttle_lines": throttle_lines(run.throttle),
    }
    if not context["unserved_group"]:
        stall = run_pickup_stall(run=run)
        context["pickup_stall"] = stall and {**vars(stall), "waited": format_duration(stall.waited_seconds)}
    if run.is_finished:
        context.update(_results_context(request, run, view))
    else:
        context.update({"progress": _progress(run), "live": live_matrix(run)})
    return context


def _unserved_group(run: Run) -> str:
    """The run's isolation group when the run waits and no live worker serves that group, else ""."""
    if run.status != Run.Status.PENDING or live_workers(group=run.isolation_group):
        return ""
    return run.isolation_group


@login_required
@require_GET
def run_page(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run; with ?partial=1 only its body, which the progress poller swaps in once the run has finished."""
    run = get_object_or_404(with_default_baseline(run_list().defer("agent_snapshot")), pk=run_id)
    try:
        view = matrix_view(request.GET, list(run.model_keys))
    except MatrixQueryError as exc:
        return _forbidden(request, str(exc), status=400, title="Can't show that matrix")
    template = "runs/_run_body.html" if request.GET.get("partial") else "runs/run_detail.html"
    return render(request, template, _run_context(request, run, view))


@login_required
@require_GET
def run_progress(request: HttpRequest, run_id: int) -> JsonResponse:
    """Progress; with ?since=<result id> (0: from the start) also the cells of the results written after it."""
    run = get_object_or_404(Run.objects.defer("agent_snapshot"), pk=run_id)
    since = None
    if "since" in request.GET:
        raw = request.GET["since"]
        since = 0 if raw == "0" else parse_id(raw)
        if since is None:
            return JsonResponse(
                {"errors": [{"field": "since", "message": "since must be a result id (a whole number from 0)"}]},
                status=400,
            )
    return JsonResponse(_progress(run, since), headers={"Cache-Control": "no-store"})


def _bless_page(request: HttpRequest, run_id: int, *, bless: bool) -> HttpResponse:
    if not request.user.is_staff:
        return _forbidden(request, "Only admins can choose a suite's blessed baseline.")
    run = get_object_or_404(Run.objects.defer("agent_snapshot").select_related("suite"), pk=run_id)
    if (refused := _unknown_fields(request, "Nothing was changed.")) is not None:
        return refused
    if not bless:
        run_unbless(run=run)
        messages.success(request, f"Run #{run.pk} is no longer the blessed baseline of {run.suite.name}.")
        return redirect("runs:detail", run_id=run.pk)
    try:
        run = run_bless(run=run, by=request.user)
    except RunConflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request, f"Run #{run.pk} is now the blessed baseline of {run.suite.name}: later runs compare with it."
        )
    return redirect("runs:detail", run_id=run.pk)


@login_required
@require_POST
def run_bless_page(request: HttpRequest, run_id: int) -> HttpResponse:
    return _bless_page(request, run_id, bless=True)


@login_required
@require_POST
def run_unbless_page(request: HttpRequest, run_id: int) -> HttpResponse:
    return _bless_page(request, run_id, bless=False)


@login_required
@require_POST
def run_cancel_page(request: HttpRequest, run_id: int) -> HttpResponse:
    if not request.user.is_staff:
        return _forbidden(request, "Only admins can cancel runs.")
    run = get_object_or_404(Run.objects.defer("agent_snapshot"), pk=run_id)
    if (refused := _unknown_fields(request, "Nothing was cancelled.")) is not None:
        return refused
    try:
        run = run_cancel(run=run)
    except RunConflict as exc:
        messages.error(request, str(exc))
    else:
        if run.status == Run.Status.CANCELLED:
            messages.success(request, f"Run #{run.pk} is cancelled; it had not started.")
        else:
            messages.success(request, f"Run #{run.pk} stops after the case in progress; the rest is marked cancelled.")
    return redirect("runs:detail", run_id=run.pk)


@login_required
@require_POST
def run_resume_page(request: HttpRequest, run_id: int) -> HttpResponse:
    if not request.user.is_staff:
        return _forbidden(request, "Only admins can resume runs.")
    run = get_object_or_404(Run.objects.defer("agent_snapshot"), pk=run_id)
    if (refused := _unknown_fields(request, "Nothing was resumed.")) is not None:
        return refused
    try:
        run = run_resume(run=run)
    except RunError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Run #{run.pk} is queued again; only the cases without a result will run.")
    return redirect("runs:detail", run_id=run.pk)


# --- One result ---------------------------------------------------------------------------------------------------


def _cell_text(value: Any) -> str:
    return value if isinstance(value, str) else printable_json(value, sort_keys=True, default=str)


def _table_cell(row: dict[str, Any], was: Any, field: str) -> dict[str, Any]:
    changed = isinstance(was, dict) and (field in was, was.get(field)) != (field in row, row.get(field))
    return {"text": _cell_text(row[field]) if field in row else "", "changed": changed}


def _final_tables(result: CaseResult) -> list[dict[str, Any]]:
    """The stateful mocks' tables as the case left them, a column per field, each cell the case's calls changed
    marked — against the tables the case ran with (its snapshot), row by row: a table mock updates rows in place, never
    adds or removes one. One query, none for a case without tables."""
    tables = result.final_tables if isinstance(result.final_tables, dict) else {}
    if not tables:
        return []
    snapshot = CaseSnapshot.objects.filter(content_hash=result.case_hash).values_list("content", flat=True).first()
    initial = snapshot.get("tables") if isinstance(snapshot, dict) else None
    shown = []
    for name, rows in tables.items():
        rows = [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []
        before = initial.get(name) if isinstance(initial, dict) else None
        # Sorted: a row's key order is whatever its database kept (PostgreSQL's jsonb reorders keys).
        columns = sorted({field for row in rows for field in row})
        lines = []
        for index, row in enumerate(rows):
            was = before[index] if isinstance(before, list) and index < len(before) else None
            lines.append([_table_cell(row, was, field) for field in columns])
        shown.append({"name": name, "columns": columns, "rows": lines, "known": before is not None})
    return shown


@login_required
@require_GET
def result_page(request: HttpRequest, run_id: int, result_id: int) -> HttpResponse:
    """One result, and where its case stood on its model in the run's baseline: the baseline's verdict, whether it
    flipped, and links to the baseline's result and to the two side by side."""
    queryset = with_default_baseline(
        CaseResult.objects.select_related("run__suite", "case__source_conversation"), run="run"
    )
    # run__pk, not run_id: Django keeps an id beyond the column's range out of a pk lookup, not out of a foreign key's.
    result = get_object_or_404(queryset, run__pk=run_id, pk=result_id)
    if result.case is not None and case_hidden_from(result.case, user=request.user):
        # A draft from production traces, run before it was disabled again: staff only, as the draft itself.
        raise Http404("no such result")
    other_models = list(
        same_case(CaseResult.objects.filter(run_id=run_id), result=result)
        .order_by("position")
        .values("id", "model", "trial", "status")
    )
    verdict = verdict_of([other["status"] for other in other_models if other["model"] == result.model])
    in_baseline = result_in_baseline(result=result, verdict=verdict)
    base = results_base(result.run)
    context = {
        "run": result.run,
        "result": result,
        "transcript": result_transcript(result),
        "assertions": assertion_outcomes(result),
        "final_state": sorted((key, readable(value)) for key, value in (result.final_state or {}).items()),
        "final_tables": _final_tables(result),
        "mock_verifications": result_mock_verifications(result),
        "duration": format_ms(result.duration_ms),
        "latency": format_ms(result.model_latency_ms),
        "tokens": f"{format_tokens(result.input_tokens)} / {format_tokens(result.output_tokens)}",
        "judge_tokens": format_tokens(result.judge_tokens),
        "cost": format_cost(
            result.cost, priced=result.run.mode == Run.Mode.REPLAY or models_priced([result.model])[result.model]
        ),
        "judge_cost": format_cost(result.judge_cost),
        "other_models": other_models,
        "models_url": f"{base}{result.pk}/models/",
        "in_baseline": in_baseline,
        "simulation": _simulation(result),
        "can_freeze": request.user.is_staff and bool((result.simulation or {}).get("turns")) and bool(result.case_id),
    }
    context.update(_failure_neighbours(result))
    if result.case is not None:
        hidden = trace_hider(result.case, user=request.user)
        context["case_description"] = hidden(result.case.description)
        result.case_name = hidden(result.case_name)
        if request.user.is_staff:
            context["case_edit_url"] = reverse("admin:cases_case_change", args=[result.case_id])
    if result.conversation_id and request.user.is_staff:
        # Staff see every conversation; a member only their own, which a run's never is.
        context["conversation_url"] = conversation_page_url(conversation_id=result.conversation_id)
    if in_baseline is not None and in_baseline.result_id is not None:
        context["baseline_result_url"] = reverse(
            "runs:result", kwargs={"run_id": in_baseline.run_id, "result_id": in_baseline.result_id}
        )
        context["side_by_side_url"] = f"{base}{result.pk}/side-by-side/?with={in_baseline.result_id}"
        context["change_url"] = (
            reverse("runs:compare", kwargs={"run_id": result.run_id})
            + f"?baseline={in_baseline.run_id}#{change_anchor(in_baseline.case_hash, result.case_hash)}"
        )
    return render(request, "runs/result_detail.html", context)


def _failure_neighbours(result: CaseResult) -> dict[str, Any]:
    """The run's failed and errored results before and after this one in matrix order (case, then model, then
    trial: the run's positions), and where this one stands among them. One query, of ids."""
    failures = list(
        CaseResult.objects.filter(run_id=result.run_id, status__in=FAILING)
        .order_by("position", "id")
        .values_list("position", "id")
    )
    here = (result.position, result.pk)
    before = [pair for pair in failures if pair < here]
    after = [pair for pair in failures if pair > here]
    base = results_base(result.run)
    return {
        "failures_total": len(failures),
        "failure_number": len(before) + 1 if here in failures else None,
        "previous_failure_url": f"{base}{before[-1][1]}/" if before else "",
        "next_failure_url": f"{base}{after[0][1]}/" if after else "",
    }


FAILING = (CaseResult.Status.FAILED, CaseResult.Status.ERROR)


def _simulation(result: CaseResult) -> dict[str, Any] | None:
    """What the page says of a simulated user: who played it, as whom (persona, goal, the facts it could reveal),
    which turns it wrote (counted from 1), what stopped it, and the goal verdict with its reason."""
    simulation = result.simulation or {}
    if not simulation:
        return None
    goals = [item for item in result.assertions or [] if item.get("type") == "goalReached"]
    verdict = None
    if goals:
        actual = goals[0].get("actual") if isinstance(goals[0].get("actual"), dict) else {}
        verdict = {"status": goals[0].get("status", ""), "reached": actual.get("reached"),
                   "reason": actual.get("reason") or goals[0].get("message", "")}
    usage = simulation.get("usage") or {}
    # The persona and facts the user model was given, from what the result ran (its case's snapshot): one query.
    ran = CaseSnapshot.objects.filter(content_hash=result.case_hash).values_list("content", flat=True).first()
    played = (ran or {}).get("simulated_user") if isinstance(ran, dict) else None
    played = played if isinstance(played, dict) else {}
    facts = given if isinstance(given := played.get("facts"), dict) else {}
    return {
        "model": simulation.get("user_model", ""),
        "goal": simulation.get("goal", "") or played.get("goal", ""),
        "persona": played.get("persona", ""),
        "facts": sorted(facts.items()),
        # Counted from 1, as a person counts turns: turn index 0 is the first.
        "turns": ", ".join(str(turn + 1) for turn in simulation.get("turns") or [] if isinstance(turn, int)) or "none",
        "stop": (simulation.get("stop") or {}).get("text", ""),
        "stop_by": (simulation.get("stop") or {}).get("by", ""),
        "verdict": verdict,
        "tokens": format_tokens(int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))),
    }


@login_required
@require_POST
def result_freeze_page(request: HttpRequest, run_id: int, result_id: int) -> HttpResponse:
    if not request.user.is_staff:
        return _forbidden(request, "Only admins can freeze a result into a case.")
    result = get_object_or_404(CaseResult.objects.select_related("run"), run__pk=run_id, pk=result_id)
    if (refused := _unknown_fields(request, "Nothing was frozen.")) is not None:
        return refused
    try:
        case = result_freeze(result=result)
    except RunError as exc:
        messages.error(request, str(exc))
        return redirect("runs:result", run_id, result_id)
    messages.success(
        request, f"Frozen into the disabled draft {case.name!r}: review its turns, then enable it."
    )
    return redirect("admin:cases_case_change", case.pk)


# --- Run vs baseline ----------------------------------------------------------------------------------------------


def _delta_rows(run: Run, baseline: Run) -> list[dict[str, Any]]:
    """Per model, the baseline's and the run's figures and how they moved; a rise in pass rate is good, a rise in
    latency, tokens or cost is not."""
    current, before = run_summary(run=run), run_summary(run=baseline)
    _summary_numbers(run, current)
    _summary_numbers(baseline, before)
    rows = []
    # Totals of runs with different trial counts compare k results with j: beside them, what one result spent.
    per_result = run.trials != baseline.trials
    for delta in model_deltas(baseline=before, current=current):
        points = delta.pass_rate_points
        rows.append({
            "model": delta.model,
            "baseline": delta.baseline,
            "current": delta.current,
            "pass_rate": format_signed(points, " pts"),
            "pass_rate_trend": "" if points is None or round(points) == 0 else ("better" if points > 0 else "worse"),
            "p50": format_signed(delta.p50_ms, " ms"),
            "p95": format_signed(delta.p95_ms, " ms"),
            "tokens": "" if delta.tokens is None else format_tokens_delta(delta.tokens),
            "tokens_per_result": (
                f"{_tokens_per_result(delta.baseline)} → {_tokens_per_result(delta.current)} per result"
                if per_result else ""
            ),
            "cost": "" if delta.cost is None else (
                # Summaries given their `priced` by _summary_numbers.
                format_cost_delta(delta.cost)
                if getattr(delta.baseline, "priced", False) and getattr(delta.current, "priced", False)
                else "unpriced"
            ),
        })
    return rows


def _tokens_per_result(summary: ModelSummary | None) -> str:
    ran = summary.total - summary.cancelled if summary else 0
    return format_tokens(round(summary.total_tokens / ran)) if summary and ran else "—"


@login_required
@require_GET
def run_compare_page(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run against a baseline (by default the suite's blessed run, else the previous run): how each model's
    numbers moved, what differs between the two runs, and per model the cases that flipped, with their reasons."""
    run = get_object_or_404(run_list(), pk=run_id)
    wanted = request.GET.get("baseline", "").strip()
    error, baseline, status = "", None, 200
    if not wanted:
        baseline = default_baseline(run=run)
    elif (baseline_id := parse_id(wanted)) is None:
        error, status = f"{wanted!r} is not a run number; pick a run from the list.", 400
    else:
        try:
            baseline = baseline_get(run=run, baseline_id=baseline_id)
        except ComparisonError as exc:
            error, status = f"Can't compare with that run: {exc}.", 400
    results = None
    if baseline:
        both = compared_results_of(run_ids=[run.pk, baseline.pk])
        results = (both[run.pk], both[baseline.pk])
    context = {
        "run": run,
        "baseline": baseline,
        "default_used": baseline is not None and not wanted,
        "baselines": list(earlier_runs(run=run)),
        "comparisons": run_compare(run=run, baseline=baseline, results=results) if baseline else [],
        "deltas": _delta_rows(run, baseline) if baseline else [],
        "differences": run_differences(run=run, baseline=baseline, results=results) if baseline else None,
        "error": error,
        "results_base": results_base(run),
        "baseline_results_base": results_base(baseline) if baseline else "",
        "can_manage": request.user.is_staff,
    }
    return render(request, "runs/run_compare.html", context, status=status)
