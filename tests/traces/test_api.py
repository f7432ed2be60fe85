"""The receiver, POST /v1/traces (traces/api.py), through Django's test client: every answer as OTLP/HTTP says, in
the request's encoding, and nothing stored of a request it refuses."""

from __future__ import annotations

import gzip
import json

import pytest
from django.core.cache import cache
from django.test import Client
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.traces.conftest import (
    CONTENT,
    JSON,
    NOT_KEPT,
    PROTOBUF,
    TRACES,
    abyss_span,
    framed,
    framed_spans,
    request,
    span,
    stored,
    with_peak_memory,
)
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db


def post(body: bytes, token: str | None, content_type: str = PROTOBUF, scheme: str = "Bearer", **headers: str):
    extra = {"HTTP_AUTHORIZATION": f"{scheme} {token}"} if token is not None else {}
    return Client().generic("POST", TRACES, body, content_type=content_type, **extra, **headers)


def status_of(response) -> status_pb2.Status:
    if response["Content-Type"] == PROTOBUF:
        return status_pb2.Status.FromString(response.content)
    answer = status_pb2.Status()
    from google.protobuf import json_format

    json_format.Parse(response.content, answer)
    return answer


def test_it_stores_a_protobuf_export_and_answers_full_success_in_protobuf(staff_token):
    body = request(span(trace=1, span_id=1, **{CONTENT: "hello", NOT_KEPT: "Bearer abcdefgh12345678"}),
                   span(trace=1, span_id=2, parent=1)).SerializeToString()

    response = post(gzip.compress(body), staff_token, HTTP_CONTENT_ENCODING="gzip")

    assert response.status_code == 200 and response["Content-Type"] == PROTOBUF
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert not answer.HasField("partial_success"), "OTLP: left unset on full success"
    row = TraceSpan.objects.get(span_id="0000000000000001")
    assert (row.service_name, row.scope_name, row.kind, row.attributes) == ("shop", "test.scope", 3, {CONTENT: "hello"})
    # Sent again (an exporter retrying after a lost answer): accepted, stored once.
    assert post(body, staff_token, scheme="Token").status_code == 200
    assert TraceSpan.objects.count() == 2


def test_it_answers_partial_success_in_json_for_spans_refused_one_by_one(staff_token):
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "kept"},
        {"traceId": "0" * 32, "spanId": "0" * 15 + "2", "name": "zero trace id"},
        {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "3", "parentSpanId": "0" * 15 + "9", "name": "orphan"},
    ]}]}]}

    response = post(json.dumps(body).encode(), staff_token, JSON)

    assert response.status_code == 200 and response["Content-Type"] == JSON
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert partial["errorMessage"].startswith("1 span(s) rejected: span 'zero trace id'")
    assert sorted(TraceSpan.objects.values_list("name", flat=True)) == ["kept", "orphan"]
    assert post(b"{}", staff_token, JSON).content == b"{}"


@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
def test_it_answers_who_may_not_import_with_a_status_in_the_requests_encoding(staff_token, member_token,
                                                                             content_type):
    body = request(span()).SerializeToString() if content_type == PROTOBUF else b"{}"

    cases = [(None, "Bearer", 401), ("not-a-token", "Bearer", 401), (staff_token, "Basic", 401),
             (member_token, "Bearer", 403), (member_token, "Token", 403)]
    for token, scheme, expected in cases:
        response = post(body, token, content_type, scheme=scheme)
        assert response.status_code == expected, (token, scheme, response.content)
        assert response["Content-Type"] == content_type
        answer = status_of(response)
        assert answer.message and answer.code == (16 if expected == 401 else 7)
        if expected == 401:
            assert response["WWW-Authenticate"] == "Token"
    assert status_of(post(body, member_token, content_type)).message == "Only staff users may import traces."
    assert stored() == []


def test_it_refuses_bodies_it_cannot_take_with_nothing_stored(staff_token):
    good = request(span()).SerializeToString()
    refused = [
        (post(b"\x0a\x05\xff", staff_token), 400),
        (post(framed(span().SerializeToString(), abyss_span()), staff_token), 400),
        (post(b'{"resourceSpans": [}', staff_token, JSON), 400),
        (post(b"\x1f\x8b not gzip", staff_token, HTTP_CONTENT_ENCODING="gzip"), 400),
        (post(good, staff_token, "text/plain"), 415),
        (post(good, staff_token, HTTP_CONTENT_ENCODING="br"), 415),
        # Claimed 50 MB: refused on the header, before a byte of the body is read (nothing more was sent).
        (post(good, staff_token, CONTENT_LENGTH=str(50 * 1024 * 1024)), 413),
        (post(good, staff_token, CONTENT_LENGTH="", HTTP_TRANSFER_ENCODING="chunked"), 411),
        (post(good, staff_token, CONTENT_LENGTH="12x"), 400),
    ]
    for response, expected in refused:
        assert response.status_code == expected, response.content
        assert status_of(response).message
    malformed = status_of(refused[0][0])
    violation = error_details_pb2.BadRequest()
    assert malformed.details[0].Unpack(violation)
    assert violation.field_violations[0].description == malformed.message
    assert "AGENTTEST_TRACES_MAX_BODY_BYTES" in status_of(refused[6][0]).message
    assert stored() == []


def test_it_refuses_a_million_spans_without_decoding_them(staff_token, settings):
    settings.AGENTTEST_TRACES_MAX_BODY_BYTES = 4 * 1024 * 1024
    body = framed_spans(b"\x12\x00" * 10**6)  # the smallest encoded span, repeated

    response, peak = with_peak_memory(lambda: post(body, staff_token))

    # Counted, never decoded: 10⁶ decoded spans would take hundreds of MB; the request's own copies of the 2 MB body
    # are all it holds. (How fast: bench/traces_ingest.py.)
    assert peak < 16 * (1 << 20), peak
    assert response.status_code == 413
    assert "holds 1000000 spans" in status_of(response).message
    assert stored() == []


def test_it_answers_429_with_retry_after_over_the_rate(staff_token, settings):
    cache.clear()
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "traces": "2/minute"}}
    body = request(span()).SerializeToString()

    statuses = [post(body, staff_token).status_code for _ in range(2)]
    throttled = post(body, staff_token)

    assert statuses == [200, 200]
    assert throttled.status_code == 429
    assert 1 <= int(throttled["Retry-After"]) <= 60
    assert status_of(throttled).code == 8
    cache.clear()
