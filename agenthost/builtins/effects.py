"""The five built-in functions with real side effects: email, HTTP, read-only SQL, Twilio text and Twilio call.

Settings are read at call time (not import time) so an operator's change, or a test's override, takes effect at once.
Every refusal or misconfiguration raises FunctionError: the executor turns it into an error tool result the model reads.
"""

from __future__ import annotations

import json
import smtplib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import sqlparse
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import BadHeaderError, EmailMessage
from django.core.validators import validate_email
from django.db import DatabaseError, connections, transaction
from django.utils.connection import ConnectionDoesNotExist
from sqlparse import tokens as sql_tokens

from agenthost.functions import FunctionContext, FunctionError, register_function

if TYPE_CHECKING:
    # Imported where a request is sent: every process registers these functions at start-up (a worker, a command, an
    # agent's child), and httpx with its command line (rich, pygments, click) cost each about 90 ms it rarely used.
    import httpx

HTTP_BODY_LIMIT = 20_000
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
HTTP_REPORTED_HEADERS = ("content-type", "content-length", "location", "retry-after")
HTTP_MAX_REDIRECTS = 5

_ADDRESSES_SCHEMA = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
    ]
}


def _dumps(payload: dict[str, Any]) -> str:
    return json.dumps(payload, default=str)


# --- email -----------------------------------------------------------------------------------------------------------


def _addresses(value: str | list[str], field: str) -> list[str]:
    addresses = [value] if isinstance(value, str) else list(value)
    addresses = [address.strip() for address in addresses]
    for address in addresses:
        try:
            validate_email(address)
        except ValidationError:
            raise FunctionError(f"{field}: {address!r} is not a valid email address") from None
    return addresses


@register_function(
    name="util-email-handle_email_sender",
    outside_effects=True,
    description="Send an email (plain text) to one or more recipients.",
    parameters={
        "type": "object",
        "properties": {
            "to": {**_ADDRESSES_SCHEMA, "description": "Recipient address, or a list of addresses."},
            "subject": {"type": "string", "description": "Subject line (one line)."},
            "body": {"type": "string", "description": "Plain-text body."},
            "cc": {**_ADDRESSES_SCHEMA, "description": "Optional carbon-copy address or list of addresses."},
        },
        "required": ["to", "subject", "body"],
    },
)
def send_email(
    context: FunctionContext, to: str | list[str], subject: str, body: str, cc: str | list[str] | None = None
) -> str:
    recipients = _addresses(to, "to")
    copies = _addresses(cc, "cc") if cc else []
    message = EmailMessage(subject=subject, body=body, from_email=settings.DEFAULT_FROM_EMAIL, to=recipients, cc=copies)
    try:
        message.send()
    except BadHeaderError:
        raise FunctionError("the subject must be a single line (no line breaks)") from None
    except (smtplib.SMTPException, OSError) as exc:
        raise FunctionError(f"the email could not be sent: {exc}") from exc
    return _dumps(
        {"sent": True, "from": settings.DEFAULT_FROM_EMAIL, "to": recipients, "cc": copies, "subject": subject}
    )


# --- HTTP ------------------------------------------------------------------------------------------------------------


def _effective_port(url: httpx.URL) -> int | None:
    return url.port or {"http": 80, "https": 443}.get(url.scheme)


def _host_allowed(url: httpx.URL, allowed_hosts: list[str]) -> bool:
    import httpx

    host = url.host.lower()
    for entry in allowed_hosts:
        # Parsing the entry as a URL authority handles "host", "host:port" and bracketed IPv6 alike.
        try:
            allowed = httpx.URL(f"{url.scheme}://{entry.strip()}")
        except httpx.InvalidURL:
            raise FunctionError(f"AGENTTEST_HTTP_ALLOWED_HOSTS entry {entry!r} is not a host or host:port") from None
        if allowed.host.lower() != host:
            continue
        if allowed.port is None or allowed.port == _effective_port(url):
            return True
    return False


def _check_destination(url: httpx.URL, allowed_hosts: list[str]) -> None:
    if url.scheme not in ("http", "https"):
        raise FunctionError(f"only http and https URLs are allowed, not {url.scheme or 'a relative URL'!r}")
    if not _host_allowed(url, allowed_hosts):
        authority = f"{url.host}:{url.port}" if url.port else url.host
        raise FunctionError(f"host {authority!r} is not in AGENTTEST_HTTP_ALLOWED_HOSTS")


