"""Settings come from the environment; bad values and settings that don't fit together are reported clearly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import run_checks

BASE_DIR = Path(__file__).resolve().parent.parent
ACCEPTED_DEPLOY_WARNINGS = {"security.W021"}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTEST_", "CELERY_", "DATABASE_URL"))}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=clean, capture_output=True, text=True, timeout=120
    )


PRODUCTION = {
    "AGENTTEST_SECRET_KEY": "a-long-random-production-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
    "AGENTTEST_ALLOWED_HOSTS": "agenttest.example.com",
    "AGENTTEST_BROKER_URL": "redis://127.0.0.1:6379/0",
}


def test_it_passes_check_deploy_with_production_settings_but_for_the_accepted_warnings(tmp_path):
    result = manage("check", "--deploy", AGENTTEST_VAR_DIR=str(tmp_path), **PRODUCTION)
    assert result.returncode == 0, result.stderr
    reported = set(re.findall(r"^\S*: \(([\w.]+)\)", result.stderr, re.MULTILINE))
    assert reported, result.stderr
    assert reported <= ACCEPTED_DEPLOY_WARNINGS, result.stderr


def test_it_refuses_to_start_without_a_secret_key_when_debug_is_off(tmp_path):
    result = manage("check", AGENTTEST_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "AGENTTEST_SECRET_KEY is required when AGENTTEST_DEBUG is off" in result.stderr


def test_it_names_the_variable_of_a_malformed_value(tmp_path):
    result = manage("check", AGENTTEST_VAR_DIR=str(tmp_path), AGENTTEST_DEBUG="perhaps")
    assert "AGENTTEST_DEBUG must be a boolean" in result.stderr
    result = manage("check", AGENTTEST_VAR_DIR=str(tmp_path), AGENTTEST_DEBUG="1", AGENTTEST_MAX_STEPS="ten")
    assert "AGENTTEST_MAX_STEPS must be a whole number, got 'ten'" in result.stderr


def test_it_reports_a_broken_providers_file_naming_file_and_field(tmp_path):
    providers = tmp_path / "providers.toml"
    providers.write_text('[providers.local]\nkind = "openai"\napi_key = "sk-should-not-be-here"\n')
    result = manage("check", AGENTTEST_VAR_DIR=str(tmp_path), AGENTTEST_DEBUG="1",
                    AGENTTEST_PROVIDERS_FILE=str(providers))
    assert result.returncode != 0
    assert str(providers) in result.stderr and "api_key" in result.stderr
    assert "sk-should-not-be-here" not in result.stderr


def _ids(settings_overrides, settings) -> set[str]:
    for key, value in settings_overrides.items():
        setattr(settings, key, value)
    return {message.id for message in run_checks() if message.id and message.id.startswith("agenttest.")}


@pytest.mark.parametrize("overrides,expected", [
    ({"AGENTTEST_SQL_DATABASE": "reporting"}, "agenttest.E002"),
    ({"AGENTTEST_TWILIO_ACCOUNT_SID": "AC123"}, "agenttest.E003"),
    ({"AGENTTEST_HTTP_TIMEOUT": 0}, "agenttest.E004"),
    ({"AGENTTEST_HTTP_ALLOWED_HOSTS": ["https://api.example.com/"]}, "agenttest.E005"),
    ({"AGENTTEST_PROVIDERS": {"x": {"kind": "nope", "models": []}}}, "agenttest.E001"),
    ({"AGENTTEST_EXTRACTION_MODEL": "nowhere:model"}, "agenttest.E006"),
])
def test_it_flags_settings_that_do_not_fit_together(settings, overrides, expected):
    assert expected in _ids(overrides, settings)


def test_it_warns_when_postgres_runs_with_the_embedded_broker():
    result = manage("check", AGENTTEST_DEBUG="1", DATABASE_URL="postgres://postgres@127.0.0.1:5432/test")
    assert "agenttest.W001" in result.stderr


def test_it_is_quiet_when_the_settings_fit_together(settings):
    on_postgres = "postgresql" in settings.DATABASES["default"]["ENGINE"]
    broker = "redis://127.0.0.1:6379/0" if on_postgres else "sqla+sqlite:///var/broker.sqlite3"
    assert _ids({"DEBUG": True, "CELERY_BROKER_URL": broker}, settings) == set()
