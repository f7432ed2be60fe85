"""`agenttest run`'s throw-away database (common/scratch_database.py): migrated for real once per set of migrations,
then copied from the kept result, complete — and never copied over a database that is not that throw-away one."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

# One process as `agenttest run` sets its database up: settings, then database_migrate; it prints whether Django's
# migrate ran (its pre_migrate signal) and what the database holds.
SETUP = textwrap.dedent("""
    import json
    import django
    django.setup()
    from django.db import connection
    from django.db.models.signals import pre_migrate
    migrated = []
    pre_migrate.connect(lambda **kwargs: migrated.append(kwargs["app_config"].label), weak=False)
    from common.scratch_database import database_migrate
    database_migrate()
    with connection.cursor() as cursor:
        tables = sorted(connection.introspection.table_names(cursor))
        cursor.execute("SELECT app, name FROM django_migrations ORDER BY app, name")
        applied = [list(row) for row in cursor.fetchall()]
        cursor.execute("SELECT app_label, model FROM django_content_type ORDER BY app_label, model")
        types = [list(row) for row in cursor.fetchall()]
        cursor.execute("SELECT count(*) FROM auth_permission")
        permissions = cursor.fetchone()[0]
    print(json.dumps({"migrated": bool(migrated), "tables": tables, "applied": applied, "content_types": types,
                      "permissions": permissions}))
""")

PLUGIN_FILES = {
    "acme_ledger/__init__.py": "",
    "acme_ledger/registration.py": "",
    "acme_ledger/apps.py": (
        "from django.apps import AppConfig\n\n\nclass AcmeLedgerConfig(AppConfig):\n"
        "    name = 'acme_ledger'\n    default_auto_field = 'django.db.models.BigAutoField'\n"
    ),
    "acme_ledger/models.py": (
        "from django.db import models\n\n\nclass Entry(models.Model):\n    text = models.TextField()\n"
    ),
    "acme_ledger/migrations/__init__.py": "",
    "acme_ledger/migrations/0001_initial.py": textwrap.dedent("""
        from django.db import migrations, models


        class Migration(migrations.Migration):
            initial = True
            dependencies = []
            operations = [
                migrations.CreateModel(
                    name="Entry",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False)),
                        ("text", models.TextField()),
                    ],
                ),
            ]
    """),
}

AMOUNT_FIELD = "    amount = models.IntegerField(default=0)\n"
SECOND_MIGRATION = textwrap.dedent("""
    from django.db import migrations, models


    class Migration(migrations.Migration):
        dependencies = [("acme_ledger", "0001_initial")]
        operations = [migrations.AddField("entry", "amount", models.IntegerField(default=0))]
""")


def _set_up(tmp_path: Path, name: str, *, scratch: bool = True, plugin: Path | None = None) -> dict:
    database = tmp_path / f"{name}.sqlite3"
    env = {
        key: value for key, value in os.environ.items()
        if not key.startswith(("AGENTTEST_", "DATABASE_URL", "DJANGO_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="agenttest.settings", AGENTTEST_DEBUG="1", AGENTTEST_DEMO="1",
        AGENTTEST_VAR_DIR=str(tmp_path / f"var-{name}"), DATABASE_URL=f"sqlite:///{database}",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(BASE_DIR), str(plugin or "")])),
    )
    if scratch:
        env["AGENTTEST_SCRATCH_DATABASE"] = str(database)
    if plugin:
        env["AGENTTEST_PLUGINS"] = "acme_ledger.registration"
    done = subprocess.run([sys.executable, "-c", SETUP], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _kept(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "agenttest").glob("scratch-*.sqlite3"))


def _contents(state: dict) -> dict:
    return {key: value for key, value in state.items() if key != "migrated"}


def test_it_migrates_the_first_throw_away_database_and_copies_it_whole_for_the_next(tmp_path):
    first = _set_up(tmp_path, "first")
    second = _set_up(tmp_path, "second")

    assert first["migrated"] is True
    assert second["migrated"] is False
    # The copy holds what migrating gives: every table, every migration recorded, the content types and permissions.
    assert _contents(second) == _contents(first)
    assert {"agenthost_agent", "runs_run", "cases_case", "agenttest_cache"} <= set(first["tables"])
    assert ["runs", "0001_initial"] in first["applied"]
    assert ["agenthost", "agent"] in first["content_types"] and first["permissions"] > 0
    assert len(_kept(tmp_path)) == 1


def test_it_migrates_again_for_a_plugin_app_with_migrations_of_its_own(tmp_path):
    plugin = tmp_path / "plugin"
    for name, text in PLUGIN_FILES.items():
        (plugin / name).parent.mkdir(parents=True, exist_ok=True)
        (plugin / name).write_text(text)
    plain = _set_up(tmp_path, "plain")

    with_app = _set_up(tmp_path, "with-app", plugin=plugin)
    again = _set_up(tmp_path, "again", plugin=plugin)

    assert plain["migrated"] is True
    assert with_app["migrated"] is True
    assert "acme_ledger_entry" in with_app["tables"] and "acme_ledger_entry" not in plain["tables"]
    assert again["migrated"] is False
    assert _contents(again) == _contents(with_app)
    assert len(_kept(tmp_path)) == 2

    # The app's next version brings a migration: its first run migrates, and the database has it.
    (plugin / "acme_ledger" / "migrations" / "0002_entry_amount.py").write_text(SECOND_MIGRATION)
    (plugin / "acme_ledger" / "models.py").write_text(PLUGIN_FILES["acme_ledger/models.py"] + AMOUNT_FIELD)
    upgraded = _set_up(tmp_path, "upgraded", plugin=plugin)

    assert upgraded["migrated"] is True
    assert ["acme_ledger", "0002_entry_amount"] in upgraded["applied"]
    assert len(_kept(tmp_path)) == 3


def test_it_migrates_when_the_kept_copy_is_no_database_and_keeps_a_good_one(tmp_path):
    good = _set_up(tmp_path, "good")
    (kept,) = _kept(tmp_path)
    kept.write_bytes(b"not a database at all" * 100)

    mended = _set_up(tmp_path, "mended")
    after = _set_up(tmp_path, "after")

    assert mended["migrated"] is True
    assert _contents(mended) == _contents(good)
    assert after["migrated"] is False
    assert _contents(after) == _contents(good)


def test_it_never_copies_over_a_database_that_is_not_the_runs_empty_throw_away_one(tmp_path):
    _set_up(tmp_path, "warm")
    # Another database than the run's own: migrated in place, nothing kept from it.
    other = _set_up(tmp_path, "other", scratch=False)
    assert other["migrated"] is True
    # The run's database with something in it already: migrated in place, what it held stays.
    held = tmp_path / "held.sqlite3"
    with sqlite3.connect(held) as connection:
        connection.execute("CREATE TABLE team_notes (text TEXT)")
        connection.execute("INSERT INTO team_notes VALUES ('keep me')")
    state = _set_up(tmp_path, "held")

    assert state["migrated"] is True
    assert "team_notes" in state["tables"]
    with sqlite3.connect(held) as connection:
        assert connection.execute("SELECT text FROM team_notes").fetchall() == [("keep me",)]
    assert len(_kept(tmp_path)) == 1


def test_it_migrates_every_time_when_no_cache_directory_can_be_written(tmp_path):
    (tmp_path / "cache").write_text("a file where the cache directory would be")

    first = _set_up(tmp_path, "first")
    second = _set_up(tmp_path, "second")

    assert first["migrated"] is True and second["migrated"] is True
    assert _contents(first) == _contents(second)
