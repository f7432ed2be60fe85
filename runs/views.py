"""The run pages: list, trigger, the run itself (live progress, then summary, chart and case × model matrix), one
result, run vs baseline, and the CSV / JUnit exports.

Any signed-in user may look; only staff may trigger or cancel, because a run spends token quota — members are shown
no button and get 403 when they post anyway. Each page runs a fixed number of queries whatever the number of cases and
models: results are read as plain values without their transcripts, and only the result page loads one transcript.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from html import escape as html_escape
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from cases.models import Case, Suite
from cases.selectors import enabled_cases, suite_list
from common.forms import unknown_fields_message, unknown_form_fields
from common.inputs import parse_id, printable_json, text_is_storable
from runs.charts import format_ms, model_chart, pass_rate_band
from runs.comparison import (
    ComparisonError,
    baseline_get,
    default_baseline,
    earlier_runs,
    model_deltas,
    run_compare,
    run_differences,
)
from runs.forms import RunTriggerForm
from runs.junit import run_to_junit
from runs.models import CaseResult, Run
from runs.numbers import (
    format_cost,
    format_cost_delta,
    format_pass_rate,
    format_tokens,
    format_tokens_delta,
    models_priced,
)
from runs.selectors import ModelSummary, matrix_case_key, run_list, run_matrix, run_pickup_stall, run_summary
from runs.services import (
    QueueUnavailable,
    RunConflict,
    RunError,
    run_bless,
    run_cancel,
    run_resume,
    run_trigger,
    run_unbless,
)
from runs.throttle import throttle_lines
from runs.workers import live_workers

RUNS_PER_PAGE = 25
MATRIX_FILTERS = {"all": "All cases", "failures": "Failures only", "disagree": "Where models disagree"}
# Spreadsheets run a cell that starts with one of these as a formula; case names can come from recorded chats.
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def _forbidden(request: HttpRequest, message: str, *, status: int = 403) -> HttpResponse:
    return render(request, "runs/forbidden.html", {"message": message}, status=status)


def _unknown_fields(request: HttpRequest, nothing_done: str) -> HttpResponse | None:
    """A 400 for a POST to a button (which sends only the CSRF token) that carries any other field: a client sending
    one expects it to mean something, and it would be silently ignored (as the API refuses it too)."""
    unknown = unknown_form_fields(request.POST, ())
    if not unknown:
        return None
    return _forbidden(request, f"{unknown_fields_message(unknown, ())} {nothing_done}", status=400)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _elapsed(run: Run, now: datetime | None = None) -> float | None:
    """Seconds the run has been running (so far, or in all); None before it starts."""
    if run.started_at is None:
        return None
    end = run.finished_at or now or timezone.now()
    return max((end - run.started_at) / timedelta(seconds=1), 0.0)


# --- Runs list ----------------------------------------------------------------------------------------------------


def _pass_rates(runs: list[Run]) -> None:
    """Attach per-model pass rates (passed / ran) to a page of runs, from one grouped query."""
    counts: dict[tuple[int, str], dict[str, int]] = defaultdict(lambda: {"passed": 0, "ran": 0})
    rows = (
        CaseResult.objects.filter(run_id__in=[run.pk for run in runs])
        .order_by()
        .values_list("run_id", "model", "status")
        .annotate(count=Count("id"))
    )
    for run_id, model, status, count in rows:
        if status != CaseResult.Status.CANCELLED:
            counts[(run_id, model)]["ran"] += count
        if status == CaseResult.Status.PASSED:
            counts[(run_id, model)]["passed"] += count
    for run in runs:
        run.pass_rates = []
        for model in run.model_keys:
            passed, ran = counts[(run.pk, model)]["passed"], counts[(run.pk, model)]["ran"]
            rate = passed / ran if ran else None
            run.pass_rates.append(
                {"model": model, "passed": passed, "ran": ran, "percent": format_pass_rate(rate),
                 "width": round((rate or 0) * 100), "band": pass_rate_band(rate)}
            )


@login_required
@require_GET
def run_list_page(request: HttpRequest) -> HttpResponse:
    suite_id = request.GET.get("suite", "")
    status = request.GET.get("status", "")
    if status not in Run.Status.values:
        status = ""
    queryset = run_list(suite_id=parse_id(suite_id), status=status).defer(
        "case_ids", "agent_snapshot", "suite__agent__instruction", "suite__agent__functions", "suite__agent__rules"
    )
    page = Paginator(queryset, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    runs = list(page.object_list)
    if runs:
        _pass_rates(runs)
    now = timezone.now()
    for run in runs:
        run.duration_text = format_duration(_elapsed(run, now))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "page": page,
        "runs": runs,
        "suites": Suite.objects.only("id", "name").order_by("name"),
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
    """"Run again" links prefill the form: ?suite=<id>&models=<key>&models=<key>&case_filter=<text>."""
    initial: dict[str, Any] = {}
    if (suite_id := parse_id(request.GET.get("suite", ""))) is not None:
        initial["suite"] = suite_id
    if request.GET.getlist("models"):
        initial["models"] = request.GET.getlist("models")
    case_filter = request.GET.get("case_filter", "")
    if case_filter and text_is_storable(case_filter):
        initial["case_filter"] = case_filter[:200]
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
        **(_new_cells(run, since) if since is not None else {}),
    }


def _new_cells(run: Run, since: int) -> dict[str, Any]:
    """The cells (and row flags) of every case × model with a result newer than `since`. With several trials a
    cell sums up all of them, so the whole cell is sent again."""
    fresh = list(CaseResult.objects.filter(run=run, pk__gt=since).order_by().values_list("pk", "case_id", "case_name"))
    if not fresh:
        return {"cells": [], "rows": [], "last_result": since}
    rows = run_matrix(
        run=run,
        case_ids={case_id for _, case_id, _ in fresh if case_id is not None},
        case_names={name for _, case_id, name in fresh if case_id is None},
    )
    base = html_escape(_results_base(run))
    cells, flags = [], []
    for row in rows:
        key = matrix_case_key(row)
        flags.append({"key": key, "classes": _row_classes(row)})
        for model, cell in row["cells"].items():
            cells.append({"key": f"{key}|{model}", "html": _cell_html(key, model, cell, run.trials, base)})
    return {"cells": cells, "rows": flags, "last_result": max(pk for pk, _, _ in fresh)}




_STATUS_LABELS = dict(CaseResult.Status.choices)
# With several trials a cell shows how the case held up over all of them; it links to the first trial.
_STABILITY = {"stable-pass": ("passed", "Stable pass"), "stable-fail": ("failed", "Stable fail"),
              "flaky": ("flaky", "Flaky"), "": ("cancelled", "Incomplete")}
# A matrix cell shows the start of a result's reason: enough to tell causes apart; the result page has all of it.
CELL_REASON_CHARS = 90
CASE_TIME_TITLE = "case: the case's wall time (every turn, mocks and assertions); model: the model's own latency"


def short_reason(reason: str, limit: int = CELL_REASON_CHARS) -> str:
    """The reason cut at a word to at most `limit` characters, with an ellipsis when cut."""
    text = " ".join(reason.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:—-(") + "…"


def _cell(cell: dict[str, Any], trials: int) -> dict[str, Any]:
    if trials > 1:
        cell["css"], cell["label"] = _STABILITY.get(cell.get("stability", ""), _STABILITY[""])
        ran = [status for status in cell["trials"] if status != CaseResult.Status.CANCELLED]
        cell["detail"] = f"{ran.count(CaseResult.Status.PASSED)}/{len(ran)} passed"
    else:
        cell["css"], cell["label"] = cell["status"], _STATUS_LABELS.get(cell["status"], cell["status"])
        cell["detail"] = f"case {format_ms(cell['duration_ms'])} · model {format_ms(cell['model_latency_ms'])}"
    return cell


def _row_classes(row: dict[str, Any]) -> str:
    flags = (("has-failure", row["any_failure"]), ("disagree", row["disagree"]))
    return " ".join(name for name, on in flags if on)


def _cell_html(key: str, model: str, cell: dict[str, Any], trials: int, results_base: str) -> str:
    cell = _cell(cell, trials)
    reason = cell["reason"] if cell["status"] != CaseResult.Status.PASSED or trials > 1 else ""
    title = f' title="{html_escape(reason)}"' if reason else ""
    shown = f'<span class="cell-reason">{html_escape(short_reason(reason))}</span>' if reason else ""
    return (
        f'<td class="cell cell-{html_escape(cell["css"])}" data-cell="{html_escape(f"{key}|{model}")}">'
        f'<a href="{results_base}{cell["id"]}/"{title}><span class="cell-head"><span class="cell-verdict">'
        f'{html_escape(cell["label"])}</span><small class="cell-times">{html_escape(cell["detail"])}</small></span>'
        f"{shown}</a></td>"
    )


def _matrix_rows_html(
    rows: list[dict[str, Any]], models: list[str], trials: int, results_base: str, *, live: bool = False
) -> SafeString:
    """The matrix body. Built here rather than in the template: at 1,000 cases × 5 models the template engine spends
    most of the page's time on these cells, plain string building a tenth of it. Every value is escaped (the
    standard library's escape: Django's lazy-aware wrapper costs more than the escaping itself here). While the run
    is live a cell without a result is "not run yet", and the poller replaces it once its result lands."""
    missing = '<td class="cell cell-missing" title="no result">—</td>'
    lines = []
    for row in rows:
        key = matrix_case_key(row)
        cells = []
        for model in models:
            cell = row["cells"].get(model)
            if cell is not None:
                cells.append(_cell_html(key, model, cell, trials, results_base))
            elif live:
                cells.append(
                    f'<td class="cell cell-pending" data-cell="{html_escape(f"{key}|{model}")}">'
                    '<span class="cell-head"><span class="cell-verdict">Not run yet</span></span></td>'
                )
            else:
                cells.append(missing)
        lines.append(
            f'<tr class="{_row_classes(row)}" data-row="{html_escape(key)}"><th scope="row">'
            f'{html_escape(row["case_name"])}</th>{"".join(cells)}</tr>'
        )
    return mark_safe("\n".join(lines))


def _results_base(run: Run) -> str:
    return reverse("runs:detail", kwargs={"run_id": run.pk}) + "results/"


def _matrix(run: Run, models: list[str], results_base: str) -> tuple[SafeString, dict[str, int]]:
    """The matrix body, and how many rows each filter shows."""
    rows = run_matrix(run=run)
    counts = {
        "all": len(rows),
        "failures": sum(1 for row in rows if row["any_failure"]),
        "disagree": sum(1 for row in rows if row["disagree"]),
    }
    return _matrix_rows_html(rows, models, run.trials, results_base), counts


def _live_matrix(run: Run) -> dict[str, Any]:
    """The matrix of a run in progress: every selected case in the run's order, its finished cells linked, the rest
    waiting. Two queries (the cases' names, the results so far)."""
    names = dict(Case.objects.filter(pk__in=run.case_ids or []).values_list("pk", "name"))
    rows = {matrix_case_key(row): row for row in run_matrix(run=run)}
    ordered = []
    for pk in run.case_ids or []:
        key = str(pk)
        if key in rows:
            ordered.append(rows.pop(key))
        elif pk in names:
            ordered.append({"case_id": pk, "case_name": names[pk], "cells": {}, "any_failure": False,
                            "disagree": False})
    ordered.extend(rows.values())
    last = max((cell["last_id"] for row in ordered for cell in row["cells"].values()), default=0)
    return {
        "models": list(run.model_keys),
        "rows": _matrix_rows_html(ordered, list(run.model_keys), run.trials, html_escape(_results_base(run)),
                                  live=True),
        "last_result": last,
        "case_time_title": CASE_TIME_TITLE,
    }


def _summary_numbers(run: Run, summaries: list[ModelSummary]) -> None:
    """The figures of each summary as the pages write them: percentages, milliseconds, tokens, one cost format."""
    priced = models_priced(summary.model for summary in summaries)
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
        summary.judge_cost_text = format_cost(summary.judge_cost)


def _results_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    summaries = run_summary(run=run)
    models = [summary.model for summary in summaries]
    rows, counts = _matrix(run, models, html_escape(_results_base(run)))
    _summary_numbers(run, summaries)
    show = request.GET.get("show", "all")
    results = sum(summary.total for summary in summaries)
    baselines = list(earlier_runs(run=run))
    return {
        "summaries": summaries,
        "chart": model_chart(summaries),
        "models": models,
        "rows": rows,
        "matrix_counts": counts,
        "matrix_filters": [(key, label, counts[key]) for key, label in MATRIX_FILTERS.items()],
        "show": show if show in MATRIX_FILTERS else "all",
        "missing": max(run.total - results, 0),
        "baselines": baselines,
        # The form preselects what the compare page would use by default: the blessed run, else the previous one.
        "default_baseline_id": next(
            (earlier.pk for earlier in baselines if earlier.is_blessed),
            next((earlier.pk for earlier in baselines if earlier.status in ("passed", "failed")), None),
        ),
        "case_time_title": CASE_TIME_TITLE,
    }


def _run_context(request: HttpRequest, run: Run) -> dict[str, Any]:
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
        context.update(_results_context(request, run))
    else:
        context.update({"progress": _progress(run), "live": _live_matrix(run)})
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
    run = get_object_or_404(run_list().defer("agent_snapshot"), pk=run_id)
    template = "runs/_run_body.html" if request.GET.get("partial") else "runs/run_detail.html"
    return render(request, template, _run_context(request, run))


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


def _pretty(value: Any) -> str:
    """JSON as a person reads it; text that holds JSON (tool results usually do) is shown parsed."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
        if isinstance(value, str):
            return value
    # A tool result's text may escape a lone surrogate, which no page can be encoded with: printable_json escapes it.
    return printable_json(value, indent=2, sort_keys=True, default=str)


def _transcript(result: CaseResult) -> list[dict[str, Any]]:
    """The transcript grouped by turn; each tool call joined with its result and marked Mocked / Blocked / Allowed."""
    rows = result.transcript or []
    results_by_call = {
        row["tool_call_id"]: row for row in rows if row.get("role") == "tool_result" and row.get("tool_call_id")
    }
    # Observed calls carry the harness' verdict; used when the transcript's result row has none.
    observed: dict[tuple[Any, str], list[dict[str, Any]]] = defaultdict(list)
    for call in result.tool_calls or []:
        observed[(call.get("turn"), call.get("name", ""))].append(call)
    turns: list[dict[str, Any]] = []
    joined: set[str] = set()
    for message in rows:
        role = message.get("role", "")
        if not turns or turns[-1]["turn"] != message.get("turn"):
            turns.append({"turn": message.get("turn"), "entries": []})
        entries = turns[-1]["entries"]
        if role == "tool_call":
            answer = results_by_call.get(message.get("tool_call_id")) or {}
            joined.add(message.get("tool_call_id") or "")
            calls = observed.get((message.get("turn"), message.get("function", "")))
            seen = calls.pop(0) if calls else {}
            entries.append(
                {
                    "kind": "tool",
                    "name": message.get("function", ""),
                    "arguments": _pretty(message.get("arguments") or {}),
                    "outcome": answer.get("outcome") or seen.get("outcome", ""),
                    "result": _pretty(answer.get("content", seen.get("result", ""))),
                    "trigger": message.get("trigger", ""),
                    "agent": message.get("agent", ""),
                }
            )
        elif role == "tool_result":
            if message.get("tool_call_id") and message.get("tool_call_id") in joined:
                continue
            entries.append(
                {"kind": "tool", "name": message.get("function", ""), "arguments": "", "trigger": "",
                 "outcome": message.get("outcome", ""), "result": _pretty(message.get("content", "")),
                 "agent": message.get("agent", "")}
            )
        elif message.get("content"):
            entries.append(
                {
                    "kind": "user" if role == "user" else "assistant",
                    "content": message["content"],
                    "agent": message.get("agent", ""),
                    "model": message.get("model", ""),
                    "latency": format_ms(message.get("latency_ms")) if message.get("latency_ms") else "",
                }
            )
    return [turn for turn in turns if turn["entries"]]


@login_required
@require_GET
def result_page(request: HttpRequest, run_id: int, result_id: int) -> HttpResponse:
    # run__pk, not run_id: Django keeps an id beyond the column's range out of a pk lookup, not out of a foreign key's.
    result = get_object_or_404(CaseResult.objects.select_related("run__suite"), run__pk=run_id, pk=result_id)
    same_case = CaseResult.objects.filter(run_id=run_id)
    same_case = (
        same_case.filter(case_id=result.case_id) if result.case_id else same_case.filter(case_name=result.case_name)
    )
    assertions = [
        {**item, "expected_text": _pretty(item.get("expected")), "actual_text": _pretty(item.get("actual"))}
        for item in result.assertions or []
    ]
    context = {
        "run": result.run,
        "result": result,
        "transcript": _transcript(result),
        "assertions": assertions,
        "final_state": sorted((key, _pretty(value)) for key, value in (result.final_state or {}).items()),
        "duration": format_ms(result.duration_ms),
        "latency": format_ms(result.model_latency_ms),
        "tokens": f"{format_tokens(result.input_tokens)} / {format_tokens(result.output_tokens)}",
        "judge_tokens": format_tokens(result.judge_tokens),
        "cost": format_cost(
            result.cost, priced=result.run.mode == Run.Mode.REPLAY or models_priced([result.model])[result.model]
        ),
        "judge_cost": format_cost(result.judge_cost),
        "other_models": list(same_case.order_by("position").values("id", "model", "trial", "status")),
    }
    return render(request, "runs/result_detail.html", context)


# --- Run vs baseline ----------------------------------------------------------------------------------------------


def _signed(value: float | None, unit: str, *, digits: int | None = None) -> str:
    if value is None:
        return ""
    if digits is None:
        digits = 1 if abs(value) < 10 and unit == " ms" else 0
    if round(value, digits) == 0:
        return f"±0{unit}"
    return f"{'+' if value > 0 else '−'}{abs(value):.{digits}f}{unit}"


def _delta_rows(run: Run, baseline: Run) -> list[dict[str, Any]]:
    """Per model, the baseline's and the run's figures and how they moved; a rise in pass rate is good, a rise in
    latency, tokens or cost is not."""
    current, before = run_summary(run=run), run_summary(run=baseline)
    _summary_numbers(run, current)
    _summary_numbers(baseline, before)
    rows = []
    for delta in model_deltas(baseline=before, current=current):
        points = delta.pass_rate_points
        rows.append({
            "model": delta.model,
            "baseline": delta.baseline,
            "current": delta.current,
            "pass_rate": _signed(points, " pts"),
            "pass_rate_trend": "" if points is None or round(points) == 0 else ("better" if points > 0 else "worse"),
            "p50": _signed(delta.p50_ms, " ms"),
            "p95": _signed(delta.p95_ms, " ms"),
            "tokens": "" if delta.tokens is None else format_tokens_delta(delta.tokens),
            "cost": "" if delta.cost is None else (
                format_cost_delta(delta.cost) if delta.baseline.priced and delta.current.priced else "unpriced"
            ),
        })
    return rows


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
    context = {
        "run": run,
        "baseline": baseline,
        "default_used": baseline is not None and not wanted,
        "baselines": list(earlier_runs(run=run)),
        "comparisons": run_compare(run=run, baseline=baseline) if baseline else [],
        "deltas": _delta_rows(run, baseline) if baseline else [],
        "differences": run_differences(run=run, baseline=baseline) if baseline else None,
        "error": error,
        "results_base": _results_base(run),
        "baseline_results_base": _results_base(baseline) if baseline else "",
        "can_manage": request.user.is_staff,
    }
    return render(request, "runs/run_compare.html", context, status=status)


# --- Exports ------------------------------------------------------------------------------------------------------


def _csv_text(value: Any) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_PREFIXES) else text


# Per model, the columns of the matrix CSV: (header suffix, value of a cell). A pair without a result leaves them
# all empty. Add a column here and every model gets it.
def _csv_cost(cell: dict[str, Any]) -> str:
    return "" if not cell["priced"] and not cell["cost"] else f"{Decimal(cell['cost'] or 0).normalize():f}"


_CSV_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("status", lambda cell: cell["status"]),
    ("duration_ms", lambda cell: f"{cell['duration_ms']:.0f}"),
    ("model_latency_ms", lambda cell: f"{cell['model_latency_ms']:.0f}"),
    ("input_tokens", lambda cell: cell["input_tokens"]),
    ("output_tokens", lambda cell: cell["output_tokens"]),
    ("cached_input_tokens", lambda cell: cell["cached_input_tokens"]),
    ("reasoning_tokens", lambda cell: cell["reasoning_tokens"]),
    # USD; empty for a model without a price (the page says "unpriced").
    ("cost_usd", _csv_cost),
    ("reason", lambda cell: _csv_text(cell["reason"])),
    ("result_url", lambda cell: cell["url"]),
]


@login_required
@require_GET
def matrix_csv(request: HttpRequest, run_id: int) -> HttpResponse:
    """One row per case; per model the _CSV_COLUMNS of its result (the first trial's with several). An empty group
    is a case × model with no result."""
    run = get_object_or_404(Run.objects.defer("agent_snapshot", "case_ids"), pk=run_id)
    rows = run_matrix(run=run)
    models = list(dict.fromkeys([*run.model_keys, *(model for row in rows for model in row["cells"])]))
    priced = models_priced(models)
    results_base = request.build_absolute_uri(_results_base(run))
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-matrix.csv"'
    writer = csv.writer(response)
    writer.writerow(["case_id", "case", *(f"{model} {name}" for model in models for name, _ in _CSV_COLUMNS)])
    for row in rows:
        values = []
        for model in models:
            cell = row["cells"].get(model)
            if cell is None:
                values += [""] * len(_CSV_COLUMNS)
                continue
            is_priced = priced[model] or run.mode == Run.Mode.REPLAY
            cell = {**cell, "priced": is_priced, "url": f"{results_base}{cell['id']}/"}
            values += [value(cell) for _, value in _CSV_COLUMNS]
        writer.writerow([row["case_id"] or "", _csv_text(row["case_name"]), *values])
    return response


@login_required
@require_GET
def junit_xml(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("suite"), pk=run_id)
    response = HttpResponse(run_to_junit(run), content_type="application/xml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-junit.xml"'
    return response
