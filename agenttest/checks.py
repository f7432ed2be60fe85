"""System checks for settings that don't fit together."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.mail.backends.filebased import EmailBackend as FileEmailBackend
from django.core.mail.backends.smtp import EmailBackend as SmtpEmailBackend
from django.utils.module_loading import import_string

LOCAL_MEMORY_CACHE = "django.core.cache.backends.locmem.LocMemCache"


@register(Tags.compatibility)
def check_agenttest_settings(app_configs: Any = None, **kwargs: Any) -> list:
    from agenthost.llm.registry import configuration_problems

    problems: list = [
        # Settings went on without the file: what it says (plugins, providers, servers) is not in force.
        Error(f"project file: {problem}", hint="Fix the file, or set AGENTTEST_CONFIG to another one "
              f"({os.devnull} reads none).", id="agenttest.E011")
        for problem in getattr(settings, "AGENTTEST_PROJECT_PROBLEMS", [])
    ]
    # With the registered kinds: plugins are loaded by now, so a kind no plugin registered is reported here.
    provider_problems = configuration_problems(settings.AGENTTEST_PROVIDERS)
    for problem in provider_problems:
        problems.append(Error(f"model providers: {problem}", id="agenttest.E001"))
    from common.mcp_config import validate_mcp_servers

    # The file is checked when read; a mapping set in code (a deployment's settings module) is checked here.
    for problem in validate_mcp_servers(settings.AGENTTEST_MCP_SERVERS):
        problems.append(Error(f"MCP servers: {problem}", id="agenttest.E010"))
    broker = settings.CELERY_BROKER_URL
    database_engine = settings.DATABASES["default"]["ENGINE"]
    if broker.startswith("sqla+sqlite") and "postgresql" in database_engine:
        problems.append(
            Warning(
                "The run queue uses the embedded SQLite broker while the database is PostgreSQL.",
                hint="In production set AGENTTEST_BROKER_URL=redis://… so web and worker machines share the queue.",
                id="agenttest.W001",
            )
        )
    if not settings.DEBUG and broker.startswith("sqla+sqlite"):
        problems.append(
            Warning(
                "DEBUG is off but the run queue is the embedded SQLite broker (single machine only).",
                hint="Set AGENTTEST_BROKER_URL to a Redis URL for production.",
                id="agenttest.W002",
            )
        )
    alias = settings.AGENTTEST_SQL_DATABASE
    if alias and alias not in settings.DATABASES:
        problems.append(
            Error(
                f"AGENTTEST_SQL_DATABASE names the database alias {alias!r}, which is not in DATABASES.",
                hint="Set AGENTTEST_SQL_DATABASE_URL (creates the 'agent_sql' alias) or name an existing alias.",
                id="agenttest.E002",
            )
        )
    twilio = {
        "AGENTTEST_TWILIO_ACCOUNT_SID": settings.AGENTTEST_TWILIO_ACCOUNT_SID,
        "AGENTTEST_TWILIO_AUTH_TOKEN": settings.AGENTTEST_TWILIO_AUTH_TOKEN,
        "AGENTTEST_TWILIO_FROM": settings.AGENTTEST_TWILIO_FROM,
    }
    if any(twilio.values()) and not all(twilio.values()):
        missing = ", ".join(name for name, value in twilio.items() if not value)
        problems.append(Error(f"Twilio is partly configured; missing {missing}.", id="agenttest.E003"))
    extraction = settings.AGENTTEST_EXTRACTION_MODEL
    if extraction:
        from agenthost.llm.registry import UnknownModel, get_model

        try:
            get_model(extraction)
        except UnknownModel as exc:
            problems.append(Error(f"AGENTTEST_EXTRACTION_MODEL: {exc}", id="agenttest.E006"))
    if settings.AGENTTEST_HTTP_TIMEOUT <= 0:
        problems.append(Error("AGENTTEST_HTTP_TIMEOUT must be greater than 0.", id="agenttest.E004"))
    for host in settings.AGENTTEST_HTTP_ALLOWED_HOSTS:
        if "/" in host or host.startswith("*"):
            problems.append(
                Error(
                    f"AGENTTEST_HTTP_ALLOWED_HOSTS entry {host!r} must be a host name or host:port, not a URL or "
                    "wildcard.",
                    id="agenttest.E005",
                )
            )
    problems.extend(_email_problems())
    if not provider_problems:
        # With E001 the provider's numbers are not to be trusted.
        problems.extend(_request_time_problems())
    if not settings.DEBUG and settings.CACHES["default"]["BACKEND"] == LOCAL_MEMORY_CACHE:
        problems.append(
            Warning(
                "DEBUG is off but the cache is each process's own memory (AGENTTEST_CACHE_URL=locmem://): API "
                "throttles count per process, so N web workers allow N times the rate.",
                hint="Set AGENTTEST_CACHE_URL=redis://host:6379/1, or db:// to share a table in the database.",
                id="agenttest.W005",
            )
        )
    return problems


def _email_problems() -> list:
    """An email backend that cannot send as configured; util-email-handle_email_sender would fail only when called."""
    try:
        backend = import_string(settings.EMAIL_BACKEND)
    except ImportError:
        return [
            Error(
                f"AGENTTEST_EMAIL_BACKEND names {settings.EMAIL_BACKEND!r}, which cannot be imported.",
                hint="Give the dotted path of an email backend, e.g. django.core.mail.backends.smtp.EmailBackend.",
                id="agenttest.E007",
            )
        ]
    problems: list = []
    if isinstance(backend, type) and issubclass(backend, FileEmailBackend):
        path = settings.EMAIL_FILE_PATH
        problem = _directory_problem(str(path)) if path else "it is not set"
        if problem:
            problems.append(
                Error(
                    "The file-based email backend writes each message into the directory AGENTTEST_EMAIL_FILE_PATH: "
                    f"{problem}.",
                    hint="Set AGENTTEST_EMAIL_FILE_PATH to a directory this process can write (it is created if "
                    "missing).",
                    id="agenttest.E008",
                )
            )
    elif isinstance(backend, type) and issubclass(backend, SmtpEmailBackend):
        if not settings.EMAIL_HOST:
            problems.append(
                Error(
                    "The SMTP email backend has no server: AGENTTEST_EMAIL_HOST is not set (with DEBUG off there is "
                    "no localhost default).",
                    hint="Set AGENTTEST_EMAIL_HOST (and AGENTTEST_EMAIL_PORT), or choose another "
                    "AGENTTEST_EMAIL_BACKEND.",
                    id="agenttest.E009",
                )
            )
        if bool(settings.EMAIL_HOST_USER) != bool(settings.EMAIL_HOST_PASSWORD):
            # Django logs in only with both, so one alone sends unauthenticated and the server refuses the mail.
            given, missing = (
                ("AGENTTEST_EMAIL_USER", "AGENTTEST_EMAIL_PASSWORD")
                if settings.EMAIL_HOST_USER
                else ("AGENTTEST_EMAIL_PASSWORD", "AGENTTEST_EMAIL_USER")
            )
            problems.append(
                Warning(f"{given} is set without {missing}: SMTP would not log in.", id="agenttest.W003")
            )
    return problems


def _directory_problem(path: str) -> str:
    """Why the file-based backend could not write into `path` ("" when it can), without creating anything."""
    target = Path(os.path.abspath(path))
    if target.exists():
        if not target.is_dir():
            return f"{path} is not a directory"
        return "" if os.access(target, os.W_OK | os.X_OK) else f"{path} is not writable by this process"
    parent = next(ancestor for ancestor in target.parents if ancestor.exists())
    if not parent.is_dir():
        return f"{path} cannot be created: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} cannot be created: {parent} is not writable by this process"
    return ""


def _request_time_problems() -> list:
    """An openai provider whose one call may outlast the web request that waits for it (a chat turn, an extraction)."""
    from common.provider_config import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT

    limit = settings.AGENTTEST_REQUEST_TIMEOUT
    problems: list = []
    for name, spec in settings.AGENTTEST_PROVIDERS.items():
        if spec["kind"] != "openai":
            continue
        # A mapping set in code need not be normalised; the file's defaults apply to it too.
        timeout = spec.get("timeout", DEFAULT_TIMEOUT)
        attempts = spec.get("max_retries", DEFAULT_MAX_RETRIES) + 1
        if timeout * attempts > limit:
            problems.append(
                Warning(
                    f"Model provider {name!r} may spend {timeout * attempts:g} s on one model call (timeout "
                    f"{timeout:g} s × {attempts} attempts), more than AGENTTEST_REQUEST_TIMEOUT ({limit} s): a chat "
                    "turn or an extraction on it can outlive its web request.",
                    hint="Lower the provider's timeout or max_retries in AGENTTEST_PROVIDERS_FILE, or raise "
                    "AGENTTEST_REQUEST_TIMEOUT.",
                    id="agenttest.W004",
                )
            )
    return problems
