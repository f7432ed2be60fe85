"""Secrets in any shape are redacted before storage (issue 35, finding 3): JSON keys and values (escaped inside
another JSON string too), headers, URLs with credentials, Basic and Bearer tokens, agenttest's own tokens and the key
names AGENTTEST_REDACT_KEYS adds — generated into nested structures by hypothesis and posted to the receiver, none is
found in any stored span, imported conversation or message."""

from __future__ import annotations

import json
import string

import pytest
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost.models import Conversation, Message
from agenthost.redaction import MARKER, redact, redact_text
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.traces.conftest import CONTENT, PROTOBUF, TRACES, request, span
from traces.models import TraceSpan

SECRET_KEYS = ("api_key", "X-Api-Key", "password", "db_password", "Authorization", "client_secret", "session_token",
               "Cookie", "openai-api-key", "X-Shop-Pin")
# The last of SECRET_KEYS is no built-in name: the deployment names it (AGENTTEST_REDACT_KEYS).
CONFIGURED_KEYS = [r"x-shop-pin"]
# "Zq" first: never a run of hex digits that a trace or span id could hold.
secrets_ = st.text(string.ascii_letters + string.digits, min_size=14, max_size=30).map(lambda text: "Zq" + text)
keys = st.sampled_from(SECRET_KEYS)


@st.composite
def planted(draw) -> tuple[object, str]:
    """A value holding one secret in one of the shapes production traces carry secrets in, and the secret."""
    secret = draw(secrets_)
    key = draw(keys)
    shape = draw(st.sampled_from([
        "dict", "json", "json in json", "url", "basic", "basic json", "bearer", "ingest", "api token", "prose",
        "header list", "json list in prose",
    ]))
    if shape == "api token":
        secret = draw(st.text("0123456789abcdef", min_size=40, max_size=40))
    value = {
        "dict": {key: secret},
        "json": json.dumps({"order": "1042", key: secret}),
        "json in json": json.dumps({"arguments": json.dumps({key: secret, "note": "x"})}),
        "url": f"connect to postgres://shop:{secret}@db.internal:5432/orders please",
        "basic": f"Authorization: Basic {secret}",
        "basic json": json.dumps({"headers": {"Authorization": f"Basic {secret}"}}),
        "bearer": f"sent Bearer {secret} upstream",
        "ingest": f"OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20agt_ingest_{secret}",
        "api token": f"curl -H 'Authorization: Token {secret}'",
        "prose": f"the {key.lower()}={secret} was set",
        "header list": {"http.headers": {key: [secret]}},
        "json list in prose": f"sent {json.dumps({'http.headers': {key: ['a-value', secret]}})} upstream",
    }[shape]
    return value, secret


def nested(leaf: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, min_size=1, max_size=3),
            st.dictionaries(st.sampled_from(["data", "items", "meta", "content", "result"]), inner, min_size=1,
                            max_size=3),
        ),
        max_leaves=6,
    )


@st.composite
def documents(draw) -> tuple[object, list[str]]:
    plants = draw(st.lists(planted(), min_size=1, max_size=4))
    values = [value for value, _ in plants]
    document = draw(nested(st.sampled_from(values) | st.sampled_from(["hello", "order 1042", "max_tokens: 1024"])))
    # Every plant in the document at least once, wherever the nesting put the others.
    return {"all": values, "nested": document}, [secret for _, secret in plants]


@settings(max_examples=200, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(documents())
def test_it_redacts_every_planted_secret_in_any_nesting(django_settings_keys, document_and_secrets):
    document, secrets = document_and_secrets
    dumped = json.dumps(redact(document))
    for secret in secrets:
        assert secret not in dumped, (secret, dumped)
    assert MARKER in dumped


@pytest.fixture
def django_settings_keys(settings):
    settings.AGENTTEST_REDACT_KEYS = CONFIGURED_KEYS


def test_it_keeps_a_tools_schema_whose_parameter_is_named_like_a_secret(django_settings_keys):
    schema = {"name": "login", "parameters": {"type": "object", "properties": {
        "password": {"type": "string", "description": "The user's password."}, "api_key": {"type": "string"},
    }, "required": ["password"]}}
    assert redact(schema) == schema
    assert json.loads(redact_text(json.dumps(schema))) == schema


def test_it_redacts_a_secret_keys_list_or_object_written_as_json_in_prose_and_keeps_the_rest(django_settings_keys):
    text = ('retrying with {"headers": {"Cookie": ["a=Zq1", "b=Zq2"]}, "max_tokens": 5} and '
            '{"token": {"credentials": ["Zq3"]}}')
    assert redact_text(text) == (
        'retrying with {"headers": {"Cookie": ["[redacted]", "[redacted]"]}, "max_tokens": 5} and '
        '{"token": {"credentials": ["Zq3"]}}'.replace("Zq3", MARKER)
    )
    # An object under a secret key is read key by key, as in JSON text: a tool's schema keeps its parameter's type.
    schema = 'the tool takes {"password": {"type": "string", "minLength": 8}}'
    assert redact_text(schema) == schema
    # Not JSON after the key, or nested past what the decoder reads: left to the other patterns, never an error.
    assert redact_text('"api_key": [oops') == '"api_key": [oops'
    deep = '"token": ' + "[" * 5_000 + '"Zq4"' + "]" * 5_000
    assert isinstance(redact_text(deep), str)


def test_it_keeps_json_json_and_numbers_numbers(django_settings_keys):
    text = json.dumps({"api_key": 'a"b\\c-secret-value', "max_tokens": 1024, "note": "password: 12"})
    assert json.loads(redact_text(text)) == {"api_key": MARKER, "max_tokens": 1024, "note": "password: 12"}
    assert redact({"gen_ai.usage.input_tokens": 12, "token": ""}) == {"gen_ai.usage.input_tokens": 12, "token": ""}


@pytest.mark.django_db
@settings(max_examples=30, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(st.lists(documents(), min_size=1, max_size=3), st.sampled_from(["shop", "billing"]))
def test_it_stores_no_planted_secret_from_spans_posted_to_the_receiver(
    django_settings_keys, staff_token, posted, service
):
    TraceSpan.objects.all().delete()
    spans = []
    secrets = []
    for number, (document, planted_secrets) in enumerate(posted, start=1):
        secrets.extend(planted_secrets)
        spans.append(span(trace=number, span_id=1, **{
            CONTENT: json.dumps([{"role": "user", "parts": [{"type": "text", "content": json.dumps(document)}]}]),
            "gen_ai.tool.call.arguments": document,
            "gen_ai.conversation.id": f"conversation-{number}",
        }))
    answer = Client().generic(
        "POST", TRACES, request(*spans, service=service).SerializeToString(), content_type=PROTOBUF,
        HTTP_AUTHORIZATION=f"Bearer {staff_token}",
    )
    assert answer.status_code == 200, answer.content
    assert TraceSpan.objects.count() == len(spans)
    stored = json.dumps([
        list(TraceSpan.objects.values()), list(Conversation.objects.values()), list(Message.objects.values())
    ], default=str)
    for secret in secrets:
        assert secret not in stored
