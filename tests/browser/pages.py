"""What the browser tests check on many pages and wait for: the two widths, nothing overflowing sideways, a run page
reaching its end (with the worker's log when it does not), the users the tests sign in as."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

from playwright.sync_api import Page, expect

ADMIN = ("root", "root-password-123")
MEMBER = ("mia", "mia-password-123")
WIDTHS = (1366, 800)  # a laptop, and a narrow window
# Only a guard against a hang: a run ends as soon as its worker is done.
RUN_TIMEOUT_MS = 120_000


def assert_fits(page: Page, what: str) -> None:
    """No horizontal overflow: the document is no wider than the window, and no model key is cut."""
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"{what} overflows at {width[1]} px: {width[0]} px wide"
    cut = page.evaluate("""() => [...document.querySelectorAll('.rate-model, code.model-key')]
        .filter(el => el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().right > innerWidth)
        .map(el => el.textContent)""")
    assert not cut, f"{what}: model names cut or off-screen at {width[1]} px: {cut}"


def worker_log(tmp_path: Path) -> str:
    path = tmp_path / "worker.log"
    return path.read_text(errors="replace")[-4000:] if path.exists() else "(no worker log)"


def wait_until_finished(page: Page, tmp_path: Path) -> None:
    try:
        expect(page.locator('#run-body[data-live="0"]')).to_be_attached(timeout=RUN_TIMEOUT_MS)
    except AssertionError as exc:
        raise AssertionError(f"the run page did not reach the end\n{worker_log(tmp_path)}") from exc


def queued_runs(broker: Path) -> list[int]:
    """The run ids of the execute_run messages waiting in an embedded (SQLite) broker."""
    with sqlite3.connect(broker) as db:
        payloads = [json.loads(row[0]) for row in db.execute("SELECT payload FROM kombu_message WHERE visible")]
    return [
        json.loads(base64.b64decode(payload["body"]))[0][0]
        for payload in payloads
        if payload["headers"]["task"] == "runs.tasks.execute_run"
    ]
