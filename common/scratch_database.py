"""The throw-away SQLite database of `agenttest run DIR`, migrated in milliseconds instead of seconds.

`agenttest run` starts on an empty database every time (agenttest/cli.py): the files are the source. Applying every
migration to it took 1.2–2 CPU seconds per command, most of it Django rendering the migration states, the same work
for every run of the same install. The first run on a set of migrations keeps a copy of the database it migrated in
the user's cache directory; every later run copies that file instead. The copy is keyed by what decides the migrated
database's contents — the migration files of every installed app, the models (their content types and permissions,
which `migrate` writes too), Django's and SQLite's versions — so an upgrade, a plugin's app or a new migration gets a
database of its own, migrated for real once. Where no cache directory can be written, every run migrates.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sqlite3
import tempfile
from pathlib import Path

import django
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.migrations.loader import MigrationLoader

# Set by the `agenttest run` command line to the path of its throw-away database; nothing else sets it.
SCRATCH_DATABASE_VARIABLE = "AGENTTEST_SCRATCH_DATABASE"
# Copies of migrated databases kept, the most recently used first: one per install a user runs from.
KEPT_COPIES = 5
_PREFIX, _SUFFIX = "scratch-", ".sqlite3"


def database_migrate() -> None:
    """Bring the default database up to the migrations: copied from a kept copy when it is `agenttest run`'s
    throw-away database and still empty, migrated otherwise (and then kept, for the next run)."""
    target = _scratch_target()
    cache = _cache_directory() if target else None
    if target is None or cache is None:
        call_command("migrate", verbosity=0, interactive=False)
        return
    kept = cache / f"{_PREFIX}{_migrations_key()}{_SUFFIX}"
    connections["default"].close()
    if kept.is_file():
        try:
            _copy(kept, target)
            os.utime(kept)
            return
        except (OSError, sqlite3.Error):
            # Half a copy would be half a schema: the run migrates a new file instead.
            _remove(target)
    call_command("migrate", verbosity=0, interactive=False)
    connections["default"].close()
    with contextlib.suppress(OSError, sqlite3.Error):
        _keep(target, kept)
        _prune(cache)


def _scratch_target() -> Path | None:
    """The throw-away database's file, when the default database is it and nothing is in it yet."""
    named = os.environ.get(SCRATCH_DATABASE_VARIABLE)
    database = settings.DATABASES["default"]
    if not named or database["ENGINE"] != "django.db.backends.sqlite3" or Path(database["NAME"]) != Path(named):
        return None
    path = Path(named)
    # A connection opened before this (a system check) may have created the file, empty.
    return path if not path.exists() or path.stat().st_size == 0 else None


def _cache_directory() -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = Path(base) / "agenttest"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return directory if os.access(directory, os.W_OK) else None


def _migrations_key() -> str:
    digest = hashlib.sha256(f"django {django.__version__} sqlite {sqlite3.sqlite_version}".encode())
    for config in sorted(apps.get_app_configs(), key=lambda config: config.label):
        module, _ = MigrationLoader.migrations_module(config.label)
        digest.update(f"\napp {config.label} {module}".encode())
        for path in _module_files(module):
            digest.update(f"\n{path.name}\n".encode() + path.read_bytes())
        for model in sorted(config.get_models(), key=lambda model: model._meta.label_lower):
            options = model._meta
            digest.update(f"\nmodel {options.label_lower} {options.verbose_name} {options.default_permissions} "
                          f"{options.permissions}".encode())
    return digest.hexdigest()[:32]


def _module_files(module: str | None) -> list[Path]:
    if not module:
        return []
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return []
    locations = list(spec.submodule_search_locations or []) if spec else []
    return sorted(path for location in locations for path in Path(location).glob("*.py"))


def _copy(source: Path, target: Path) -> None:
    """`source` copied to `target` with SQLite's backup API, whole and consistent, however it is being read."""
    with contextlib.closing(sqlite3.connect(source)) as read, contextlib.closing(sqlite3.connect(target)) as write:
        read.backup(write)


def _keep(migrated: Path, kept: Path) -> None:
    # Written beside the kept copy and renamed over it, so a run copying it at the same time reads a whole file.
    handle, scratch = tempfile.mkstemp(dir=kept.parent, prefix=".writing-", suffix=_SUFFIX)
    os.close(handle)
    try:
        _copy(migrated, Path(scratch))
        os.replace(scratch, kept)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(scratch)


def _remove(database: Path) -> None:
    for path in (database, database.with_name(database.name + "-wal"), database.with_name(database.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _prune(cache: Path) -> None:
    copies = sorted(cache.glob(f"{_PREFIX}*{_SUFFIX}"), key=lambda path: path.stat().st_mtime, reverse=True)
    for stale in copies[KEPT_COPIES:]:
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
