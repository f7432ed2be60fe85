"""Conversations past the number one OTLP request writes itself are written by a worker, without a span more: the
receiver queues them (a bounded number, a few to a task) and the task writes each again without changing it."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import sqlite3
import threading
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenthost.models import Agent, Conversation
from agenttest.celery import app
from tests.traces.conftest import PROTOBUF, TRACES
from tests.traces.dialects.test_genai import VERSIONS, shop_agent
from tests.workers import REDIS_URL, flush_redis_queue, publishing_to_fixture, runs_worker, wait_for  # noqa: F401
from traces.conversations import IMPORT_CONVERSATIONS
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db(transaction=True)

SERVICE = "shop-service"
ORDERS = ("1042", "7", "55")


@pytest.fixture(scope="module")
def three_conversations() -> bytes:
    """Three conversations of pydantic-ai's shop agent (one run each), as one OTLP request of its instrumentation."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = shop_agent(provider, VERSIONS[-1])
    for order in ORDERS:
        agent.run_sync(f"Where is order {order}?")
    body = encode_spans(exporter.get_finished_spans()).SerializeToString()
    provider.shutdown()
    return body


def post(client, token: str, body: bytes) -> None:
    response = client.post(TRACES, body, content_type=PROTOBUF, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content


def written() -> list[str]:
    """The order each written conversation asks about, in the order they were written."""
    return [
        conversation.messages.get(role="user").content.split()[-1].rstrip("?")
        for conversation in Conversation.objects.order_by("pk")
    ]


def queued_keys(path: Path) -> list[list[str]]:
    """The keys of each conversation-import message waiting in an embedded (SQLite) broker."""
    with sqlite3.connect(path) as db:
        payloads = [json.loads(row[0]) for row in db.execute("SELECT payload FROM kombu_message WHERE visible")]
    return [
        json.loads(base64.b64decode(payload["body"]))[0][0]
        for payload in payloads
        if payload["headers"]["task"] == IMPORT_CONVERSATIONS
    ]


@pytest.mark.slow
def test_it_writes_the_conversations_past_the_requests_limit_on_a_worker_without_another_span(
    client, staff_token, three_conversations, publishing_to, settings, tmp_path
):
    Agent.objects.create(name="shop", provider="scripted", model="scripted")
    settings.AGENTTEST_TRACES_CONVERSATIONS_PER_REQUEST = 1
    flush_redis_queue(REDIS_URL)
    publishing_to(REDIS_URL)
    log = tmp_path / "worker.log"

    with runs_worker(REDIS_URL, log):
        post(client, staff_token, three_conversations)
        assert written(), "the request's own, written before it answered (the worker may be writing the rest)"
        wait_for(lambda: len(written()) == 3, what="the worker to write the other two", log_path=log)

    assert sorted(written()) == sorted(ORDERS)
    assert all(c.agent.name == "shop" and c.bound_by == "agent name" for c in Conversation.objects.all())


def test_it_queues_a_bounded_number_of_the_rest_that_a_worker_writes_once_however_often_it_runs(
    client, staff_token, three_conversations, publishing_to, settings, tmp_path
):
    Agent.objects.create(name="shop", provider="scripted", model="scripted")
    settings.AGENTTEST_TRACES_CONVERSATIONS_PER_REQUEST = 1
    settings.AGENTTEST_TRACES_CONVERSATIONS_QUEUED_PER_REQUEST = 1
    path = tmp_path / "broker.sqlite3"
    publishing_to(f"sqla+sqlite:///{path}")

    post(client, staff_token, three_conversations)

    [first] = written()
    [[key]] = queued_keys(path)
    assert key not in Conversation.objects.values_list("trace_key", flat=True)
    app.tasks[IMPORT_CONVERSATIONS].apply(args=[[key]])  # as the worker runs the message
    assert written()[0] == first and len(written()) == 2, "the third waits for its next span: over both limits"
    messages = list(Conversation.objects.get(trace_key=key).messages.values_list("pk", "content"))
    app.tasks[IMPORT_CONVERSATIONS].apply(args=[[key]])  # delivered again
    assert list(Conversation.objects.get(trace_key=key).messages.values_list("pk", "content")) == messages
    assert Conversation.objects.count() == 2


class SilentBroker:
    """A broker that takes connections and never answers (a hung Redis): what each connection sent, kept."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.server.getsockname()[1]}/0"
        self.received: list[bytes] = []
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self.server.accept()
                self.connections.append(connection)
                threading.Thread(target=self._read, args=(connection,), daemon=True).start()

    def _read(self, connection: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := connection.recv(65536):
                self.received.append(data)

    def close(self) -> None:
        self.server.close()
        for connection in self.connections:
            connection.close()


def test_it_answers_200_and_keeps_the_spans_when_the_broker_takes_nothing(
    client, staff_token, three_conversations, publishing_to, settings, caplog
):
    Agent.objects.create(name="shop", provider="scripted", model="scripted")
    settings.AGENTTEST_TRACES_CONVERSATIONS_PER_REQUEST = 1
    silent = SilentBroker()
    publishing_to(silent.url)
    try:
        post(client, staff_token, three_conversations)
    finally:
        silent.close()

    # The broker was asked briefly (the ping, bounded by its timeout) and, as it did not answer, nothing was published
    # to it: no publish and its retries held the exporter's request, however long the machine took.
    sent = b"".join(silent.received)
    assert sent, "the broker was not even pinged"
    assert IMPORT_CONVERSATIONS.encode() not in sent and b"LPUSH" not in sent.upper(), sent[:500]
    assert "not queued for a worker" in caplog.text
    assert len(written()) == 1 and TraceSpan.objects.values("conversation_key").distinct().count() == 3
