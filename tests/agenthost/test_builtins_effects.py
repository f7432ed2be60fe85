"""The side-effect built-ins, run through the executor factory against real local servers and a real database."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import parse_qs

import pytest
from django.contrib.auth.models import User

from agenthost.executor import execute
from agenthost.functions import FunctionContext, FunctionResult
from tests.agenthost.listeners import LocalServer, Received

EMAIL = "util-email-handle_email_sender"
HTTP = "util-http-handle_http_request"
SQL = "util-db-sql_select"
TEXT = "util-twilio-text_message"
CALL = "util-twilio-outbound_phone_call"


def run(name: str, **arguments: Any) -> FunctionResult:
    return execute(name, FunctionContext(name=name, arguments=arguments))


# --- email -----------------------------------------------------------------------------------------------------------


def test_it_sends_the_email_through_the_django_backend(mailoutbox, settings):
    settings.DEFAULT_FROM_EMAIL = "bot@example.com"

    result = run(EMAIL, to="alice@example.com", subject="Your order", body="It shipped.", cc=["bob@example.com"])

    assert not result.error
    assert len(mailoutbox) == 1
    sent = mailoutbox[0]
    assert (sent.to, sent.cc, sent.from_email) == (["alice@example.com"], ["bob@example.com"], "bot@example.com")
    assert (sent.subject, sent.body) == ("Your order", "It shipped.")
    assert json.loads(result.content)["to"] == ["alice@example.com"]


def test_it_sends_one_email_to_a_list_of_recipients(mailoutbox):
    result = run(EMAIL, to=["a@example.com", "b@example.com"], subject="Hi", body="Both of you.")

    assert not result.error
    assert [message.to for message in mailoutbox] == [["a@example.com", "b@example.com"]]


def test_it_refuses_an_invalid_address_and_sends_nothing(mailoutbox):
    result = run(EMAIL, to=["ok@example.com", "not-an-address"], subject="Hi", body="x")

    assert result.error
    assert "not-an-address" in result.content
    assert mailoutbox == []


def test_it_refuses_a_multi_line_subject(mailoutbox):
    result = run(EMAIL, to="ok@example.com", subject="Hi\nBcc: victim@example.com", body="x")

    assert result.error
    assert mailoutbox == []


# --- HTTP ------------------------------------------------------------------------------------------------------------


def test_it_sends_the_http_request_to_an_allowed_host(local_server, settings):
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = [local_server.host_port]
    local_server.responses["/orders"] = (201, "application/json", b'{"id": 7}')

    result = run(HTTP, method="POST", url=f"{local_server.base_url}/orders", body={"item": "book"})

    assert not result.error, result.content
    [request] = local_server.received
    assert (request.method, request.path) == ("POST", "/orders")
    assert json.loads(request.body) == {"item": "book"}
    assert request.headers["Content-Type"] == "application/json"
    answer = json.loads(result.content)
    assert answer["status"] == 201
    assert json.loads(answer["body"]) == {"id": 7}
    assert answer["headers"]["content-type"] == "application/json"


def test_it_sends_a_text_body_and_headers_as_given(local_server, settings):
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]

    result = run(
        HTTP, method="PUT", url=f"{local_server.base_url}/notes/1", headers={"X-Trace": "abc"}, body="plain text"
    )

    assert not result.error, result.content
    [request] = local_server.received
    assert (request.method, request.path, request.body) == ("PUT", "/notes/1", b"plain text")
    assert request.headers["X-Trace"] == "abc"


def test_it_refuses_a_host_that_is_not_allowed(local_server, settings):
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = ["api.example.com", "127.0.0.1:1"]

    result = run(HTTP, method="GET", url=f"{local_server.base_url}/secret")

    assert result.error
    assert "not in AGENTTEST_HTTP_ALLOWED_HOSTS" in result.content
    assert local_server.received == []


def test_it_refuses_every_request_while_the_allow_list_is_empty(local_server, settings):
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = []

    result = run(HTTP, method="GET", url=f"{local_server.base_url}/")

    assert result.error
    assert "set AGENTTEST_HTTP_ALLOWED_HOSTS" in result.content
    assert local_server.received == []


def test_it_refuses_schemes_other_than_http(settings):
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]

    result = run(HTTP, method="GET", url="ftp://127.0.0.1/file")

    assert result.error
    assert "only http and https" in result.content


def test_it_does_not_follow_a_redirect_to_a_host_that_is_not_allowed(local_server, settings):
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = [local_server.host_port]
    with_other_port = local_server.base_url.replace("127.0.0.1", "localhost")
    local_server.redirects["/go"] = f"{with_other_port}/landed"

    result = run(HTTP, method="GET", url=f"{local_server.base_url}/go")

    assert result.error
    assert "localhost" in result.content
    assert [request.path for request in local_server.received] == ["/go"]


def test_it_follows_a_redirect_within_the_allowed_host(local_server, settings):
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = [local_server.host_port]
    local_server.redirects["/old"] = "/new"

    result = run(HTTP, method="GET", url=f"{local_server.base_url}/old")

    assert not result.error, result.content
    assert [request.path for request in local_server.received] == ["/old", "/new"]
    assert json.loads(result.content)["body"] == "hello from the local server"


def test_it_truncates_a_large_response_body(local_server, settings):
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = [local_server.host_port]
    local_server.responses["/big"] = (200, "text/plain", b"x" * 50_000)

    answer = json.loads(run(HTTP, method="GET", url=f"{local_server.base_url}/big").content)

    assert answer["truncated"] is True
    assert len(answer["body"]) == 20_000


def test_it_reports_a_refused_connection_as_an_error(settings):
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = ["127.0.0.1:9"]

    result = run(HTTP, method="GET", url="http://127.0.0.1:9/")

    assert result.error
    assert "failed" in result.content


# --- SQL -------------------------------------------------------------------------------------------------------------


@pytest.fixture
def sql_users(settings) -> list[User]:
    settings.AGENTTEST_SQL_DATABASE = "default"
    return [User.objects.create(username=name, email=f"{name}@example.com") for name in ("ann", "ben", "cat")]


@pytest.mark.django_db
def test_it_returns_rows_of_a_select(sql_users):
    result = run(SQL, sql="SELECT username, email FROM auth_user WHERE username <> 'ben' ORDER BY username")

    assert not result.error, result.content
    answer = json.loads(result.content)
    assert answer["columns"] == ["username", "email"]
    assert answer["rows"] == [["ann", "ann@example.com"], ["cat", "cat@example.com"]]
    assert answer["truncated"] is False


@pytest.mark.django_db
def test_it_accepts_a_with_select_and_a_trailing_semicolon(sql_users):
    sql = "WITH named AS (SELECT username FROM auth_user) SELECT count(*) AS n FROM named; -- all of them"

    result = run(SQL, sql=sql)

    assert not result.error, result.content
    assert json.loads(result.content)["rows"] == [[3]]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE auth_user SET username = 'hacked'",
        "DELETE FROM auth_user",
        "SELECT 1; DELETE FROM auth_user",
        "SELECT username FROM auth_user; UPDATE auth_user SET username = 'hacked'",
        "INSERT INTO auth_user (username) VALUES ('x')",
        "DROP TABLE auth_user",
        "PRAGMA query_only = OFF",
        "SELECT * INTO stolen FROM auth_user",
        "WITH gone AS (DELETE FROM auth_user RETURNING id) SELECT * FROM gone",
    ],
)
def test_it_refuses_anything_but_a_single_select_and_leaves_the_data(sql_users, sql):
    result = run(SQL, sql=sql)

    assert result.error
    assert sorted(User.objects.values_list("username", flat=True)) == ["ann", "ben", "cat"]


@pytest.mark.django_db
def test_it_leaves_the_connection_writable_after_a_query(sql_users):
    run(SQL, sql="SELECT 1")

    User.objects.create(username="dan")

    assert User.objects.filter(username="dan").exists()


@pytest.mark.django_db
def test_it_applies_the_row_limit_and_says_so(sql_users, settings):
    settings.AGENTTEST_SQL_ROW_LIMIT = 2

    answer = json.loads(run(SQL, sql="SELECT username FROM auth_user ORDER BY username").content)

    assert answer["rows"] == [["ann"], ["ben"]]
    assert answer["truncated"] is True
    assert "first 2 rows" in answer["note"]


@pytest.mark.django_db
def test_it_reports_a_failing_query_to_the_model(sql_users):
    result = run(SQL, sql="SELECT nope FROM no_such_table")

    assert result.error
    assert "no_such_table" in result.content


def test_it_says_how_to_configure_sql_when_no_database_is_set(settings):
    settings.AGENTTEST_SQL_DATABASE = ""

    result = run(SQL, sql="SELECT 1")

    assert result.error
    assert "not configured: set AGENTTEST_SQL_DATABASE_URL or AGENTTEST_SQL_DATABASE" in result.content


# --- Twilio ----------------------------------------------------------------------------------------------------------


@pytest.fixture
def twilio(local_server, settings) -> LocalServer:
    settings.AGENTTEST_TWILIO_API_BASE = local_server.base_url
    settings.AGENTTEST_TWILIO_ACCOUNT_SID = "AC123"
    settings.AGENTTEST_TWILIO_AUTH_TOKEN = "s3cret-token"
    settings.AGENTTEST_TWILIO_FROM = "+15550001111"
    # The Twilio endpoints ignore the HTTP allow-list, which stays empty here on purpose.
    settings.AGENTTEST_HTTP_ALLOWED_HOSTS = []
    return local_server


def _form(request: Received) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(request.body.decode()).items()}


def _basic_auth(request: Received) -> str:
    scheme, encoded = request.headers["Authorization"].split(" ", 1)
    assert scheme == "Basic"
    return base64.b64decode(encoded).decode()


def test_it_sends_a_text_message_through_twilio(twilio):
    twilio.responses["/2010-04-01/Accounts/AC123/Messages.json"] = (
        201,
        "application/json",
        json.dumps({"sid": "SM42", "status": "queued"}).encode(),
    )

    result = run(TEXT, to="+15552223333", body="Your table is ready")

    assert not result.error, result.content
    [request] = twilio.received
    assert (request.method, request.path) == ("POST", "/2010-04-01/Accounts/AC123/Messages.json")
    assert _form(request) == {"To": "+15552223333", "From": "+15550001111", "Body": "Your table is ready"}
    assert _basic_auth(request) == "AC123:s3cret-token"
    answer = json.loads(result.content)
    assert (answer["sid"], answer["status"]) == ("SM42", "queued")


def test_it_places_a_call_with_twiml_through_twilio(twilio):
    twilio.responses["/2010-04-01/Accounts/AC123/Calls.json"] = (
        201,
        "application/json",
        json.dumps({"sid": "CA9", "status": "queued"}).encode(),
    )

    result = run(CALL, to="+15552223333", twiml="<Response><Say>Hello</Say></Response>")

    assert not result.error, result.content
    [request] = twilio.received
    assert request.path == "/2010-04-01/Accounts/AC123/Calls.json"
    assert _form(request) == {
        "To": "+15552223333",
        "From": "+15550001111",
        "Twiml": "<Response><Say>Hello</Say></Response>",
    }
    assert _basic_auth(request) == "AC123:s3cret-token"
    assert json.loads(result.content)["sid"] == "CA9"


def test_it_places_a_call_with_a_twiml_url(twilio):
    twilio.responses["/2010-04-01/Accounts/AC123/Calls.json"] = (201, "application/json", b'{"sid": "CA1"}')

    result = run(CALL, to="+15552223333", url="https://example.com/twiml.xml")

    assert not result.error, result.content
    assert _form(twilio.received[0])["Url"] == "https://example.com/twiml.xml"


def test_it_needs_exactly_one_of_twiml_or_url(twilio):
    neither = run(CALL, to="+15552223333")
    both = run(CALL, to="+15552223333", twiml="<Response/>", url="https://example.com/t.xml")

    assert neither.error and both.error
    assert "exactly one of" in neither.content
    assert twilio.received == []


def test_it_surfaces_twilios_error_message_without_the_token(twilio):
    twilio.responses["/2010-04-01/Accounts/AC123/Messages.json"] = (
        400,
        "application/json",
        json.dumps(
            {"code": 21211, "message": "The 'To' number +1555 is not a valid phone number.", "status": 400}
        ).encode(),
    )

    result = run(TEXT, to="+1555", body="hi")

    assert result.error
    assert "The 'To' number +1555 is not a valid phone number." in result.content
    assert "21211" in result.content
    assert "s3cret-token" not in result.content


def test_it_names_the_missing_twilio_settings(local_server, settings):
    settings.AGENTTEST_TWILIO_API_BASE = local_server.base_url
    settings.AGENTTEST_TWILIO_ACCOUNT_SID = "AC123"
    settings.AGENTTEST_TWILIO_AUTH_TOKEN = ""
    settings.AGENTTEST_TWILIO_FROM = ""

    for result in (run(TEXT, to="+15552223333", body="hi"), run(CALL, to="+15552223333", twiml="<Response/>")):
        assert result.error
        assert "AGENTTEST_TWILIO_AUTH_TOKEN" in result.content
        assert "AGENTTEST_TWILIO_FROM" in result.content
        assert "AGENTTEST_TWILIO_ACCOUNT_SID" not in result.content
    assert local_server.received == []
