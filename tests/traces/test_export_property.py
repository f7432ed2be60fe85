"""Issue 35's whole-receiver property: generated OTLP exports — random services (sharing conversation ids),
conversations keyed by id or by their one trace, turns, nesting under spans of no dialect, sizes, secrets in many
shapes — sent in random orders of arrival and random batches, protobuf or JSON, gzipped or not. Whatever was generated:

- no secret is stored anywhere (every table, every column);
- no conversation mixes messages of two services' conversations;
- no conversation is imported twice;
- no stored message is one that no span said (each is a generated message, its secret redacted);
- every request costs at most the documented CPU time and memory (README, "Production traces": a constant plus a
  share of its body), measured per request with time.process_time and tracemalloc."""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
from dataclasses import dataclass, field

import pytest
from django.test import Client
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agenthost.models import Agent, Conversation
from agenthost.redaction import MARKER
from tests.traces.conftest import JSON, PROTOBUF, TRACES, json_body, request, span, stored_texts
from tests.traces.test_redaction_property import CONFIGURED_KEYS, planted
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db

SERVICES = ("shop", "billing", "search")
# Few, so that two services using the same conversation id is common.
CONVERSATION_IDS = ("c-1", "c-2", "c-3")
# What README's "Production traces" promises of one request once the process has served one: CPU and Python memory
# within a constant and a share of the body it sent (decompressed). Measured under tracemalloc, which slows Python.
# The CPU bound here is ten times README's (0.5 s + 2 s per MB; bench/traces_ingest.py prints the figures): CPU
# seconds grow on a loaded machine too, and a verdict must not hang on its speed (issue 40) — what it catches is
# the cost that grows with what a small body expands to (28-65 s for the 8 KB body of issue 35), not a slower core.
CPU_SECONDS = 5.0
CPU_SECONDS_PER_MB = 20.0
MEMORY_BYTES = 16 * 1024 * 1024
MEMORY_PER_BODY_BYTE = 40


@dataclass
class Said:
    role: str
    text: str  # as the span says it
    kept: str  # what may be stored: the text up to its secret, when it holds one
    secret: str = ""


@dataclass
class Generated:
    service: str
    conversation_id: str  # "": keyed by its one trace
    turns: list[tuple[Said, Said]] = field(default_factory=list)


@st.composite
def exports(draw) -> tuple[list[Generated], list, list[str]]:
    """Conversations, their spans (a service's, in the order generated) and every secret planted."""
    conversations: list[Generated] = []
    spans: list[tuple[str, object]] = []
    secrets: list[str] = []
    used: set[tuple[str, str]] = set()
    trace = 0
    for number in range(draw(st.integers(1, 4))):
        service = draw(st.sampled_from(SERVICES))
        conversation_id = draw(st.sampled_from(("", *CONVERSATION_IDS)))
        if (service, conversation_id) in used:
            conversation_id = ""
        used.add((service, conversation_id))
        generated = Generated(service, conversation_id)
        history: list[dict] = []
        for turn in range(1 if not conversation_id else draw(st.integers(1, 3))):
            trace += 1
            filler = "x" * draw(st.sampled_from((0, 10, 2_000, 40_000)))
            question = f"conversation {number} question {turn} {filler}"
            secret = ""
            if draw(st.booleans()):
                value, secret = draw(planted())
                secrets.append(secret)
                said = Said("user", f"{question} {value if isinstance(value, str) else json.dumps(value)}",
                            question, secret)
            else:
                said = Said("user", question, question)
            answer = Said("assistant", f"conversation {number} answer {turn}", f"conversation {number} answer {turn}")
            generated.turns.append((said, answer))
            history.append({"role": "user", "parts": [{"type": "text", "content": said.text}]})
            named = {"gen_ai.conversation.id": conversation_id} if conversation_id else {}
            # The agent's span, under as many spans of no dialect (a web request, a job) as drawn.
            depth = draw(st.integers(0, 2))
            for level in range(depth):
                spans.append((service, span(trace=trace, span_id=10 + level, parent=10 + level - 1 if level else 0,
                                            name=f"POST /chat {level}", start=trace * 10_000 + level,
                                            end=trace * 10_000 + 9_000)))
            parent = 10 + depth - 1 if depth else 0
            spans.append((service, span(trace=trace, span_id=1, parent=parent, name=f"invoke_agent {service}",
                                        start=trace * 10_000 + 100, end=trace * 10_000 + 8_000, **{
                "gen_ai__operation__name": "invoke_agent", "gen_ai__agent__name": service, **{
                    key.replace(".", "__"): value for key, value in named.items()}})))
            output = [{"role": "assistant", "parts": [{"type": "text", "content": answer.text}]}]
            spans.append((service, span(trace=trace, span_id=2, parent=1, name="chat orders-model",
                                        start=trace * 10_000 + 200, end=trace * 10_000 + 7_000, **{
                "gen_ai__operation__name": "chat", "gen_ai__request__model": "orders-model",
                "gen_ai__input__messages": json.dumps(history), "gen_ai__output__messages": json.dumps(output),
                **{key.replace(".", "__"): value for key, value in named.items()}})))
            history.append(output[0])
        conversations.append(generated)
    return conversations, spans, secrets


