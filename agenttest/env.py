"""Small typed readers for the environment: every setting comes from here, with one clear error per bad value."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from common.inputs import parse_whole_number

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false, yes/no), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = parse_whole_number(raw)
    if value is None:
        raise ImproperlyConfigured(f"{name} must be a whole number (digits 0-9), got {raw!r}")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


# The table of the database cache; agenttest/migrations creates it, so every `migrate` path has it.
CACHE_TABLE = "agenttest_cache"


def env_cache(name: str, default: str) -> dict[str, Any]:
    """A cache from a URL: redis:// or rediss:// (production), db:// (a table every process using the database
    shares) or locmem:// (each process its own)."""
    raw = os.environ.get(name, "").strip() or default
    scheme = urlsplit(raw).scheme.lower()
    if scheme in ("redis", "rediss"):
        return {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": raw,
            "KEY_PREFIX": "agenttest",
            # A dead Redis is an error within seconds, not a request hanging on a throttle check.
            "OPTIONS": {"socket_connect_timeout": 3, "socket_timeout": 3},
        }
    if raw == "db://":
        return {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": CACHE_TABLE,
            # Past MAX_ENTRIES Django culls a third of the keys, live throttle counts among them; expired ones go first.
            "OPTIONS": {"MAX_ENTRIES": 100_000},
        }
    if raw == "locmem://":
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "agenttest"}
    expected = f"{name} must be redis://host:6379/1, rediss://…, db:// or locmem://"
    # The scheme only, never the value: a Redis URL may carry a password.
    raise ImproperlyConfigured(f"{expected}; got a value with scheme {scheme!r}" if scheme else expected)
