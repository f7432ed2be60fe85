"""Ingest-only tokens (issue 35, finding 2): what a production service's exporter holds may post spans to /v1/traces
and do nothing else — 403 on every other URL and method, found from the URL resolver as the auth probe finds them
(tests/test_security.py) —, is made with the admin or `agenttest traces token create`, shown once, kept only as a hash,
bound to a service when asked, and refused once revoked. And a signed-in session with its CSRF token posts OTLP/JSON
(finding 9: it was answered 415)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from io import StringIO

import httpx
import pytest
from django.contrib.auth.hashers import make_password
from django.core.management import call_command
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost.models import Agent
from cases.models import Case, Suite
from runs.models import Run
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.test_security import _routes, app_routes, concrete, world  # noqa: F401 (world: a fixture)
from tests.test_web_path import BASE_DIR, procfile_web_server, server_env, signed_in
from tests.traces.conftest import JSON, PROTOBUF, TRACES, request, span, stored
from tests.workers import WAIT_SECONDS
from traces.models import INGEST_KEY_PREFIX, IngestToken, TraceSpan
from traces.services import ingest_token_create, ingest_token_revoke

METHODS = ("get", "post", "put", "patch", "delete", "head", "options", "trace")
STAFF_PASSWORD = "staff-password-123"
# Only a hang guard: seven engineers' tests share two cores, and gunicorn's worker imports all of Django first.
SERVER_START = 180


def export(token: str, *, service: str = "shop", trace: int = 1, client: Client | None = None):
    body = request(span(trace=trace, span_id=1), service=service).SerializeToString()
    return (client or Client()).generic(
        "POST", TRACES, body, content_type=PROTOBUF, HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def admin_urls() -> list[str]:
    """Every route of Django's admin the URL resolver knows, made concrete: a converter's or a group's value is 1, an
    alternation its first choice (the middleware reads no path, so any id will do)."""
    urls = set()
    for route in _routes():
        if route.startswith("admin/"):
            route = re.sub(r"\(\?P<\w+>([^|)]*)[^)]*\)", r"\1", route)
            route = re.sub(r"<(?:\w+:)?\w+>", "1", route)
            urls.add("/" + re.sub(r"[\^$]", "", route).replace(".*", "1").replace(".+", "1"))
    return sorted(urls)


@pytest.mark.django_db
def test_it_takes_spans_from_an_ingest_token_and_refuses_it_on_every_other_url_and_method(world):  # noqa: F811
    key = ingest_token_create(name="shop production").key
    before = (Agent.objects.count(), Suite.objects.count(), Case.objects.count(), Run.objects.count())
    client = Client()
    probed = 0
    admin = admin_urls()
    assert {"/admin/", "/admin/traces/ingesttoken/1/change/", "/admin/auth/user/add/"} <= set(admin), admin[:20]
    for url in [concrete(route, world) for route in app_routes()] + admin + ["/static/agenttest/app.css"]:
        for method in METHODS:
            if url == TRACES and method == "post":
                continue
            for scheme in ("Bearer", "Token"):
                response = getattr(client, method)(url, HTTP_AUTHORIZATION=f"{scheme} {key}")
                assert response.status_code == 403, f"{method.upper()} {url} with an ingest token: {response}"
                probed += 1
    assert probed > 2 * len(METHODS) * 30
    assert (Agent.objects.count(), Suite.objects.count(), Case.objects.count(), Run.objects.count()) == before
    assert stored() == []

    assert export(key).status_code == 200
    assert stored() == [("00000000000000000000000000000001", "0000000000000001")]


@pytest.mark.django_db
def test_it_keeps_only_a_hash_of_the_key_and_refuses_it_once_revoked():
    issued = ingest_token_create(name="shop production")
    row = IngestToken.objects.get()
    assert issued.key.startswith(INGEST_KEY_PREFIX) and len(issued.key) > 40
    values = [str(value) for value in IngestToken.objects.values_list().get()]
    assert not any(issued.key in value or value in issued.key for value in values if len(value) > 20)
    assert issued.key.startswith(row.key_prefix)
    assert export(issued.key).status_code == 200

    ingest_token_revoke(token=row)

    refused = export(issued.key, trace=2)
    assert refused.status_code == 401
    assert stored() == [("00000000000000000000000000000001", "0000000000000001")]
    assert export(INGEST_KEY_PREFIX + "not-a-key-anyone-was-given").status_code == 401


@pytest.mark.django_db
def test_it_takes_a_service_bound_tokens_own_service_only():
    key = ingest_token_create(name="shop production", service_name="shop").key
    body = request(span(trace=1, span_id=1), service="shop")
    body.resource_spans.extend(request(span(trace=2, span_id=1), service="billing").resource_spans)

    mixed = Client().generic(
        "POST", TRACES, body.SerializeToString(), content_type=PROTOBUF, HTTP_AUTHORIZATION=f"Bearer {key}"
    )

    assert mixed.status_code == 403
    assert "'billing'" in mixed.content.decode(errors="replace")
    assert stored() == []
    assert export(key, service="billing").status_code == 403
    assert export(key, service="shop").status_code == 200
    assert TraceSpan.objects.get().service_name == "shop"


@pytest.mark.django_db
@settings(max_examples=25, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
# Latin-1 without spaces: what an HTTP header carries as one word.
@given(key=st.text(st.characters(min_codepoint=33, max_codepoint=255), min_size=1, max_size=60))
def test_it_refuses_any_other_bearer_key_that_looks_like_an_ingest_key(key):
    response = export(INGEST_KEY_PREFIX + key)
    assert response.status_code in (400, 401, 403), response
    assert response.status_code != 200


@pytest.mark.django_db
def test_it_makes_lists_and_revokes_tokens_with_the_command():
    out, err = StringIO(), StringIO()
    call_command("traces", "token", "create", "shop production", "--service", "shop", stdout=out, stderr=err)
    key = out.getvalue().strip()
    token = IngestToken.objects.get()
    assert key.startswith(INGEST_KEY_PREFIX) and "shown this once" in err.getvalue()
    assert export(key).status_code == 200

    listing = StringIO()
    call_command("traces", "token", "list", stdout=listing)
    assert f"#{token.pk}\t{token.key_prefix}…\tshop production\tshop\tactive" in listing.getvalue()
    assert key not in listing.getvalue()

    call_command("traces", "token", "revoke", str(token.pk), stdout=StringIO())
    assert export(key, trace=2).status_code == 401
    with pytest.raises(Exception, match="no ingest token #999"):
        call_command("traces", "token", "revoke", "999", stdout=StringIO())
    with pytest.raises(Exception, match="name"):
        call_command("traces", "token", "create", "  ", stdout=StringIO(), stderr=StringIO())
    assert IngestToken.objects.count() == 1


@pytest.mark.django_db
def test_it_makes_a_token_in_the_admin_showing_its_key_once(admin_client, admin_user):
    answer = admin_client.post(
        "/admin/traces/ingesttoken/add/", {"name": "shop production", "service_name": "shop"}, follow=True
    )

    assert answer.status_code == 200
    token = IngestToken.objects.get()
    assert (token.name, token.service_name, token.created_by) == ("shop production", "shop", admin_user)
    shown = re.search(rf"{INGEST_KEY_PREFIX}[A-Za-z0-9_\-]+", answer.content.decode())
    assert shown, "the key is shown on the page after saving"
    assert export(shown.group(0)).status_code == 200
    again = admin_client.get(f"/admin/traces/ingesttoken/{token.pk}/change/").content.decode()
    assert shown.group(0) not in again and token.key_prefix in again

    admin_client.post("/admin/traces/ingesttoken/", {
        "action": "revoke_selected", "_selected_action": [str(token.pk)],
    })
    assert export(shown.group(0), trace=2).status_code == 401


@pytest.mark.slow
def test_it_posts_spans_with_a_commands_token_through_agenttest_serve_and_nothing_else(
    transactional_db, django_user_model, tmp_path
):
    env = server_env(tmp_path)
    made = subprocess.run(
        [sys.executable, "-m", "agenttest", "traces", "token", "create", "shop production"],
        cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=WAIT_SECONDS, check=True,
    )
    key = made.stdout.strip()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": JSON}
    body = json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "shop"}}]},
        "scopeSpans": [{"spans": [{"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "chat"}]}],
    }]})
    with procfile_web_server(env, tmp_path / "gunicorn.log", ready_within=SERVER_START) as base_url:
        posted = httpx.post(f"{base_url}{TRACES}", content=body, headers=headers, timeout=30)
        assert posted.status_code == 200, posted.text
        for method, path in (("GET", "/api/agents/"), ("POST", "/api/runs/"), ("GET", "/traces/conversations/"),
                             ("GET", TRACES), ("GET", "/admin/")):
            answer = httpx.request(method, f"{base_url}{path}", headers=headers, timeout=30)
            assert answer.status_code == 403, (method, path, answer.status_code)
        subprocess.run(
            [sys.executable, "-m", "agenttest", "traces", "token", "revoke", str(IngestToken.objects.get().pk)],
            cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=WAIT_SECONDS, check=True,
        )
        assert httpx.post(f"{base_url}{TRACES}", content=body, headers=headers, timeout=30).status_code == 401
    assert stored() == [("00000000000000000000000000000001", "0000000000000001")]


@pytest.mark.slow
def test_it_takes_otlp_json_from_a_signed_in_staff_session_with_its_csrf_token(
    transactional_db, django_user_model, tmp_path
):
    django_user_model.objects.create(
        username="staff", is_staff=True, password=make_password(STAFF_PASSWORD, hasher="pbkdf2_sha256")
    )
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "chat"},
    ]}]}]})
    with procfile_web_server(
        server_env(tmp_path), tmp_path / "gunicorn.log", ready_within=SERVER_START
    ) as base_url, \
            signed_in(base_url, "staff", STAFF_PASSWORD) as client:
        posted = client.post(TRACES, content=body, headers={"Content-Type": JSON})
        assert posted.status_code == 200, posted.text
        del client.headers["X-CSRFToken"]
        forged = client.post(TRACES, content=body.replace("1\"", "2\""), headers={"Content-Type": JSON})
        assert forged.status_code == 403 and "CSRF" in forged.text
    assert stored() == [("00000000000000000000000000000001", "0000000000000001")]
