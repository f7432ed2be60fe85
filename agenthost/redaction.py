"""Removing secrets before anything is stored or logged.

Known secret values (every API key env var a provider names, plus OPENAI_API_KEY), Authorization/Bearer values,
common key shapes and AGENTTEST_REDACT_PATTERNS are replaced by a marker.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from typing import Any

from django.conf import settings

from common.inputs import UNSTORABLE_TEXT

MARKER = "[redacted]"
_BUILTIN_PATTERNS = [
    r"(?i)(authorization\s*[:=]\s*)(bearer\s+|basic\s+)?[^\s\"',;]+",
    r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*",
    r"\bsk-[A-Za-z0-9_\-]{16,}",
    r"(?i)(api[_-]?key\s*[:=]\s*[\"']?)[^\s\"',;]{8,}",
]


_BUILTIN = tuple(re.compile(pattern) for pattern in _BUILTIN_PATTERNS)
# Every built-in pattern needs one of these (lower-cased) words: a text without any is spared four searches.
_BUILTIN_HINTS = ("authorization", "bearer", "sk-", "api")


def _secret_values() -> list[str]:
    # Read on every call, not cached: a key set or rotated in the environment is redacted from then on.
    names = {"OPENAI_API_KEY", "AGENTTEST_TWILIO_AUTH_TOKEN"}
    for spec in getattr(settings, "AGENTTEST_PROVIDERS", {}).values():
        if spec.get("api_key_env"):
            names.add(spec["api_key_env"])
    values = [os.environ.get(name, "") for name in names]
    values.append(getattr(settings, "AGENTTEST_TWILIO_AUTH_TOKEN", ""))
    # Very short values would redact ordinary words; a real key is never this short.
    return sorted({value for value in values if len(value) >= 8}, key=len, reverse=True)


@functools.lru_cache(maxsize=16)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern) for pattern in patterns)


def _patterns(text: str) -> tuple[re.Pattern[str], ...]:
    """The patterns worth applying to `text`: the configured ones always, the built-in ones when it has a hint."""
    configured = _compiled(tuple(getattr(settings, "AGENTTEST_REDACT_PATTERNS", ())))
    lowered = text.lower()
    if any(hint in lowered for hint in _BUILTIN_HINTS):
        return _BUILTIN + configured
    return configured


def _keep_prefix(match: re.Match[str]) -> str:
    return (match.group(1) if match.re.groups and match.group(1) else "") + MARKER


def redact_text(text: str) -> str:
    return _redact_text(text, _secret_values())


def _redact_text(text: str, secrets: list[str]) -> str:
    if not text:
        return text
    # Not a secret, but unstorable, and a model or tool can produce either: replaced, so a turn's flush cannot fail.
    text = UNSTORABLE_TEXT.sub("\ufffd", text)
    for value in secrets:
        text = text.replace(value, MARKER)
    for pattern in _patterns(text):
        text = pattern.sub(_keep_prefix, text)
    return text


def redact(value: Any) -> Any:
    """Redact every string inside a JSON-like value (dict keys are kept, only made storable)."""
    return _redact(value, _secret_values())


def _redact(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return _redact_text(value, secrets)
    if isinstance(value, dict):
        return {
            UNSTORABLE_TEXT.sub("\ufffd", key) if isinstance(key, str) else key: _redact(item, secrets)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(item, secrets) for item in value]
    return value


class RedactingLogFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
            redacted = redact_text(message)
        except Exception:  # a log line must never be lost because settings are not ready yet
            return True
        if redacted != message:
            record.msg, record.args = redacted, None
        return True
