"""Plugins load once at start-up — in every command, the web process and the worker — from AGENTTEST_PLUGINS and
from installed `agenttest.plugins` entry points; one that fails stops start-up naming it and the error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agenthost.functions import get_function
from agenttest.plugin_loading import plugins_load
from tests.plugins import callable_plugin
from tests.plugins.conftest import PROVIDERS_FILE
from tests.workers import WAIT_SECONDS

BASE_DIR = Path(__file__).resolve().parent.parent.parent
NO_ISSUES = "System check identified no issues"


@pytest.fixture
def _fresh_throttle_history() -> None:
    """The package's autouse fixture, without its database: these tests start agenttest in processes of their own, on
    databases of their own, so they give the same answers on either pass and run once (own_database)."""


def distribution(site: Path, entry_points: str) -> Path:
    """An installed distribution `acme-tickets` 1.0 with these `agenttest.plugins` entry points, as pip leaves it."""
    info = site / "acme_tickets-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-tickets\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[agenttest.plugins]\n{entry_points}\n")
    return site


def start(tmp_path: Path, *args: str, plugins: str = "", site: Path | None = None, providers: bool = True):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AGENTTEST_", "DATABASE_URL"))}
    env.update(
        AGENTTEST_DEBUG="1", AGENTTEST_VAR_DIR=str(tmp_path / "var"), DJANGO_SETTINGS_MODULE="agenttest.settings",
    )
    if plugins:
        env["AGENTTEST_PLUGINS"] = plugins
    if providers:
        providers_file = tmp_path / "providers.toml"
        providers_file.write_text(PROVIDERS_FILE)
        env["AGENTTEST_PROVIDERS_FILE"] = str(providers_file)
    env["PYTHONPATH"] = os.pathsep.join(str(path) for path in (site, BASE_DIR) if path)
    return subprocess.run(
        [sys.executable, *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=WAIT_SECONDS
    )


@pytest.mark.parametrize("how", ["AGENTTEST_PLUGINS", "entry point"])
def test_it_loads_a_plugin_at_start_up_so_its_provider_kind_passes_the_checks(tmp_path, how):
    if how == "AGENTTEST_PLUGINS":
        result = start(tmp_path, "manage.py", "check", plugins="tests.plugins.sample_plugin")
    else:
        site = distribution(tmp_path / "site", "tickets = tests.plugins.sample_plugin")
        result = start(tmp_path, "manage.py", "check", site=site)

    assert result.returncode == 0, result.stderr
    assert NO_ISSUES in result.stdout


def test_it_reports_a_providers_file_kind_that_no_plugin_registered(tmp_path):
    result = start(tmp_path, "manage.py", "check")

    assert result.returncode != 0
    assert (
        "(agenttest.E001) model providers: provider 'rules': field 'kind' must be one of openai, scripted, got "
        "'sample-rules'"
    ) in result.stderr


def test_it_loads_plugins_in_the_web_process(tmp_path):
    script = (
        "from agenttest.wsgi import application\n"
        "from agenthost.functions import get_function\n"
        "print(get_function('ticket_lookup').effect_free, get_function('ticket_send_note').effect_free)\n"
    )

    result = start(tmp_path, "-c", script, plugins="tests.plugins.sample_plugin")

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]


@pytest.mark.parametrize(
    ("plugin", "error"),
    [
        ("tests.plugins.nowhere", "ModuleNotFoundError: No module named 'tests.plugins.nowhere'"),
        ("tests.plugins.broken_plugin", "RuntimeError: the ticket system's URL is not configured"),
        # The host's built-ins are registered before any plugin loads, so the clash names the plugin.
        (
            "tests.plugins.clashing_plugin",
            "ValueError: function 'route_to_agent' is already registered by agenthost.builtins.control",
        ),
    ],
)
def test_it_stops_start_up_naming_a_plugin_that_fails(tmp_path, plugin, error):
    result = start(tmp_path, "manage.py", "check", plugins=f"tests.plugins.sample_plugin,{plugin}", providers=False)

    assert result.returncode != 0
    assert NO_ISSUES not in result.stdout
    assert (
        f"django.core.exceptions.ImproperlyConfigured: agenttest plugin {plugin!r} (named in AGENTTEST_PLUGINS) failed "
        f"to load: {error}"
    ) in result.stderr


def test_it_stops_start_up_naming_the_entry_point_and_its_distribution(tmp_path):
    site = distribution(tmp_path / "site", "tickets = tests.plugins.broken_plugin")

    result = start(tmp_path, "manage.py", "check", site=site, providers=False)

    assert result.returncode != 0
    assert (
        "agenttest plugin 'tickets' (entry point 'tests.plugins.broken_plugin' of distribution acme-tickets 1.0, group "
        "agenttest.plugins) failed to load: RuntimeError: the ticket system's URL is not configured"
    ) in result.stderr


def test_it_calls_a_register_callable_entry_point_once_however_often_plugins_load(tmp_path, monkeypatch):
    site = distribution(tmp_path / "site", "escalation = tests.plugins.callable_plugin:register")
    monkeypatch.syspath_prepend(str(site))

    plugins_load()
    plugins_load()

    assert callable_plugin.CALLS == ["register"]
    assert get_function("acme_escalation_level").effect_free
