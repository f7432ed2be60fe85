"""Removing secrets before anything is stored or logged.

Known secret values (every API key env var a provider names, plus OPENAI_API_KEY), Authorization/Bearer values,
common key shapes and AGENTTEST_REDACT_PATTERNS are replaced by a marker. So are secrets in any shape a production
trace carries them (docs/decisions/0034-production-traces.md): the value of a secret-named key — in a dict, in JSON
text (escaped inside another JSON string too) and in prose (`password=…`) —, the password of a URL, Basic and agenttest
tokens. Secret key names are the built-in ones (api key, password, secret, token, authorization, credential, cookie,
private/access key, anywhere in the name) and AGENTTEST_REDACT_KEYS (regular expressions a whole key matches,
case-insensitively).
"""

from __future__ import annotations

import functools
import json
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

# A key whose value is a secret, whatever the value looks like: any name containing one of these. "tokens" in the
# plural is a count in a model's settings and usage (max_tokens, input_tokens), never a secret.
_SECRET_KEY_WORDS = (
    r"api[_\-]?key|apikey|passw(?:or)?d|pwd|secret|token(?!s)|authorization|credential|cookie|private[_\-]?key"
    r"|access[_\-]?key"
)
_KEY_HINTS = ("key", "pass", "pwd", "secret", "token", "auth", "credential", "cookie")
# Shapes found by what they are, not by their key: (pattern, lower-cased words one of which the text must hold).
# Groups `pre` and `post` are kept around the marker, so JSON text stays JSON and a URL stays a URL.
_SHAPES = (
    # scheme://user:password@host — a database or broker URL with its password.
    (re.compile(r"(?i)(?P<pre>\b[a-z][a-z0-9+.\-]*://[^\s:/@\"'<>]*:)[^\s@/\"'<>]+(?P<post>@)"), ("://",)),
    (re.compile(r"(?i)(?P<pre>\bbasic\s+)[A-Za-z0-9+/]{8,}={0,2}"), ("basic",)),
    # agenttest's own: an API token after its keyword, an ingest token anywhere.
    (re.compile(r"(?i)(?P<pre>\btoken\s+)[0-9a-f]{40}\b"), ("token",)),
    (re.compile(r"agt_ingest_[A-Za-z0-9_\-]{16,}"), ("agt_ingest_",)),
)


@functools.lru_cache(maxsize=16)
def _key_rules(
    configured: tuple[str, ...],
) -> tuple[re.Pattern[str], re.Pattern[str], tuple[re.Pattern[str], ...]]:
    """A secret key name (whole-key match); the pattern finding such a key whose list or object value is JSON inside
    prose; and the patterns finding such a key's value in JSON text and prose."""
    # Bounded around the word: an unbounded run would be tried from every position of a long word (quadratic).
    words = "|".join([f"[\\w.\\-]{{0,40}}(?:{_SECRET_KEY_WORDS})[\\w.\\-]{{0,40}}",
                      *(f"(?:{key})" for key in configured)])
    name = re.compile(f"(?i)(?:{words})")
    # "key": [ or "key": { — a list or object value, written as JSON inside prose.
    embedded = re.compile(f'(?i)"(?:{words})"\\s*:\\s*(?=[\\[{{])')
    values = (
        # "key": "value" — the value's escapes skipped whole, so the text stays JSON.
        re.compile(f'(?i)(?P<pre>"(?:{words})"\\s*:\\s*")(?:[^"\\\\]|\\\\.)+(?P<post>")'),
        # The same written inside another JSON string, however deep: \"key\": \"value\", \\\"key\\\": …; the
        # value ends at a quote escaped as the key's are.
        re.compile(
            f'(?is)(?P<pre>(?P<esc>\\\\+)"(?:{words})(?P=esc)"\\s*:\\s*(?P=esc)")'
            f'.+?(?P<post>(?<!\\\\)(?P=esc)")'
        ),
        # Prose and query strings: key=value, key: value, with the value's scheme (but a number: "max_tokens: 1024"
        # is no secret).
        re.compile(f"(?i)(?P<pre>(?<![\\w.\\-])(?:{words})\\s*[:=]\\s*)(?!\\[redacted\\]|\\d+\\b)"
                   f"(?:(?:basic|bearer|token|digest)\\s+)?[^\\s\"',;&]{{4,}}"),
    )
    return name, embedded, values


def _configured_keys() -> tuple[str, ...]:
    return tuple(getattr(settings, "AGENTTEST_REDACT_KEYS", ()))


def secret_key(key: str) -> bool:
    """Whether a value under this key (a dict key, a header name) is a secret whatever it looks like."""
    return bool(_key_rules(_configured_keys())[0].fullmatch(key))


_DECODER = json.JSONDecoder()


def _embedded_redacted(text: str, embedded: re.Pattern[str], secrets: list[str]) -> str:
    """A secret key's list or object value written as JSON inside prose (`sent {"api_key": ["…"]}`), which neither
    the whole text's JSON nor a pattern for one string value finds: parsed where it starts, written again redacted.
    Each value is parsed once — a key inside a value already parsed is not tried again —, so the cost is linear."""
    parts = []
    kept_from = scanned_to = 0
    for match in embedded.finditer(text):
        if match.start() < scanned_to:
            continue
        try:
            value, end = _DECODER.raw_decode(text, match.end())
        except (ValueError, RecursionError):
            continue
        scanned_to = end
        redacted = _all_text_redacted(value, secrets)
        if redacted != value:
            parts += [text[kept_from : match.end()], json.dumps(redacted, ensure_ascii=False)]
            kept_from = end
    return "".join([*parts, text[kept_from:]]) if parts else text


def _json_redacted(text: str, secrets: list[str]) -> str:
    """JSON text redacted as the value it holds — a secret key's value whatever its shape (a list of header values,
    an object), JSON inside its strings too —, written again only when something was redacted."""
    stripped = text.strip()
    if not (stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]")):
        return text
    try:
        parsed = json.loads(stripped)
    except (ValueError, RecursionError):
        return text  # not JSON after all: the text patterns still apply
    redacted = _redact(parsed, secrets)
    return text if redacted == parsed else json.dumps(redacted, ensure_ascii=False)


def _keep_ends(match: re.Match[str]) -> str:
    parts = match.groupdict()
    return (parts.get("pre") or "") + MARKER + (parts.get("post") or "")


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
    lowered = text.lower()
    configured = _configured_keys()
    if configured or any(hint in lowered for hint in _KEY_HINTS):
        text = _json_redacted(text, secrets)
        _, embedded, values = _key_rules(configured)
        text = _embedded_redacted(text, embedded, secrets)
        for pattern in values:
            text = pattern.sub(_keep_ends, text)
    for pattern, hints in _SHAPES:
        if any(hint in lowered for hint in hints):
            text = pattern.sub(_keep_ends, text)
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
            UNSTORABLE_TEXT.sub("\ufffd", key) if isinstance(key, str) else key: (
                _all_text_redacted(item, secrets) if isinstance(key, str) and secret_key(key)
                else _redact(item, secrets)
            )
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(item, secrets) for item in value]
    return value


def _all_text_redacted(value: Any, secrets: list[str]) -> Any:
    """A secret key's value: its text, or every text of a list (a header's values), is the secret; numbers are kept
    (a count of tokens is no secret), and an object is read key by key — a tool's JSON schema names a parameter
    "password" with {"type": "string"} under it."""
    if isinstance(value, str):
        return MARKER if value else value
    if isinstance(value, list | tuple):
        return [_all_text_redacted(item, secrets) for item in value]
    return _redact(value, secrets)


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