@dataclass
class Sent:
    body: bytes  # as decoded by the receiver, before gzip
    content_type: str
    gzipped: bool


@st.composite
def arrivals(draw, spans: list) -> list[Sent]:
    """The spans in a random order, in random batches (each batch one request per service, as an exporter's
    resources are), each request protobuf or JSON, gzipped or not."""
    order = list(spans)
    draw(st.randoms(use_true_random=False)).shuffle(order)
    sent = []
    while order:
        size = draw(st.integers(1, len(order)))
        batch, order = order[:size], order[size:]
        for service in dict.fromkeys(service for service, _ in batch):
            message = request(*(one for owner, one in batch if owner == service), service=service)
            if draw(st.booleans()):
                sent.append(Sent(json_body(message), JSON, draw(st.booleans())))
            else:
                sent.append(Sent(message.SerializeToString(), PROTOBUF, draw(st.booleans())))
    return sent


def post(staff_token: str, sent: Sent) -> tuple[float, int]:
    """The request's answer checked; its CPU seconds and the most bytes of Python memory it held at once."""
    headers = {"HTTP_CONTENT_ENCODING": "gzip"} if sent.gzipped else {}
    body = gzip.compress(sent.body) if sent.gzipped else sent.body
    tracemalloc.start()
    started = time.process_time()
    try:
        answer = Client().generic("POST", TRACES, body, content_type=sent.content_type,
                                  HTTP_AUTHORIZATION=f"Bearer {staff_token}", **headers)
        cpu = time.process_time() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert answer.status_code == 200, answer.content
    return cpu, peak


def owner_of(content: str, conversations: list[Generated]) -> tuple[int, Said] | None:
    """The generated conversation and message a stored message's text is, or None: no span said it."""
    for number, generated in enumerate(conversations):
        for turn in generated.turns:
            for said in turn:
                if content == said.text or (said.secret and content.startswith(said.kept) and MARKER in content
                                            and said.secret not in content):
                    return number, said
    return None


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
], phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(data=st.data())
def test_generated_exports_store_no_secret_merge_nothing_duplicate_nothing_invent_nothing_within_bounds(
    settings_keys, staff_token, warm, data
):
    Conversation.objects.all().delete()
    TraceSpan.objects.all().delete()
    conversations, spans, secrets = data.draw(exports())
    for service in SERVICES:
        Agent.objects.get_or_create(name=service, defaults={"provider": "scripted", "model": "scripted"})

    for sent in data.draw(arrivals(spans)):
        cpu, peak = post(staff_token, sent)
        megabytes = len(sent.body) / 1e6
        assert cpu <= CPU_SECONDS + CPU_SECONDS_PER_MB * megabytes, f"{cpu:.2f} s of CPU for {megabytes:.2f} MB"
        assert peak <= MEMORY_BYTES + MEMORY_PER_BODY_BYTE * len(sent.body), f"{peak / 1e6:.1f} MB held"

    everything = stored_texts()
    for secret in secrets:
        assert secret not in everything, secret
    imported = list(Conversation.objects.filter(source=Conversation.Source.TRACE).prefetch_related("messages"))
    assert len(imported) == len(conversations), "each generated conversation imported once"
    seen: set[int] = set()
    for conversation in imported:
        owners = set()
        for message in conversation.messages.order_by("seq"):
            found = owner_of(message.content, conversations)
            assert found is not None, f"no span said {message.role} {message.content[:200]!r}"
            number, said = found
            assert said.role == message.role
            owners.add(number)
        assert len(owners) == 1, f"conversation #{conversation.pk} mixes generated conversations {owners}"
        [number] = owners
        assert conversations[number].service == conversation.trace_service, "merged across services"
        assert number not in seen, f"generated conversation {number} imported twice"
        seen.add(number)
        said = [one.kept for turn in conversations[number].turns for one in turn]
        stored = [message.content for message in conversation.messages.order_by("seq")]
        assert [content[: len(kept)] for content, kept in zip(stored, said, strict=True)] == said, "each once, in order"


@pytest.fixture
def warm(staff_token) -> None:
    """One request served first: the process's first imports the mapping's modules, once in its life."""
    post(staff_token, Sent(request().SerializeToString(), PROTOBUF, False))


@pytest.fixture
def settings_keys(settings):
    settings.AGENTTEST_REDACT_KEYS = CONFIGURED_KEYS


def test_it_can_tell_a_message_no_span_said():
    """The check itself: a text the generator never made, or a secret left in, is no message of it."""
    generated = Generated("shop", "", [(Said("user", "q1 Zqsecret", "q1", "Zqsecret"), Said("assistant", "a", "a"))])
    assert owner_of(f"q1 {MARKER}", [generated]) == (0, generated.turns[0][0])
    assert owner_of("q1 Zqsecret [redacted]", [generated]) is None
    assert owner_of("invented", [generated]) is None