@register_function(
    name="util-http-handle_http_request",
    outside_effects=True,
    description="Make an HTTP request to an allowed host and return the status, main headers and body.",
    parameters={
        "type": "object",
        "properties": {
            "method": {"type": "string", "enum": list(HTTP_METHODS)},
            "url": {"type": "string", "description": "Absolute http(s) URL."},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {
                "anyOf": [{"type": "string"}, {"type": "object"}],
                "description": "Request body: raw text, or a JSON object sent as application/json.",
            },
        },
        "required": ["method", "url"],
    },
)
def http_request(
    context: FunctionContext,
    method: str,
    url: str,
    headers: dict[str, str] | None = None,
    body: str | dict[str, Any] | None = None,
) -> str:
    import httpx

    allowed_hosts = list(settings.AGENTTEST_HTTP_ALLOWED_HOSTS)
    if not allowed_hosts:
        raise FunctionError(
            "HTTP requests are disabled: set AGENTTEST_HTTP_ALLOWED_HOSTS to the hosts this function may call"
        )
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise FunctionError(f"invalid URL {url!r}: {exc}") from None
    _check_destination(target, allowed_hosts)

    content = json.dumps(body).encode() if isinstance(body, dict) else body
    request_headers = dict(headers or {})
    if isinstance(body, dict) and not any(name.lower() == "content-type" for name in request_headers):
        request_headers["Content-Type"] = "application/json"

    # The hook runs before every request httpx sends, redirects included, so a redirect cannot leave the allow-list.
    hooks = {"request": [lambda request: _check_destination(request.url, allowed_hosts)]}
    timeout = settings.AGENTTEST_HTTP_TIMEOUT
    try:
        with httpx.Client(
            timeout=timeout, follow_redirects=True, max_redirects=HTTP_MAX_REDIRECTS, event_hooks=hooks
        ) as client:
            with client.stream(method, target, headers=request_headers, content=content) as response:
                text, truncated = _read_text(response, HTTP_BODY_LIMIT)
    except httpx.TimeoutException:
        raise FunctionError(f"{method} {url} timed out after {timeout} seconds") from None
    except httpx.TooManyRedirects:
        raise FunctionError(f"{method} {url} redirected more than {HTTP_MAX_REDIRECTS} times") from None
    except httpx.HTTPError as exc:
        raise FunctionError(f"{method} {url} failed: {exc}") from None

    return _dumps(
        {
            "status": response.status_code,
            "url": str(response.url),
            "headers": {name: response.headers[name] for name in HTTP_REPORTED_HEADERS if name in response.headers},
            "body": text,
            "truncated": truncated,
        }
    )


def _read_text(response: httpx.Response, limit: int) -> tuple[str, bool]:
    # Streamed so a huge download stops at the limit instead of filling memory.
    collected = ""
    for chunk in response.iter_text():
        collected += chunk
        if len(collected) > limit:
            return collected[:limit], True
    return collected, False


# --- SQL -------------------------------------------------------------------------------------------------------------


def _single_select(sql: str) -> str:
    """The statement to run, or FunctionError when `sql` is anything but one SELECT (or WITH … SELECT)."""
    statements = [
        statement
        for statement in sqlparse.parse(sql)
        if sqlparse.format(str(statement), strip_comments=True).strip(" \t\r\n;")
    ]
    if not statements:
        raise FunctionError("no SQL statement given")
    if len(statements) > 1:
        raise FunctionError("only a single SELECT statement is allowed; got several statements")
    statement = statements[0]
    if statement.get_type() != "SELECT":
        raise FunctionError("only SELECT (or WITH … SELECT) statements are allowed")
    for token in statement.flatten():
        # Catches writes hidden inside a SELECT: data-modifying CTEs, SELECT … INTO, SELECT … FOR UPDATE.
        if token.ttype in sql_tokens.Keyword.DDL or (
            token.ttype in sql_tokens.Keyword.DML and token.normalized != "SELECT"
        ):
            raise FunctionError(
                f"only read-only SELECT statements are allowed; found {token.normalized} "
                "(quote it if it is a column name)"
            )
        if token.ttype in sql_tokens.Keyword and token.normalized == "INTO":
            raise FunctionError("SELECT … INTO writes data and is not allowed")
    return str(statement).strip().rstrip(";").strip()


@register_function(
    name="util-db-sql_select",
    outside_effects=True,
    description="Run one read-only SQL SELECT query on the configured database and return columns and rows.",
    parameters={
        "type": "object",
        "properties": {"sql": {"type": "string", "description": "A single SELECT (or WITH … SELECT) statement."}},
        "required": ["sql"],
    },
)
def sql_select(context: FunctionContext, sql: str) -> str:
    alias = settings.AGENTTEST_SQL_DATABASE
    if not alias:
        raise FunctionError("not configured: set AGENTTEST_SQL_DATABASE_URL or AGENTTEST_SQL_DATABASE")
    statement = _single_select(sql)
    try:
        connection = connections[alias]
    except ConnectionDoesNotExist:
        raise FunctionError(f"AGENTTEST_SQL_DATABASE names {alias!r}, which is not a configured database") from None
    select = _READ_ONLY_SELECTS.get(connection.vendor)
    if select is None:
        raise FunctionError(f"read-only queries are supported on PostgreSQL and SQLite, not {connection.vendor}")
    limit = settings.AGENTTEST_SQL_ROW_LIMIT
    try:
        columns, rows = select(alias, statement, limit + 1)
    except DatabaseError as exc:
        raise FunctionError(f"the query failed: {exc}") from None

    truncated = len(rows) > limit
    payload: dict[str, Any] = {
        "columns": columns,
        "rows": rows[:limit],
        "row_count": min(len(rows), limit),
        "truncated": truncated,
    }
    if truncated:
        payload["note"] = f"only the first {limit} rows are returned; narrow the query or add a LIMIT"
    return _dumps(payload)


