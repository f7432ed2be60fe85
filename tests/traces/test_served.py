"""Issue 35's findings through the real receiver: `agenttest serve` as the Procfile starts it (gunicorn), on the test
database, sent OTLP over HTTP — protobuf and JSON, gzipped as exporters send them — with an ingest-only token, and a
real Celery worker for the conversations a request queues. Each outcome is read from the database or over HTTP.

One server for the module (starting gunicorn costs seconds of both cores); each test's rows are its own
(transactional_db), which the server reads as they are committed. The findings' fuller cases are pinned through
Django's test client beside each: test_retention, test_ingest_tokens (finding 2 and the session's 415, already through
a served process), test_redaction_property, test_who_sees_production, test_keys_and_bindings, test_cut_history,
test_bounded_cost, test_incremental, test_out_of_order, test_traces_page."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from django.contrib.auth.hashers import make_password
from django.utils import timezone
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from rest_framework.authtoken.models import Token

from agenthost.models import Agent, Conversation, Message
from bench.traces_ingest import growing_spans
from cases.models import Case
from recording.services import recording_create
from tests.test_web_path import BASE_DIR, procfile_web_server, server_env, signed_in
from tests.traces.conftest import JSON, PROTOBUF, TRACES, json_body, stored_texts
from tests.traces.test_conversations import FIND_ORDER
from tests.traces.test_cut_history import FIRST, SECOND
from tests.traces.test_keys_and_bindings import run_in
from tests.traces.test_receiver_conversations import transcript
from tests.traces.test_traces_page import exported, rows
from tests.workers import REDIS_URL, flush_redis_queue, runs_worker, wait_for
from traces.conversations import trace_conversation_bind, trace_conversations_import
from traces.models import ConversationMapping, TraceSpan
from traces.services import ingest_token_create

# A production receiver runs on PostgreSQL; the same findings in-process run on both engines (the other modules here).
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.production_engine]

# Only a hang guard: engineers' tests share two cores, and gunicorn's worker imports all of Django first.
SERVER_START = 180
PASSWORD = "served-password-123"
TIMEOUT = 120


@pytest.fixture(scope="module")
def served(django_db_setup, tmp_path_factory) -> Iterator[tuple[str, dict[str, str]]]:
    """The base URL of `agenttest serve`, and its environment (for the commands a test runs beside it). One
    conversation a request is written by the request itself; the rest are queued, on Redis, for a worker."""
    var_dir = tmp_path_factory.mktemp("served")
    env = server_env(var_dir, AGENTTEST_BROKER_URL=REDIS_URL, AGENTTEST_TRACES_CONVERSATIONS_PER_REQUEST="1",
                     AGENTTEST_TRACES_RETENTION_DAYS="30")
    with procfile_web_server(env, var_dir / "gunicorn.log", ready_within=SERVER_START) as base_url:
        yield base_url, env


@pytest.fixture
def base_url(served) -> str:
    return served[0]


@pytest.fixture
def key() -> str:
    """An ingest-only token's key: what a production service's exporter holds."""
    return ingest_token_create(name="production").key


@pytest.fixture
def shop() -> Agent:
    return Agent.objects.create(name="shop", provider="scripted", model="scripted", functions=[FIND_ORDER])


def otlp_json(spans) -> bytes:
    return json_body(encode_spans(spans))


def post(base_url: str, key: str, body: bytes, *, content_type: str = PROTOBUF, gzipped: bool = True,
         expect: int = 200) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": content_type}
    if gzipped:
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    answer = httpx.post(f"{base_url}{TRACES}", content=body, headers=headers, timeout=TIMEOUT)
    assert answer.status_code == expect, answer.text[:2000]
    return answer


def send(base_url: str, key: str, spans, **how) -> httpx.Response:
    return post(base_url, key, encode_spans(spans).SerializeToString(), **how)


def named(spans, conversation_id: str) -> bytes:
    """The spans as OTLP/JSON, every one naming `conversation_id` (as a service that keeps its own ids does)."""
    body = json.loads(otlp_json(spans))
    for resource in body["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                span["attributes"] = [kv for kv in span.get("attributes", []) if kv["key"] != "gen_ai.conversation.id"]
                span["attributes"].append({"key": "gen_ai.conversation.id", "value": {"stringValue": conversation_id}})
    return json.dumps(body).encode()


def run_command(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "agenttest", *args], cwd=BASE_DIR, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_finding_1_retention_deletes_what_a_served_conversation_left(served, key, shop):
    base_url, env = served
    send(base_url, key, run_in("shop", "Where is order 1042? Mail ana@example.com"))
    [conversation] = Conversation.objects.all()
    [draft] = recording_create(conversation=conversation).cases
    assert TraceSpan.objects.exists() and Message.objects.filter(conversation=conversation).exists()
    TraceSpan.objects.update(received_at=timezone.now() - timedelta(days=31))

    run_command(env, "traces", "sweep")

    counted = (TraceSpan.objects.count(), Conversation.objects.exclude(trace_key="").count(),
               Message.objects.filter(conversation_id=conversation.pk).count(),
               Case.objects.filter(pk=draft.pk).count(), ConversationMapping.objects.count())
    assert counted == (0, 0, 0, 0, 0)
    assert "ana@example.com" not in stored_texts()


def test_findings_3_and_5_secrets_as_json_are_not_stored_and_two_services_keep_their_conversations(
    base_url, key, shop
):
    secrets = {
        "eu": ('{"api_key": "ZqEuApiKey8d7f6a5s4d3"}', "ZqEuApiKey8d7f6a5s4d3"),
        "us": ('{"Authorization": "Basic ZqUsBasicPw0a9s8d7f"} postgres://shop:ZqUsDbPassword77x@db:5432/o',
               "ZqUsBasicPw0a9s8d7f", "ZqUsDbPassword77x"),
    }
    for region, order in (("eu", "1042"), ("us", "7")):
        text, *_ = secrets[region]
        post(base_url, key, named(run_in(f"shop-{region}", f"Where is order {order}? {text}"), "support-4711"),
             content_type=JSON)

    conversations = {c.trace_service: c for c in Conversation.objects.filter(trace_key="support-4711")}
    assert sorted(conversations) == ["shop-eu", "shop-us"]
    assert transcript(conversations["shop-eu"])[0][1].startswith("Where is order 1042?")
    assert transcript(conversations["shop-us"])[0][1].startswith("Where is order 7?")
    everything = stored_texts()
    for _, *planted in secrets.values():
        for secret in planted:
            assert secret not in everything, secret


def test_finding_4_a_served_conversations_draft_is_hidden_from_members_over_http(base_url, key, shop,
                                                                                  django_user_model):
    send(base_url, key, run_in("shop-production-eu", "Where is order 1042?"))
    conversation = Conversation.objects.get()
    [draft] = recording_create(conversation=conversation).cases
    member = Token.objects.create(user=django_user_model.objects.create_user("reader")).key
    staff = Token.objects.create(user=django_user_model.objects.create_user("reviewer", is_staff=True)).key

    def read(token: str, path: str) -> httpx.Response:
        return httpx.get(f"{base_url}{path}", headers={"Authorization": f"Token {token}"}, timeout=TIMEOUT)

    assert read(staff, f"/api/cases/{draft.pk}/").status_code == 200
    assert read(member, f"/api/cases/{draft.pk}/").status_code == 404
    assert draft.pk not in {case["id"] for case in read(member, "/api/cases/?page_size=100").json()["results"]}

    Case.objects.filter(pk=draft.pk).update(enabled=True)
    shown = read(member, f"/api/cases/{draft.pk}/")
    assert shown.status_code == 200
    for name in ("shop-production-eu", conversation.trace_key, *conversation.trace_ids):
        assert name not in shown.text, name


@pytest.mark.parametrize("trace_names", ["an agent agenttest knows", "no agent agenttest knows"])
def test_finding_6_a_staff_binding_holds_over_later_served_spans(base_url, key, trace_names):
    support = Agent.objects.create(name="support", provider="scripted", model="scripted", functions=[FIND_ORDER])
    if trace_names == "an agent agenttest knows":
        Agent.objects.create(name="shop", provider="scripted", model="scripted", functions=[FIND_ORDER])
    spans = exported("shop-service", "Where is order 1042?", "And order 7?")
    invokes = [index for index, span in enumerate(spans) if span.name.startswith("invoke_agent")]
    first, second = spans[: invokes[0] + 1], spans[invokes[0] + 1 :]
    send(base_url, key, first)
    bound = trace_conversation_bind(key=TraceSpan.objects.values_list("conversation_key", flat=True).first(),
                                    agent="support")

    send(base_url, key, second)

    [conversation] = Conversation.objects.all()
    assert (conversation.pk, conversation.agent, conversation.bound_by) == (bound.pk, support, "chosen")
    assert ("user", "And order 7?") in transcript(conversation), "the later spans are in it, not dropped"


def test_finding_7_a_history_over_the_limit_makes_no_message_of_raw_json(base_url, key, shop):
    send(base_url, key, exported("shop-service", FIRST, SECOND))

    conversation = Conversation.objects.get()
    said = transcript(conversation)
    assert said[0] == ("user", FIRST) and said[-1] == ("assistant", "Order 7 has shipped.")
    assert [role for role, _ in said].count("user") == 1, "the second question was only in the cut part"
    assert not conversation.messages.filter(content__contains='"parts"').exists()


def test_finding_8_the_8_kb_bomb_is_refused_at_once(base_url, key):
    values = ",".join(["{}"] * 2_500_000)
    body = ('{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"' + "0" * 31 + '1","spanId":"' + "0" * 15
            + '1","name":"bomb","attributes":[{"key":"gen_ai.input.messages","value":{"arrayValue":{"values":['
            + values + "]}}}]}]}]}]}").encode()
    assert len(gzip.compress(body)) < 16_000

    started = time.monotonic()
    refused = post(base_url, key, body, content_type=JSON, expect=413)

    assert time.monotonic() - started < 10, "refused before parsing, not after 28-65 s of CPU"
    assert "AGENTTEST_TRACES_MAX_VALUES" in refused.text
    assert not TraceSpan.objects.exists()


def test_finding_8_spans_one_a_request_in_any_order_make_one_conversation_continued_as_a_whole_import(
    base_url, key
):
    Agent.objects.create(name="bench-growing", provider="scripted", model="scripted")
    bodies = growing_spans(4 * 4, service="bench-growing")
    # The second turn's spans backwards (its invoke_agent span, naming the conversation, first), the rest in order.
    for body in [*bodies[:4], *reversed(bodies[4:8]), *bodies[8:]]:
        post(base_url, key, body)

    [conversation] = Conversation.objects.all()
    assert ConversationMapping.objects.filter(conversation=conversation).exists(), "continued span by span"
    continued = list(conversation.messages.order_by("seq").values_list("role", "content", "tool_call_id"))
    conversation.delete()
    trace_conversations_import(keys=["bench-growing-conversation"])
    assert list(Conversation.objects.get().messages.order_by("seq").values_list(
        "role", "content", "tool_call_id")) == continued
    assert len(continued) == 4 * 5


def test_finding_8_the_conversations_past_a_requests_limit_are_written_by_a_worker(base_url, key, shop, tmp_path):
    spans = [*exported("shop-service", "Where is order 1042?"), *exported("shop-service", "Where is order 7?"),
             *exported("shop-service", "Where is order 55?")]
    flush_redis_queue(REDIS_URL)
    log = tmp_path / "worker.log"

    with runs_worker(REDIS_URL, log):
        post(base_url, key, otlp_json(spans), content_type=JSON)
        wait_for(lambda: Conversation.objects.count() == 3, timeout=TIMEOUT, what="the worker to write two",
                 log_path=log)

    questions = sorted(c.messages.get(role="user").content for c in Conversation.objects.all())
    assert questions == ["Where is order 1042?", "Where is order 55?", "Where is order 7?"]


def test_finding_9_the_traces_page_over_http_for_staff_and_members(base_url, key, django_user_model):
    Agent.objects.create(name="storefront", provider="scripted", model="scripted", functions=[FIND_ORDER])
    send(base_url, key, exported("storefront", "Where is order 1042?"), gzipped=False)
    for name, is_staff in (("staff", True), ("member", False)):
        django_user_model.objects.create(username=name, is_staff=is_staff,
                                         password=make_password(PASSWORD, hasher="pbkdf2_sha256"))

    with signed_in(base_url, "staff", PASSWORD) as client:
        [row] = rows(client.get("/traces/conversations/").text)
    assert "Where is order 1042?" in row and ">storefront</td>" in row and "<code>orders-model</code>" in row
    assert '<time datetime="' in row and "by its service&#x27;s name" in row
    with signed_in(base_url, "member", PASSWORD) as client:
        refused = client.get("/traces/conversations/")
    assert refused.status_code == 403 and "<h1>Staff only</h1>" in refused.text and "/static/" in refused.text


def test_an_ingest_key_gets_403_from_the_served_app_beyond_the_receiver(base_url, key):
    for method, path in (("GET", "/"), ("GET", "/api/cases/"), ("DELETE", "/api/agents/1/"),
                         ("GET", "/static/agenttest/app.css")):
        answer = httpx.request(method, f"{base_url}{path}", headers={"Authorization": f"Bearer {key}"},
                               timeout=TIMEOUT)
        assert answer.status_code == 403, (method, path)
