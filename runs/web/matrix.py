"""The run page's case × model matrix: its cells as HTML, whole for the page and one by one for the live poller."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from html import escape as html_escape
from typing import Any

from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from cases.models import Case
from cases.selectors import mock_drift_exists, trace_hider
from common.durations import format_ms
from runs.engine.numbers import format_cost, models_priced
from runs.models import CaseResult, Run
from runs.selectors import matrix_case_key, run_matrix
from runs.web.comparison import BROKE, Flip, Flipped


def new_cells(run: Run, since: int) -> dict[str, Any]:
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
    base = html_escape(results_base(run))
    priced = cost_priced(run, [model for row in rows for model in row["cells"]])
    cells, flags = [], []
    for row in rows:
        key = matrix_case_key(row)
        flags.append({"key": key, "classes": _row_classes(row)})
        for model, cell in row["cells"].items():
            cells.append(
                {"key": f"{key}|{model}", "html": _cell_html(key, model, cell, run.trials, base, priced=priced[model])}
            )
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


def cost_priced(run: Run, models: list[str]) -> dict[str, bool]:
    """Per model, whether a cost of zero means free (format_cost): a replay called no model, so its $0 is exact."""
    return {model: is_priced or run.mode == Run.Mode.REPLAY for model, is_priced in models_priced(models).items()}


# Per case over its k trials: ✓ all k passed (pass^k holds), ✗ one did not; — until all k have run.
PASS_K_MARKS = {"stable-pass": "✓", "stable-fail": "✗", "flaky": "✗", "": "—"}


def _cell(cell: dict[str, Any], trials: int, priced: bool = True) -> dict[str, Any]:
    if trials > 1:
        cell["css"], cell["label"] = _STABILITY.get(cell.get("stability", ""), _STABILITY[""])
        ran = [status for status in cell["trials"] if status != CaseResult.Status.CANCELLED]
        mark = PASS_K_MARKS.get(cell.get("stability", ""), "—")
        cell["detail"] = (
            f"{ran.count(CaseResult.Status.PASSED)}/{len(ran)} passed · pass^{trials} {mark} · "
            f"{format_cost(cell['trials_cost'], priced=priced)}"
        )
        if cell.get("median_duration_ms") is not None:
            # The median over the trials that ran, as the legend says.
            cell["detail"] += (
                f" · case {format_ms(cell['median_duration_ms'])} · model {format_ms(cell['median_latency_ms'])}"
            )
    else:
        cell["css"], cell["label"] = cell["status"], _STATUS_LABELS.get(cell["status"], cell["status"])
        cell["detail"] = f"case {format_ms(cell['duration_ms'])} · model {format_ms(cell['model_latency_ms'])}"
    return cell


def _row_classes(row: dict[str, Any], *, flipped: bool = False) -> str:
    flags = (("has-failure", row["any_failure"]), ("disagree", row["disagree"]), ("has-flip", flipped))
    return " ".join(name for name, on in flags if on)


_BASELINE_VERDICTS = {"passed": "it passed there", "failed": "it failed there", "error": "it errored there"}


def _flip_mark(flip: Flip, baseline_id: int) -> str:
    """A flipped cell's marker: words and an arrow, never colour alone; the rest of its label is for screen readers,
    which read it as part of the cell's link."""
    broke = flip.kind == BROKE
    there = _BASELINE_VERDICTS.get(flip.baseline_status, "")
    return (
        f'<span class="flip-mark flip-{html_escape(flip.kind)}"><span aria-hidden="true">{"▼" if broke else "▲"}'
        f'</span> {"Regressed" if broke else "Fixed"}<span class="visually-hidden"> since baseline #{baseline_id}'
        f'{": " + there if there else ""}</span></span>'
    )


def _cell_html(
    key: str,
    model: str,
    cell: dict[str, Any],
    trials: int,
    results_base: str,
    flipped: Flipped | None = None,
    priced: bool = True,
    anchor: str = "",
) -> str:
    cell = _cell(cell, trials, priced)
    reason = cell["reason"] if cell["status"] != CaseResult.Status.PASSED or trials > 1 else ""
    title = f' title="{html_escape(reason)}"' if reason else ""
    shown = f'<span class="cell-reason">{html_escape(short_reason(reason))}</span>' if reason else ""
    flip = flipped.by_cell.get((key, model)) if flipped else None
    mark = _flip_mark(flip, flipped.baseline_id) if flip and flipped else ""
    anchor_id = f' id="{anchor}"' if anchor else ""
    return (
        f'<td class="cell cell-{html_escape(cell["css"])}{" flipped" if flip else ""}" '
        f'data-cell="{html_escape(f"{key}|{model}")}">'
        f'<a href="{results_base}{cell["id"]}/"{anchor_id}{title}><span class="cell-head"><span class="cell-verdict">'
        f'{html_escape(cell["label"])}</span><small class="cell-times">{html_escape(cell["detail"])}</small></span>'
        f"{mark}{shown}</a></td>"
    )


