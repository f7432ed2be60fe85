"""Charts drawn on the server as inline SVG: no chart library, nothing fetched, readable without JavaScript.

One chart compares the models of a run: a row per model, its pass-rate bar on the left and its model latency (p50 bar,
p95 whisker) on the right, so each model reads across and the models compare down.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from common.durations import format_ms
from runs.engine.numbers import format_pass_rate
from runs.selectors import ModelSummary

_LABEL_WIDTH = 210
_PANEL_WIDTH = 220
_RATE_X = _LABEL_WIDTH
_LATENCY_X = _RATE_X + _PANEL_WIDTH + 70
_WIDTH = _LATENCY_X + _PANEL_WIDTH + 130
_ROW_HEIGHT = 34
_BAR_HEIGHT = 18
_TOP = 30
_BOTTOM = 26
_LABEL_CHARS = 30


def pass_rate_band(rate: float | None) -> str:
    """A colour band a person reads at a glance: good, mixed or bad; none when nothing ran."""
    if rate is None:
        return "none"
    if rate >= 0.85:
        return "good"
    if rate >= 0.5:
        return "mixed"
    return "bad"


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 × 10^n at or above `value`, so the axis ends on a round number."""
    if value <= 0:
        return 1.0
    magnitude = 1.0
    while magnitude * 10 <= value:
        magnitude *= 10
    while magnitude > value:
        magnitude /= 10
    return next(step * magnitude for step in (1, 2, 5, 10) if step * magnitude >= value)


def _n(value: float) -> str:
    return f"{value:.1f}"


def _short(label: str) -> str:
    # Keys share their provider prefix; the end of a long key is the part that tells models apart.
    return label if len(label) <= _LABEL_CHARS else "…" + label[-(_LABEL_CHARS - 1):]


def model_chart(summaries: Sequence[ModelSummary]) -> SafeString:
    """Pass rate and model latency per model as one inline SVG; empty when there is no model."""
    if not summaries:
        return mark_safe("")
    bottom = _TOP + _ROW_HEIGHT * len(summaries)
    scale = _nice_ceiling(max((s.latency_p95_ms or s.latency_p50_ms or 0.0) for s in summaries))
    parts = [
        format_html(
            '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-labelledby="chart-title chart-desc" '
            'xmlns="http://www.w3.org/2000/svg">',
            _WIDTH,
            bottom + _BOTTOM,
        ),
        mark_safe('<title id="chart-title">Pass rate and model latency per model</title>'),
        format_html('<desc id="chart-desc">{}</desc>', "; ".join(_describe(s) for s in summaries)),
        format_html('<text class="chart-heading" x="{}" y="16">Pass rate</text>', _RATE_X),
        format_html('<text class="chart-heading" x="{}" y="16">Model latency: p50 bar, p95 whisker</text>', _LATENCY_X),
    ]
    for fraction in (0, 0.5, 1):
        for x, label in (
            (_RATE_X + fraction * _PANEL_WIDTH, f"{fraction * 100:.0f}%"),
            (_LATENCY_X + fraction * _PANEL_WIDTH, format_ms(fraction * scale) if fraction else "0"),
        ):
            parts.append(
                format_html(
                    '<line class="chart-grid" x1="{}" y1="{}" x2="{}" y2="{}"/>'
                    '<text class="chart-axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                    x, _TOP - 4, x, bottom, x, bottom + 16, label,
                )
            )
    for index, summary in enumerate(summaries):
        parts.append(_row(summary, _TOP + index * _ROW_HEIGHT, scale))
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(str(part) for part in parts))


def _describe(summary: ModelSummary) -> str:
    return (
        f"{summary.model}: pass rate {format_pass_rate(summary.pass_rate)} ({summary.passed} passed, "
        f"{summary.failed} failed, {summary.errored} error, {summary.cancelled} cancelled); model latency p50 "
        f"{format_ms(summary.latency_p50_ms)}, p95 {format_ms(summary.latency_p95_ms)}"
    )


def _row(summary: ModelSummary, top: int, scale: float) -> SafeString:
    middle = top + _ROW_HEIGHT / 2
    bar_top = middle - _BAR_HEIGHT / 2
    rate_width = (summary.pass_rate or 0) * _PANEL_WIDTH
    parts = [
        format_html('<g class="chart-row"><title>{}</title>', _describe(summary)),
        format_html(
            '<text class="chart-label" x="{}" y="{}" text-anchor="end">{}</text>',
            _RATE_X - 10, middle + 4, _short(summary.model),
        ),
        format_html(
            '<rect class="chart-track" x="{}" y="{}" width="{}" height="{}" rx="3"/>'
            '<rect class="chart-bar rate-{}" x="{}" y="{}" width="{}" height="{}" rx="3"/>'
            '<text class="chart-value" x="{}" y="{}">{}</text>',
            _RATE_X, bar_top, _PANEL_WIDTH, _BAR_HEIGHT,
            pass_rate_band(summary.pass_rate), _RATE_X, bar_top, _n(rate_width), _BAR_HEIGHT,
            _RATE_X + _PANEL_WIDTH + 8, middle + 4, format_pass_rate(summary.pass_rate),
        ),
    ]
    p50, p95 = summary.latency_p50_ms, summary.latency_p95_ms
    if p50 is None:
        parts.append(format_html('<text class="chart-value" x="{}" y="{}">no result</text>', _LATENCY_X, middle + 4))
    else:
        p50_end = _LATENCY_X + p50 / scale * _PANEL_WIDTH
        p95_end = _LATENCY_X + max(p50, p95 or p50) / scale * _PANEL_WIDTH
        parts.append(
            format_html(
                '<rect class="chart-bar latency" x="{}" y="{}" width="{}" height="{}" rx="3"/>',
                _LATENCY_X, bar_top, _n(p50_end - _LATENCY_X), _BAR_HEIGHT,
            )
        )
        if p95_end > p50_end:
            parts.append(
                format_html(
                    '<path class="chart-whisker" d="M{} {} H{} M{} {} V{}"/>',
                    _n(p50_end), middle, _n(p95_end), _n(p95_end), bar_top + 3, bar_top + _BAR_HEIGHT - 3,
                )
            )
        parts.append(
            format_html(
                '<text class="chart-value" x="{}" y="{}">{} · {}</text>',
                _n(p95_end + 8), middle + 4, format_ms(p50), format_ms(p95),
            )
        )
    parts.append(mark_safe("</g>"))
    return mark_safe("".join(str(part) for part in parts))
