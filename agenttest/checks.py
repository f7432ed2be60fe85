"""System checks for settings that don't fit together."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


@register(Tags.compatibility)
def check_agenttest_settings(app_configs: Any = None, **kwargs: Any) -> list:
    from agents.llm.config import validate_providers

    problems: list = []
    for problem in validate_providers(settings.AGENTTEST_PROVIDERS):
        problems.append(Error(f"model providers: {problem}", id="agenttest.E001"))
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
        from agents.llm.registry import UnknownModel, get_model

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
    return problems