_DRIFT_MARK = (
    ' <span class="mock-drift" title="A mock this case ran no longer answers what its real tool does '
    '(agenttest mocks verify): its verdict may rest on a stale mock. The result page shows what differs.">'
    '<span aria-hidden="true">⚠</span> mock drifted</span>'
)


def _matrix_rows_html(
    rows: list[dict[str, Any]],
    models: list[str],
    trials: int,
    results_base: str,
    *,
    live: bool = False,
    flipped: Flipped | None = None,
    run: Run | None = None,
    descriptions: Mapping[int, str] | None = None,
    drifted: Collection[int] = (),
) -> SafeString:
    """The matrix body. Built here rather than in the template: at 1,000 cases × 5 models the template engine spends
    most of the page's time on these cells, plain string building a tenth of it. Every value is escaped (the
    standard library's escape: Django's lazy-aware wrapper costs more than the escaping itself here). While the run
    is live a cell without a result is "not run yet", and the poller replaces it once its result lands. With
    `flipped`, a cell whose verdict flipped since the baseline carries a marker, and its row the class has-flip; a
    row of several models links to its case on every model, side by side. The first cell that failed or errored is the
    target of the page's skip link (FIRST_FAILURE); a row with a failure says what its case is for (`descriptions`),
    so a failure the suite shows on purpose reads as one. A case in `drifted` ran a mock that no longer answers what
    its real tool does (`agenttest mocks verify`): its verdict may rest on a stale mock, and its row says so."""
    missing = '<td class="cell cell-missing" title="no result">—</td>'
    priced = cost_priced(run, models) if run is not None and trials > 1 else {}
    lines = []
    anchored = live
    for row in rows:
        key = matrix_case_key(row)
        cells = []
        for model in models:
            cell = row["cells"].get(model)
            if cell is not None:
                anchor = ""
                if not anchored and cell_failed(cell):
                    anchor, anchored = FIRST_FAILURE, True
                cells.append(
                    _cell_html(key, model, cell, trials, results_base, flipped, priced.get(model, True), anchor)
                )
            elif live:
                cells.append(
                    f'<td class="cell cell-pending" data-cell="{html_escape(f"{key}|{model}")}">'
                    '<span class="cell-head"><span class="cell-verdict">Not run yet</span></span></td>'
                )
            else:
                cells.append(missing)
        has_flip = flipped is not None and any((key, model) in flipped.by_cell for model in row["cells"])
        side_by_side = ""
        if not live and len(row["cells"]) > 1:
            first = next(iter(row["cells"].values()))["id"]
            side_by_side = (
                f' <a class="row-models" href="{results_base}{first}/models/">'
                f'models side by side<span class="visually-hidden">: {html_escape(row["case_name"])}</span></a>'
            )
        description = (descriptions or {}).get(row["case_id"]) if row["any_failure"] else ""
        about = f'<span class="case-description">{html_escape(description)}</span>' if description else ""
        drift = _DRIFT_MARK if row["case_id"] in drifted else ""
        lines.append(
            f'<tr class="{_row_classes(row, flipped=has_flip)}" data-row="{html_escape(key)}"><th scope="row">'
            f'{html_escape(row["case_name"])}{drift}{side_by_side}{about}</th>{"".join(cells)}</tr>'
        )
    return mark_safe("\n".join(lines))


def results_base(run: Run) -> str:
    return reverse("runs:detail", kwargs={"run_id": run.pk}) + "results/"


def matrix_body(
    run: Run, models: list[str], results_base: str, flipped: Flipped | None = None, view: MatrixView | None = None,
    *, viewer: Any = None,
) -> tuple[SafeString, dict[str, int]]:
    """The matrix body as `view` asks (one model's column, rows sorted), and how many rows each filter shows (with
    `flipped`, how many case × model cells flipped). Two queries: the results, and what the failing rows' cases are
    for."""
    view = view or MatrixView()
    rows = run_matrix(run=run)
    if view.model:
        models = [view.model]
        rows = [_only_model(row, view.model) for row in rows]
    rows = matrix_sorted(rows, models, view.sort)
    counts = {
        "all": len(rows),
        "failures": sum(1 for row in rows if row["any_failure"]),
        "disagree": sum(1 for row in rows if row["disagree"]),
    }
    if flipped is not None:
        # Counted as the page's heading and its regressions and fixes count them, a case once per model it flipped
        # on: "4 flipped" beside "Flipped 3" read as two different sets.
        counts["flipped"] = sum(1 for _, model in flipped.by_cell if model in models)
    # Asked for every row's case, not only the failing ones': the page then runs the same queries whether or not
    # anything failed.
    cases = [row["case_id"] for row in rows if row["case_id"] is not None]
    # Said as `viewer` may read it: to a member, a case from production traces names no service, key or trace id.
    # The same query says which cases ran a mock found drifted since (as the case was when this run ran it).
    cases_shown = list(
        Case.objects.filter(pk__in=cases).select_related("source_conversation").only(
            "pk", "description", "source_conversation__source", "source_conversation__trace_service",
            "source_conversation__trace_key", "source_conversation__trace_ids",
        ).annotate(drifted=mock_drift_exists(case_hashes=CaseResult.objects.filter(run=run).values("case_hash")))
    ) if cases else []
    hiders = {case.pk: trace_hider(case, user=viewer) for case in cases_shown}
    descriptions = {case.pk: hiders[case.pk](case.description) for case in cases_shown if case.description}
    for row in rows:
        if row["case_id"] in hiders:
            row["case_name"] = hiders[row["case_id"]](row["case_name"])
    html = _matrix_rows_html(
        rows, models, run.trials, results_base, flipped=flipped, run=run, descriptions=descriptions,
        drifted={case.pk for case in cases_shown if case.drifted},
    )
    return html, counts


