"""Settings come from the environment; bad values and settings that don't fit together are reported clearly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from tests.workers import WAIT_SECONDS

BASE_DIR = Path(__file__).resolve().parent.parent
ACCEPTED_DEPLOY_WARNINGS = {"security.W021"}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTEST_", "CELERY_", "DATABASE_URL"))}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=clean, capture_output=True, text=True,
        timeout=WAIT_SECONDS,
    )


PRODUCTION = {
    "AGENTTEST_SECRET_KEY": "a-long-random-production-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
    "AGENTTEST_ALLOWED_HOSTS": "agenttest.example.com",
    "AGENTTEST_BROKER_URL": "redis://127.0.0.1:6379/0",
    "AGENTTEST_CACHE_URL": "redis://127.0.0.1:6379/1",
    "AGENTTEST_EMAIL_HOST": "smtp.example.com",
}
FILE_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


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
    assert "AGENTTEST_MAX_STEPS must be a whole number (digits 0-9), got 'ten'" in result.stderr
    result = manage("check", AGENTTEST_VAR_DIR=str(tmp_path), AGENTTEST_DEBUG="1", AGENTTEST_MAX_STEPS="٣")
    assert "AGENTTEST_MAX_STEPS must be a whole number (digits 0-9), got '٣'" in result.stderr


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
    ({"EMAIL_BACKEND": "nowhere.EmailBackend"}, "agenttest.E007"),
    ({"EMAIL_BACKEND": FILE_BACKEND, "EMAIL_FILE_PATH": None}, "agenttest.E008"),
    ({"EMAIL_BACKEND": SMTP_BACKEND, "EMAIL_HOST": ""}, "agenttest.E009"),
    ({"EMAIL_BACKEND": SMTP_BACKEND, "EMAIL_HOST_USER": "bob", "EMAIL_HOST_PASSWORD": ""}, "agenttest.W003"),
    ({"EMAIL_BACKEND": SMTP_BACKEND, "EMAIL_HOST_USER": "", "EMAIL_HOST_PASSWORD": "secret"}, "agenttest.W003"),
    ({"DEBUG": False, "CACHES": {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}},
     "agenttest.W005"),
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


def test_it_sends_email_to_files_once_the_file_backend_has_a_directory(tmp_path):
    mail_dir = tmp_path / "mail"
    env = {"AGENTTEST_VAR_DIR": str(tmp_path), "AGENTTEST_DEBUG": "1", "AGENTTEST_EMAIL_BACKEND": FILE_BACKEND,
           "AGENTTEST_EMAIL_FILE_PATH": str(mail_dir)}
    assert manage("check", **env).returncode == 0
    sent = manage("shell", "-c", "from django.core.mail import send_mail; "
                  "send_mail('Order 1043 cancelled', 'Done.', 'shop@example.com', ['ana@example.com'])", **env)
    assert sent.returncode == 0, sent.stderr
    [message] = mail_dir.iterdir()
    assert "Subject: Order 1043 cancelled" in message.read_text()


@pytest.mark.parametrize("where,why", [
    (None, "AGENTTEST_EMAIL_FILE_PATH: it is not set"),
    ("a-file", "is not a directory"),
    ("a-file/mail", "cannot be created"),
])
def test_it_refuses_the_file_email_backend_without_a_directory_it_can_write(tmp_path, where, why):
    (tmp_path / "a-file").write_text("not a directory")
    env = {"AGENTTEST_VAR_DIR": str(tmp_path), "AGENTTEST_DEBUG": "1", "AGENTTEST_EMAIL_BACKEND": FILE_BACKEND}
    if where:
        env["AGENTTEST_EMAIL_FILE_PATH"] = str(tmp_path / where)
    result = manage("check", **env)
    assert result.returncode != 0
    assert "agenttest.E008" in result.stderr and why in result.stderr, result.stderr


def test_it_refuses_smtp_without_a_server_when_debug_is_off(tmp_path):
    production = {key: value for key, value in PRODUCTION.items() if key != "AGENTTEST_EMAIL_HOST"}
    result = manage("check", AGENTTEST_VAR_DIR=str(tmp_path), **production)
    assert result.returncode != 0
    assert "agenttest.E009" in result.stderr and "AGENTTEST_EMAIL_HOST is not set" in result.stderr
    # A local install keeps the localhost default.
    local = manage("check", AGENTTEST_VAR_DIR=str(tmp_path), AGENTTEST_DEBUG="1", AGENTTEST_EMAIL_BACKEND=SMTP_BACKEND)
    assert local.returncode == 0 and "agenttest.E009" not in local.stderr, local.stderr


def test_it_names_an_email_backend_that_cannot_be_imported(tmp_path):
    result = manage("check", AGENTTEST_VAR_DIR=str(tmp_path), AGENTTEST_DEBUG="1",
                    AGENTTEST_EMAIL_BACKEND="django.core.mail.backends.filebase.EmailBackend")
    assert result.returncode != 0
    assert "AGENTTEST_EMAIL_BACKEND names 'django.core.mail.backends.filebase.EmailBackend'" in result.stderr


def _openai_providers(timeout: float, max_retries: int) -> str:
    return (f'[providers.local]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\ntimeout = {timeout}\n'
            f'max_retries = {max_retries}\n\n[[providers.local.models]]\nname = "m"\n')


def test_it_warns_when_one_model_call_may_outlast_the_web_request(tmp_path):
    providers = tmp_path / "providers.toml"
    providers.write_text(_openai_providers(60, 5))
    env = {"AGENTTEST_VAR_DIR": str(tmp_path), "AGENTTEST_DEBUG": "1", "AGENTTEST_PROVIDERS_FILE": str(providers)}
    result = manage("check", **env)
    assert "agenttest.W004" in result.stderr, result.stderr
    assert "360 s" in result.stderr and "AGENTTEST_REQUEST_TIMEOUT (300 s)" in result.stderr
    assert "agenttest.W004" not in manage("check", AGENTTEST_REQUEST_TIMEOUT="360", **env).stderr


@given(
    timeout=st.floats(min_value=0.5, max_value=900, allow_nan=False),
    max_retries=st.integers(min_value=0, max_value=6),
    limit=st.integers(min_value=5, max_value=3600),
)
def test_it_warns_exactly_when_timeout_times_attempts_exceeds_the_request_timeout(timeout, max_retries, limit):
    providers = {"local": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "", "timeout": timeout,
                           "max_retries": max_retries, "models": [{"name": "m"}]}}
    with override_settings(AGENTTEST_PROVIDERS=providers, AGENTTEST_REQUEST_TIMEOUT=limit):
        warned = any(message.id == "agenttest.W004" for message in run_checks())
    assert warned == (timeout * (max_retries + 1) > limit)


def test_it_warns_when_the_cache_is_each_processs_own_memory_with_debug_off(tmp_path):
    result = manage("check", AGENTTEST_VAR_DIR=str(tmp_path), **{**PRODUCTION, "AGENTTEST_CACHE_URL": "locmem://"})
    assert "agenttest.W005" in result.stderr and "AGENTTEST_CACHE_URL" in result.stderr, result.stderr


def test_it_names_a_bad_cache_url_without_echoing_it(tmp_path):
    result = manage("check", AGENTTEST_VAR_DIR=str(tmp_path), AGENTTEST_DEBUG="1",
                    AGENTTEST_CACHE_URL="memcached://cache:hunter2@cache.internal:11211")
    assert result.returncode != 0
    assert "AGENTTEST_CACHE_URL must be redis://" in result.stderr and "'memcached'" in result.stderr
    assert "hunter2" not in result.stderr


def test_it_creates_the_database_cache_table_with_migrate(tmp_path):
    env = {"AGENTTEST_VAR_DIR": str(tmp_path), "AGENTTEST_DEBUG": "1", "AGENTTEST_CACHE_URL": "db://"}
    assert manage("migrate", "--noinput", **env).returncode == 0
    existing = manage("createcachetable", "--dry-run", **env)
    assert "Cache table 'agenttest_cache' already exists" in existing.stdout, existing.stdout + existing.stderr
    assert "CREATE TABLE" not in existing.stdout
    assert manage("makemigrations", "--check", "--dry-run", **env).returncode == 0
    script = "from django.core.cache import cache; cache.set('k', 1); print(cache.get('k'))"
    cached = manage("shell", "-c", script, **env)
    assert cached.stdout.splitlines()[-1] == "1", cached.stdout + cached.stderr
