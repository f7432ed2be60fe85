"""A duration in milliseconds as a page shows it: the run pages' figures and a transcript's model latency alike."""

from __future__ import annotations


def format_ms(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1000:
        return f"{value / 1000:.1f} s"
    if value >= 10:
        return f"{value:.0f} ms"
    return f"{value:.1f} ms"