# --- What the matrix shows: one model's column, rows sorted; the same for the page and its CSV --------------------

# The id of the first failed or errored cell's link: the run page's skip link goes there.
FIRST_FAILURE = "first-failure"
MATRIX_SORTS = {"": "Case order", "duration": "Slowest first", "status": "Worst first"}
# Worst first: an error, then a failure, then what did not finish, then a pass.
_STATUS_RANK = {CaseResult.Status.ERROR: 0, CaseResult.Status.FAILED: 1, CaseResult.Status.CANCELLED: 2,
                CaseResult.Status.PASSED: 3}


class MatrixQueryError(ValueError):
    """A matrix parameter that names no model of the run or no sort: the page answers 400 naming it."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True)
class MatrixView:
    model: str = ""
    sort: str = ""


def _quoted(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:59] + "…")


def matrix_view(query: Mapping[str, str], models: list[str]) -> MatrixView:
    """The matrix's `model` (one of the run's models; empty: every model) and `sort` (MATRIX_SORTS) from a query
    string. A value that names nothing is refused rather than ignored: a link that filters by a model the run did not
    run would otherwise show the whole matrix as if it were that model's."""
    model = query.get("model", "")
    if model and model not in models:
        raise MatrixQueryError(
            "model", f"model: {_quoted(model)} is not a model of this run; its models are {', '.join(models)}."
        )
    sort = query.get("sort", "")
    if sort not in MATRIX_SORTS:
        raise MatrixQueryError(
            "sort", f"sort: {_quoted(sort)} is not a way to sort the matrix; use duration (slowest first) or "
            "status (worst first), or leave it out for the case order."
        )
    return MatrixView(model=model, sort=sort)


def cell_failed(cell: dict[str, Any]) -> bool:
    """Whether any of the cell's trials failed or errored."""
    return any(status in (CaseResult.Status.FAILED, CaseResult.Status.ERROR) for status in cell.get("trials") or
               [cell["status"]])


def _only_model(row: dict[str, Any], model: str) -> dict[str, Any]:
    cells = {key: cell for key, cell in row["cells"].items() if key == model}
    return {**row, "cells": cells, "any_failure": any(cell_failed(cell) for cell in cells.values()),
            "disagree": False}


def _cell_duration(cell: dict[str, Any]) -> float | None:
    # With several trials the cell shows the median over those that ran; a trial row of the CSV has its own.
    return cell["median_duration_ms"] if "median_duration_ms" in cell else cell["duration_ms"]


def _cell_rank(cell: dict[str, Any]) -> tuple[int, int]:
    statuses = cell.get("trials") or [cell["status"]]
    worst = min(_STATUS_RANK.get(status, len(_STATUS_RANK)) for status in statuses)
    return worst, statuses.count(CaseResult.Status.PASSED)


def matrix_sorted(rows: list[dict[str, Any]], models: list[str], sort: str) -> list[dict[str, Any]]:
    """Rows in case order, or slowest first (by the row's slowest shown cell), or worst first (by its worst shown
    cell; among equals, fewer passed trials first); ties keep the case order."""
    if sort == "duration":
        def slowest(row: dict[str, Any]) -> float:
            times = [_cell_duration(cell) for model, cell in row["cells"].items() if model in models]
            return -max((time for time in times if time is not None), default=-1.0)

        return sorted(rows, key=slowest)
    if sort == "status":
        def worst(row: dict[str, Any]) -> tuple[int, int]:
            ranks = [_cell_rank(cell) for model, cell in row["cells"].items() if model in models]
            return min(ranks, default=(len(_STATUS_RANK) + 1, 0))

        return sorted(rows, key=worst)
    return rows


def live_matrix(run: Run) -> dict[str, Any]:
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
        "rows": _matrix_rows_html(ordered, list(run.model_keys), run.trials, html_escape(results_base(run)),
                                  live=True, run=run),
        "last_result": last,
        "case_time_title": CASE_TIME_TITLE,
    }
