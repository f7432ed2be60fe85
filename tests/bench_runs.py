"""The overhead benches as their smoke tests run them: a script of bench/ in a process of its own, making its scratch
database on the PostgreSQL server DATABASE_URL names (so the PostgreSQL pass covers that path too), else SQLite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def bench_report(script: str, *args: str) -> str:
    """What `bench/<script> <args>` printed; the test fails, quoting both streams, when it exits with an error."""
    command = [sys.executable, f"bench/{script}", *args]
    database_url = os.environ.get("DATABASE_URL", "")
    if database_url.startswith(("postgres://", "postgresql://")):
        command += ["--database-url", database_url]
    done = subprocess.run(command, cwd=BASE_DIR, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


def report_figure(output: str, label: str) -> float:
    """The number on the report's line that starts with `label`."""
    match = re.search(rf"^{re.escape(label)}\s+(-?[\d.]+)", output, re.MULTILINE)
    assert match, f"{label!r} is missing from the report:\n{output}"
    return float(match.group(1))
