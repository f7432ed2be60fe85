"""The OTLP/HTTP traces receiver: `POST /v1/traces`, at the site's root, where every exporter sends once given the
site's address as its endpoint (OTEL_EXPORTER_OTLP_ENDPOINT=https://agenttest.example.com).

Answers as the OTLP specification says (opentelemetry-proto's docs/specification.md, "OTLP/HTTP"), in the request's
own encoding (application/x-protobuf or application/json): 200 with an ExportTraceServiceResponse — its
partial_success counting the spans refused one by one (an invalid id), the rest stored; otherwise a google.rpc.Status
and nothing stored: 400 a body that cannot be decoded, 401 no or a wrong API token (`Authorization: Token <key>` or
`Bearer <key>`, as OTEL_EXPORTER_OTLP_HEADERS sends it; an ingest-only token as `Bearer <key>`), 403 a user who is
not staff or an ingest token bound to another service, 411 a body without a length,
413 over AGENTTEST_TRACES_MAX_BODY_BYTES (before or after decompression) or AGENTTEST_TRACES_MAX_SPANS, 415 another
media type or content encoding, 429 with Retry-After over the "traces" throttle rate, 503 with Retry-After when the
database is busy. A token is never checked for CSRF (a signed-in session, which the view takes like every API view,
is).

Once the spans are stored, the conversations they belong to are written as agenttest conversations, or brought up to
date in place, exactly as `agenttest traces import` writes them (traces.conversations): at most
AGENTTEST_TRACES_CONVERSATIONS_PER_REQUEST of them in the request, the next
AGENTTEST_TRACES_CONVERSATIONS_QUEUED_PER_REQUEST by a worker (traces.tasks).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db import OperationalError
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.exceptions import APIException, AuthenticationFailed, NotAuthenticated, PermissionDenied, Throttled
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from common.api import IsStaff
from common.inputs import parse_whole_number
from traces.conversations import trace_conversations_write
from traces.models import INGEST_KEY_PREFIX, IngestToken
from traces.otlp import JSON, PROTOBUF, Limits, OtlpRefused, body_too_large, media_type
from traces.selectors import ingest_token_for_key
from traces.services import traces_ingest

THROTTLE_SCOPE = "traces"
_READ_CHUNK = 64 * 1024
_BUSY_RETRY_AFTER_SECONDS = 5
_CODES = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    403: code_pb2.PERMISSION_DENIED,
    411: code_pb2.INVALID_ARGUMENT,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    503: code_pb2.UNAVAILABLE,
}


class BearerTokenAuthentication(TokenAuthentication):
    """An agenttest API token written the way OpenTelemetry users write one: `Authorization: Bearer <key>`."""

    keyword = "Bearer"


class IngestTokenAuthentication(BaseAuthentication):
    """An ingest-only token (traces.models.IngestToken) as OTLP exporters send a header: `Authorization: Bearer <key>`.
    It authenticates no user: request.auth is the token, which only this view's permission accepts."""

    def authenticate(self, request: Request) -> tuple[AnonymousUser, IngestToken] | None:
        words = get_authorization_header(request).split()
        if len(words) != 2 or words[0].lower() != b"bearer" or not words[1].startswith(INGEST_KEY_PREFIX.encode()):
            return None
        try:
            key = words[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid or revoked ingest token.") from None
        token = ingest_token_for_key(key)
        if token is None:
            raise AuthenticationFailed("Invalid or revoked ingest token.")
        return AnonymousUser(), token


class StaffOrIngestToken(IsStaff):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, IngestToken) or super().has_permission(request, view)


class CsrfCheckedSession(SessionAuthentication):
    """A signed-in session, checked for CSRF on Django's own request: DRF's check reads the DRF request's POST, which
    parses the body with the view's parsers — none here (the body is OTLP), so a valid session and CSRF token were
    answered 415."""

    def enforce_csrf(self, request: Request) -> None:
        # DRF's check runs Django's CSRF middleware on the request it is given; the stubs ask for DRF's request.
        super().enforce_csrf(request._request)  # type: ignore[arg-type]


class TracesThrottle(ScopedRateThrottle):
    """The "traces" rate, read when a request comes (DRF's own class reads the rates once, at import); an ingest
    token counts as its own client, as a user does."""

    def get_rate(self) -> str | None:
        # Rates are text ("60/min"), the stubs declare numbers; `scope` is set (the view's) before a rate is read.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)  # type: ignore[return-value,arg-type]

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if isinstance(request.auth, IngestToken):
            return self.cache_format % {"scope": self.scope, "ident": f"ingest-{request.auth.pk}"}
        return super().get_cache_key(request, view)


class AnyAccept(BaseContentNegotiation):
    """Exporters send whatever Accept they like (or none): the answer is in the request's encoding regardless."""

    def select_parser(self, request: Request, parsers: Iterable[Any]) -> Any:
        return None

    def select_renderer(self, request: Request, renderers: Iterable[Any], format_suffix: str | None = None) -> Any:
        first = next(iter(renderers))
        return first, first.media_type


