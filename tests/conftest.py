"""Fixtures shared by every test: users with their API clients, `talk` (a conversation played through the
conversation service as a user would) and the model fixtures (`scripted_model`, `openai_stub`) from
agenthost.testing.fixtures; which tests a process collects with the demo on or off."""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import global_settings, settings
from django.db import connections, transaction
from django.test import TransactionTestCase
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from agenthost.models import Agent, Conversation
from agenthost.services import conversation_send, conversation_start
from tests.workers import WAIT_SECONDS

pytest_plugins = ["agenthost.testing.fixtures"]

# Hypothesis's per-example deadline and its "input generation is slow" check judge the machine's speed, not the
# product's behaviour: off for the whole suite (issue 40), so a loaded or slow machine gives the same verdicts.
hypothesis_settings.register_profile("agenttest", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("agenttest")

# The product's tests hold with the demo plugin off, on the host's own scripted model and functions of their own, so a
# demo regression cannot mask a product one (issue 34). tests/demo/ holds the demo's own tests: collected only with the
# demo on (AGENTTEST_DEMO=1), which scripts/test gives a process of their own (AGENTTEST_TEST_DEMO_PASS=1, which
# collects nothing else).
DEMO_TESTS = Path(__file__).resolve().parent / "demo"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    in_demo = collection_path == DEMO_TESTS or DEMO_TESTS in collection_path.parents
    if in_demo and not settings.AGENTTEST_DEMO:
        return True
    if os.environ.get("AGENTTEST_TEST_DEMO_PASS") and not in_demo and collection_path not in DEMO_TESTS.parents:
        return True
    return None


def pytest_report_header(config: pytest.Config) -> str:
    if settings.AGENTTEST_DEMO:
        return "the demo plugin is on (AGENTTEST_DEMO=1): tests/demo/ is collected"
    return "the demo plugin is off: tests/demo/ is not collected (AGENTTEST_DEMO=1 collects it, as scripts/test does)"


# The rows every migrated database holds from the start: kept between tests, so no test has to make them again.
_MIGRATED_ROWS = frozenset({"django_migrations", "django_content_type", "auth_permission"})


def _empty_every_table(self: TransactionTestCase) -> None:
    """What a transactional test leaves is deleted, row by row, in one transaction per database.

    Django's own teardown (`flush`) truncates every table and then re-creates the content types and permissions
    (post_migrate): on PostgreSQL a TRUNCATE of ~50 tables took 0.6–1 s of wall time and 75 ms of the server's CPU
    here, against 8 ms and 3 ms for DELETE on the few rows a test writes, and post_migrate 20–30 ms of the test
    process's CPU on either engine — for each of the ~900 transactional tests of a pass (issue 40). The end state is
    flush's: no row a test wrote, the content types and permissions of the migrations."""
    for db_name in self._databases_names(include_mirrors=False):
        connection = connections[db_name]
        tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
        with transaction.atomic(using=db_name), connection.cursor() as cursor:
            # Foreign keys are deferred (Django makes them so): checked once, at the commit, when every table is empty.
            if connection.vendor == "postgresql":
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")
            for table in sorted(set(tables) - _MIGRATED_ROWS):
                cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")


TransactionTestCase._fixture_teardown = _empty_every_table  # type: ignore[method-assign]

# Every database fixture of pytest-django asks for this one; the live server holds the database open for its thread.
_DATABASE_FIXTURES = frozenset({"_django_db_helper", "live_server"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test of the installed wheel never touches the database under test: scripts/test runs it in one pass only.
    # A test that asks for no database under test gives the same answer on either: scripts/test runs it once.
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if {"package_env", "package_wheel"} & set(fixtures):
            item.add_marker(pytest.mark.installed)
        if item.get_closest_marker("django_db") is None and not _DATABASE_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.own_database)
        elif _engine_neutral(item):
            item.add_marker(pytest.mark.production_engine)
    # A test of what only a database server can show (a clock of its own, apart from the executors'), or a long fuzz
    # whose answers do not hang on the engine, belongs to the PostgreSQL pass (production's engine); a test of the
    # embedded default (the demo on SQLite and its file broker) to the SQLite pass. On the other pass it is deselected
    # — not run and not counted — rather than skipped: the suite runs on both and each such test runs once.
    sqlite = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")
    elsewhere = ("database_server", "production_engine") if sqlite else ("embedded_default",)
    kept = [item for item in items if not any(item.get_closest_marker(name) for name in elsewhere)]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


# The team's code and MCP servers, each in processes of its own: what these tests show is what that code did and what
# the seam made of it, and they store it through the same services every other test runs on both engines. Not the
# files that check what is stored from input (an agent's fields, MCP servers' files): those answers hang on the engine.
# A test of them that asks for no database stays own_database, which the SQLite pass runs.
_ENGINE_NEUTRAL_FOLDERS = ("tests/runtimes/", "tests/mcp/")
_STORED_FROM_INPUT = ("tests/runtimes/test_runtime_fields.py", "tests/runtimes/test_process_fields_bad_input.py",
                      "tests/mcp/test_config.py")


def _engine_neutral(item: pytest.Item) -> bool:
    path = item.nodeid.split("::", 1)[0]
    return path.startswith(_ENGINE_NEUTRAL_FOLDERS) and path not in _STORED_FROM_INPUT


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# CPU seconds of each test (this process and the subprocesses it waited for): the summary sums them per file, where a
# pass's time goes; AGENTTEST_TEST_CPU_REPORT names a directory each process writes them to, to see which tests a pass
# could do without (bench/suite_cpu.py sums them up).
_CPU_BY_TEST: dict[str, float] = {}
CPU_FILES_SHOWN = 12


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    before = _cpu_seconds()
    try:
        return (yield)
    finally:
        _CPU_BY_TEST[item.nodeid] = _cpu_seconds() - before


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # The suite's processes run side by side on a few cores, so their wall times say little about what each costs:
    # the CPU seconds do (scripts/test prints the last line in its summary). Subprocesses count once they are waited
    # for; a session's shared fixtures count in the first test that asked for them.
    by_file: dict[str, list[float]] = {}
    for nodeid, seconds in _CPU_BY_TEST.items():
        spent = by_file.setdefault(nodeid.split("::", 1)[0], [0.0, 0])
        spent[0] += seconds
        spent[1] += 1
    costly = sorted(by_file.items(), key=lambda entry: -entry[1][0])[:CPU_FILES_SHOWN]
    if costly:
        terminalreporter.write_line(f"the {len(costly)} test files that took the most CPU seconds in this process:")
        for path, (seconds, tests) in costly:
            terminalreporter.write_line(f"  {seconds:7.1f} s  {tests:4d} tests  {path}")
    report = os.environ.get("AGENTTEST_TEST_CPU_REPORT")
    if report and _CPU_BY_TEST:
        engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        Path(report).mkdir(parents=True, exist_ok=True)
        (Path(report) / f"{engine}-{os.getpid()}.json").write_text(json.dumps(_CPU_BY_TEST, indent=0))
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    terminalreporter.write_line(
        f"cpu: {own.ru_utime + own.ru_stime:.0f} s in pytest, {children.ru_utime + children.ru_stime:.0f} s in the"
        " subprocesses it waited for"
    )


@pytest.fixture(autouse=True)
def _plain_static_storage(settings: Any) -> None:
    # Production serves hashed files from `collectstatic`'s manifest; tests render pages without running it.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings: Any) -> None:
    # PBKDF2's million iterations cost a quarter of a CPU second per user, and most tests make one to three: MD5 in
    # the test process only (Django's own advice for tests). PBKDF2 stays listed, so a password set by a command the
    # tests run (the demo's set-up) still checks; servers and workers started as subprocesses keep the defaults.
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.MD5PasswordHasher", *global_settings.PASSWORD_HASHERS,
    ]


@pytest.fixture(autouse=True)
def _patient_broker(settings: Any) -> None:
    # The embedded broker is a SQLite file the suite's workers poll too: on a machine pinned to one core a lock on it
    # outlasted the 3 s a deployment waits by default, and a browser test's run was refused as "queue unavailable".
    settings.CELERY_BROKER_CONNECTION_TIMEOUT = WAIT_SECONDS


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "root-password-123")


@pytest.fixture
def member(django_user_model):
    return django_user_model.objects.create_user("mia", "mia@example.com", "mia-password-123")


@pytest.fixture
def outsider(django_user_model):
    return django_user_model.objects.create_user("otto", "otto@example.com", "otto-password-123")


@pytest.fixture
def api_client():
    return APIClient()


def _signed_in(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def admin_client_api(admin_user):
    return _signed_in(admin_user)


@pytest.fixture
def member_client(member):
    return _signed_in(member)


@pytest.fixture
def outsider_client(outsider):
    return _signed_in(outsider)


@pytest.fixture
def talk() -> Callable[..., Conversation]:
    """talk(agent, *user_messages, initial_state=..., history=..., owner=..., title=...) → the conversation."""

    def talk(agent: Agent, *messages: str, **start: Any) -> Conversation:
        conversation = conversation_start(agent=agent, **start)
        for text in messages:
            conversation_send(conversation=conversation, text=text)
        conversation.refresh_from_db()
        return conversation

    return talk