def _fetch(cursor: Any, statement: str, max_rows: int) -> tuple[list[str], list[list[Any]]]:
    cursor.execute(statement)
    columns = [column[0] for column in cursor.description or []]
    return columns, [list(row) for row in cursor.fetchmany(max_rows)]


def _select_postgresql(alias: str, statement: str, max_rows: int) -> tuple[list[str], list[list[Any]]]:
    with transaction.atomic(using=alias):
        with connections[alias].cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
            result = _fetch(cursor, statement, max_rows)
        # Always rolled back: a read has nothing to keep, and inside a savepoint the rollback also undoes READ ONLY
        # so an enclosing transaction is left writable.
        transaction.set_rollback(True, using=alias)
    return result


def _select_sqlite(alias: str, statement: str, max_rows: int) -> tuple[list[str], list[list[Any]]]:
    # No atomic block here: with transaction_mode IMMEDIATE it would take SQLite's write lock for a read.
    with connections[alias].cursor() as cursor:
        cursor.execute("PRAGMA query_only = ON")
        try:
            return _fetch(cursor, statement, max_rows)
        finally:
            cursor.execute("PRAGMA query_only = OFF")


_READ_ONLY_SELECTS = {"postgresql": _select_postgresql, "sqlite": _select_sqlite}


# --- Twilio ----------------------------------------------------------------------------------------------------------


def _twilio_post(resource: str, form: Mapping[str, str | None], what: str) -> dict[str, Any]:
    import httpx

    required = ("AGENTTEST_TWILIO_ACCOUNT_SID", "AGENTTEST_TWILIO_AUTH_TOKEN", "AGENTTEST_TWILIO_FROM")
    missing = [name for name in required if not getattr(settings, name, "")]
    if missing:
        raise FunctionError(f"Twilio is not configured: set {', '.join(missing)}")
    sid = settings.AGENTTEST_TWILIO_ACCOUNT_SID
    token = settings.AGENTTEST_TWILIO_AUTH_TOKEN
    base = settings.AGENTTEST_TWILIO_API_BASE.rstrip("/")
    url = f"{base}/2010-04-01/Accounts/{sid}/{resource}.json"
    timeout = settings.AGENTTEST_HTTP_TIMEOUT
    try:
        response = httpx.post(
            url, data={**form, "From": settings.AGENTTEST_TWILIO_FROM}, auth=(sid, token), timeout=timeout
        )
    except httpx.TimeoutException:
        raise FunctionError(f"no answer from Twilio within {timeout}s; the {what} may or may not be sent") from None
    except httpx.HTTPError as exc:
        raise FunctionError(_without_secret(f"could not reach Twilio: {exc}", token)) from None
    try:
        payload = response.json()
    except ValueError:
        payload = {}
    if not isinstance(payload, dict):
        payload = {}
    if response.is_error:
        message = payload.get("message") or response.text[:500] or response.reason_phrase
        code = f", code {payload['code']}" if payload.get("code") else ""
        raise FunctionError(
            _without_secret(f"Twilio refused the {what} (HTTP {response.status_code}{code}): {message}", token)
        )
    return payload


def _without_secret(text: str, secret: str) -> str:
    # Error text goes to the model and into transcripts; the auth token must never reach either.
    return text.replace(secret, "***") if secret else text


@register_function(
    name="util-twilio-text_message",
    outside_effects=True,
    description="Send an SMS text message through Twilio.",
    parameters={
        "type": "object",
        "properties": {
            "to": {"type": "string", "description": "Recipient phone number in E.164 form, e.g. +14155550100."},
            "body": {"type": "string", "description": "Message text."},
        },
        "required": ["to", "body"],
    },
)
def text_message(context: FunctionContext, to: str, body: str) -> str:
    payload = _twilio_post("Messages", {"To": to, "Body": body}, "text message")
    return _dumps({"sent": True, "sid": payload.get("sid"), "status": payload.get("status"), "to": to})


@register_function(
    name="util-twilio-outbound_phone_call",
    outside_effects=True,
    description="Place an outbound phone call through Twilio; give exactly one of `twiml` or `url` for what it says.",
    parameters={
        "type": "object",
        "properties": {
            "to": {"type": "string", "description": "Phone number to call in E.164 form, e.g. +14155550100."},
            "twiml": {"type": "string", "description": "TwiML instructions for the call, e.g. <Response><Say>…"},
            "url": {"type": "string", "description": "URL Twilio fetches the call's TwiML from."},
        },
        "required": ["to"],
    },
)
def outbound_phone_call(context: FunctionContext, to: str, twiml: str | None = None, url: str | None = None) -> str:
    if bool(twiml) == bool(url):
        raise FunctionError("give exactly one of `twiml` or `url`")
    form = {"To": to, "Twiml": twiml} if twiml else {"To": to, "Url": url}
    payload = _twilio_post("Calls", form, "call")
    return _dumps({"placed": True, "sid": payload.get("sid"), "status": payload.get("status"), "to": to})