@extend_schema(exclude=True)  # OTLP's own protocol, described by its specification, not by this API's schema
class TracesExportApi(APIView):
    # Token first: its keyword is the WWW-Authenticate challenge of a 401. An ingest token before the Bearer staff
    # token, which would look its key up among users' tokens. A signed-in session is taken too, as by every API view
    # (and, being a session, checked for CSRF); exporters send a token, which never is.
    authentication_classes = [
        TokenAuthentication, IngestTokenAuthentication, BearerTokenAuthentication, CsrfCheckedSession
    ]
    permission_classes = [StaffOrIngestToken]
    staff_only_message = "Only staff users may import traces."
    throttle_classes = [TracesThrottle]
    throttle_scope = THROTTLE_SCOPE
    content_negotiation_class = AnyAccept

    def post(self, request: Request) -> HttpResponse:
        content_type = request.META.get("CONTENT_TYPE", "")
        media = media_type(content_type)
        report = traces_ingest(
            body=_body(request), content_type=content_type,
            content_encoding=request.META.get("HTTP_CONTENT_ENCODING", ""),
            only_service=request.auth.service_name if isinstance(request.auth, IngestToken) else "",
        )
        # The spans are committed: the conversations they belong to are written or brought up to date, a bounded
        # number in this request and the next ones by a worker. One that cannot be yet (no agent of its names, no
        # model call yet, no content) is left as spans; its next span, `agenttest traces import` or the page binds it.
        trace_conversations_write(keys=report.conversations)
        response = trace_service_pb2.ExportTraceServiceResponse()
        if report.rejected:
            response.partial_success.rejected_spans = report.rejected
            response.partial_success.error_message = report.rejection_message
        return _encoded(response, media, status=200)

    # DRF finalizes any HttpResponse (an OTLP answer is protobuf or JSON, not a Response); the stubs want a Response.
    def handle_exception(self, exc: Exception) -> HttpResponse:  # type: ignore[override]
        headers: dict[str, str] = {}
        if isinstance(exc, NotAuthenticated | AuthenticationFailed):
            status = 401
            headers["WWW-Authenticate"] = self.get_authenticate_header(self.request) or "Token"
        elif isinstance(exc, PermissionDenied):
            status = 403
        elif isinstance(exc, Throttled):
            status = 429
            # Set by Throttled.__init__; the stubs leave it out.
            headers["Retry-After"] = str(max(1, math.ceil(exc.wait or 1)))  # type: ignore[attr-defined]
        elif isinstance(exc, OtlpRefused):
            status = exc.status
        elif isinstance(exc, APIException):
            status = exc.status_code
        elif isinstance(exc, OperationalError):
            # A locked or unreachable database: retryable, as OTLP counts a 503; nothing was stored.
            status = 503
            headers["Retry-After"] = str(_BUSY_RETRY_AFTER_SECONDS)
            exc = OtlpRefused(503, "the database is busy; try again")
        else:
            return super().handle_exception(exc)
        message = str(exc.detail) if isinstance(exc, APIException) else str(exc)
        media = _answer_media(self.request)
        response = _encoded(_status(status, message), media, status=status)
        for name, value in headers.items():
            response[name] = value
        return response


def _body(request: Request) -> bytes:
    """The body, read up to its declared length — refused (413) before a byte is read when that is over the limit."""
    limits = Limits.from_settings()
    declared = (request.META.get("CONTENT_LENGTH") or "").strip()
    if not declared:
        if request.META.get("HTTP_TRANSFER_ENCODING"):
            raise OtlpRefused(411, "send the body with a Content-Length (chunked transfer encoding is not taken)")
        return b""
    length = parse_whole_number(declared)
    if length is None:
        raise OtlpRefused(400, f"Content-Length must be a whole number, got {declared[:40]!r}")
    if length > limits.max_body_bytes:
        raise body_too_large(f"the body is {length} bytes", limits)
    chunks: list[bytes] = []
    remaining = length
    stream = request.stream
    while remaining > 0 and stream is not None:
        chunk = stream.read(min(_READ_CHUNK, remaining))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    if remaining > 0:
        raise OtlpRefused(400, f"the body ended {remaining} bytes short of its Content-Length")
    return b"".join(chunks)


def _answer_media(request: Request | None) -> str:
    """An answer is in the request's encoding: protobuf when it sent protobuf, JSON otherwise (a person's curl)."""
    content_type = request.META.get("CONTENT_TYPE", "") if request is not None else ""
    return PROTOBUF if content_type.split(";", 1)[0].strip().lower() == PROTOBUF else JSON


def _status(status: int, message: str) -> status_pb2.Status:
    answer = status_pb2.Status(code=_CODES.get(status, code_pb2.UNKNOWN), message=message)
    if status == 400:
        answer.details.add().Pack(error_details_pb2.BadRequest(
            field_violations=[error_details_pb2.BadRequest.FieldViolation(field="body", description=message)]
        ))
    return answer


def _encoded(message: Message, media: str, *, status: int) -> HttpResponse:
    if media == PROTOBUF:
        return HttpResponse(message.SerializeToString(), status=status, content_type=PROTOBUF)
    return HttpResponse(json_format.MessageToJson(message, indent=None), status=status, content_type=JSON)

