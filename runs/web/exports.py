"""The run's downloads: the case × model matrix as CSV, and the JUnit XML a CI server reads."""

from __future__ import annotations

import csv
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from runs.engine.numbers import models_priced
from runs.models import Run
from runs.selectors import run_matrix_trials
from runs.web.junit import run_to_junit
from runs.web.matrix import MatrixQueryError, matrix_sorted, matrix_view, results_base

# Spreadsheets run a cell that starts with one of these as a formula; case names can come from recorded chats.
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


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
    """One row per case and trial (1-based; 1 in a run of one trial); per model the _CSV_COLUMNS of that trial's own
    result, so every result of the run is in the file once, linked to itself. An empty group is a case × model ×
    trial with no result. It follows the run page's matrix: ?model=<key> keeps that model's columns only, and
    ?sort=duration|status orders the rows as the page does; a value naming nothing is a 400 naming the parameter."""
    run = get_object_or_404(Run.objects.defer("agent_snapshot", "case_ids"), pk=run_id)
    try:
        view = matrix_view(request.GET, list(run.model_keys))
    except MatrixQueryError as exc:
        return HttpResponse(f"{exc} Nothing was exported.\n", status=400, content_type="text/plain; charset=utf-8")
    rows = run_matrix_trials(run=run)
    models = [view.model] if view.model else list(
        dict.fromkeys([*run.model_keys, *(model for row in rows for model in row["cells"])])
    )
    rows = matrix_sorted(rows, models, view.sort)
    priced = models_priced(models)
    result_links = request.build_absolute_uri(results_base(run))
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-matrix.csv"'
    writer = csv.writer(response)
    writer.writerow(
        ["case_id", "case", "trial", *(f"{model} {name}" for model in models for name, _ in _CSV_COLUMNS)]
    )
    for row in rows:
        values = []
        for model in models:
            cell = row["cells"].get(model)
            if cell is None:
                values += [""] * len(_CSV_COLUMNS)
                continue
            is_priced = priced[model] or run.mode == Run.Mode.REPLAY
            cell = {**cell, "priced": is_priced, "url": f"{result_links}{cell['id']}/"}
            values += [value(cell) for _, value in _CSV_COLUMNS]
        writer.writerow([row["case_id"] or "", _csv_text(row["case_name"]), row["trial"] + 1, *values])
    return response


@login_required
@require_GET
def junit_xml(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("suite"), pk=run_id)
    response = HttpResponse(run_to_junit(run), content_type="application/xml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-junit.xml"'
    return response
