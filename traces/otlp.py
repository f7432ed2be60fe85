"""OTLP trace requests → `SpanRecord`s: what the receiver and `agenttest traces import` share.

Bounded at every step, so that no body can cost more than its limits: the body (and its decompressed form, inflated
incrementally up to the limit — a gzip bomb stops there), the spans in one request (counted before any span is
decoded), the nesting of attribute values (deeper levels are cut, never recursed into) and the text kept per
attribute (cut with a marker). Strings that are not UTF-8 are read with U+FFFD in place of the bad bytes, as are
NULs and, in JSON, lone surrogate escapes — text no database stores.

Protobuf is read with the message types of `opentelemetry-proto`, in two steps: the request with each span left as
its encoded bytes (so 10⁶ spans are counted, and refused, before a single one is decoded), then each span. Both
message types are the official descriptors with every `string` field read as `bytes` (the wire format is the same):
protobuf's own UTF-8 check would refuse a whole request for one bad byte. OTLP/JSON is the proto3 JSON mapping but
for ids written as hex (base64, the mapping's own form, is read too) and enums as integers; it is read with
`google.protobuf.json_format` into the official request type, then follows the protobuf path.

Only attributes the mapping reads (`kept`, by default `traces.dialects.attribute_kept`) are kept; the conversation key
(`gen_ai.conversation.id`, else OpenInference's `session.id`) is read before that. Kept values are redacted by the
rules recordings follow (agenthost's redaction) before they are cut to size.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from agenthost.seams import redact
from traces.dialects import attribute_kept
from traces.spans import CUT, TRUNCATED, SpanEvent, SpanRecord

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MEDIA_TYPES = (PROTOBUF, JSON)
ENCODINGS = ("gzip", "deflate")

# Levels of arrays and key-value lists kept inside one attribute value; a deeper one is replaced by CUT.
MAX_VALUE_DEPTH = 8
MAX_NAME_CHARS = 1000  # span and event names, attribute keys, status messages
MAX_LABEL_CHARS = 200  # service and scope names, conversation keys: indexed columns
# Where a span names its conversation: the GenAI semantic conventions, then OpenInference.
CONVERSATION_ATTRIBUTES = ("gen_ai.conversation.id", "session.id")
_CONVERSATION_KEYS = tuple(name.encode() for name in CONVERSATION_ATTRIBUTES)
_MAX_TIME_NS = 2**63 - 1  # a signed 64-bit column; fixed64 reaches 2**64 - 1
_REJECTED_SHOWN = 5
_LONE_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class OtlpRefused(Exception):
    """A request refused as a whole, nothing of it stored: the HTTP status OTLP prescribes, and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int
    max_spans: int
    max_value_chars: int
    max_values: int = 200_000

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            max_body_bytes=settings.AGENTTEST_TRACES_MAX_BODY_BYTES,
            max_spans=settings.AGENTTEST_TRACES_MAX_SPANS,
            max_value_chars=settings.AGENTTEST_TRACES_MAX_VALUE_CHARS,
            max_values=settings.AGENTTEST_TRACES_MAX_VALUES,
        )


@dataclass(frozen=True)
class DecodedSpan:
    record: SpanRecord
    # The conversation the span names itself (CONVERSATION_ATTRIBUTES), "" when it names none.
    conversation_id: str = ""


@dataclass
class DecodedRequest:
    spans: list[DecodedSpan] = field(default_factory=list)
    # One line per span refused on its own (an invalid id or time); the others are stored.
    rejected: list[str] = field(default_factory=list)

    def rejection_message(self) -> str:
        if not self.rejected:
            return ""
        shown = "; ".join(self.rejected[:_REJECTED_SHOWN])
        more = f"; and {len(self.rejected) - _REJECTED_SHOWN} more" if len(self.rejected) > _REJECTED_SHOWN else ""
        return f"{len(self.rejected)} span(s) rejected: {shown}{more}"


def dialect_attribute_kept() -> Callable[[str], bool]:
    """The dialect mapping's policy of attribute names it reads."""
    return attribute_kept


def media_type(content_type: str) -> str:
    """The request's media type, lower-cased and without parameters; 415 unless it is one OTLP/HTTP defines."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in MEDIA_TYPES:
        raise OtlpRefused(415, f"Content-Type must be {PROTOBUF} or {JSON}, got {content_type[:100]!r}")
    return media


def request_decode(
    *,
    body: bytes,
    content_type: str,
    content_encoding: str = "",
    kept: Callable[[str], bool] | None = None,
    limits: Limits | None = None,
) -> DecodedRequest:
    """The spans of one ExportTraceServiceRequest body. Raises OtlpRefused (400 undecodable, 413 over a limit, 415 a
    media type or encoding not taken) when the body cannot be taken as a whole."""
    limits = limits or Limits.from_settings()
    media = media_type(content_type)
    if len(body) > limits.max_body_bytes:
        raise body_too_large(f"the body is {len(body)} bytes", limits)
    body = _decompressed(body, content_encoding, limits)
    request = _request_from_json(body, limits) if media == JSON else _request_from_protobuf(body, limits)
    return _decoded(request, kept or dialect_attribute_kept(), limits)


def _json_text_read(text: str) -> Any:
    """JSON text as Python values, read as OTLP/JSON bodies are: lone surrogate escapes become U+FFFD; OtlpRefused
    (400) when it is not JSON (or nests too deep to be read)."""
    try:
        document = json.loads(text)
    except RecursionError:
        raise OtlpRefused(400, "the request nests too deep to be read as JSON") from None
    except ValueError as exc:
        raise OtlpRefused(400, f"the request is not JSON: {exc}") from None
    if _LONE_SURROGATE_ESCAPE.search(text):
        document = _storable_strings(document)
    return document


# --- Bodies --------------------------------------------------------------------------------------------------------


def body_too_large(what: str, limits: Limits) -> OtlpRefused:
    return OtlpRefused(413, f"{what}; at most {limits.max_body_bytes} bytes are taken, before and after "
                            "decompression (AGENTTEST_TRACES_MAX_BODY_BYTES)")


def _decompressed(body: bytes, content_encoding: str, limits: Limits) -> bytes:
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ENCODINGS:
        raise OtlpRefused(415, f"Content-Encoding must be gzip, deflate or none, got {content_encoding[:100]!r}")
    if not body:
        return body
    # gzip may hold several members one after another; deflate (RFC 9110: the zlib format) holds one.
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    out = bytearray()
    pending = body
    try:
        while pending:
            inflater = zlib.decompressobj(wbits)
            while not inflater.eof:
                # Never more than one byte past the limit at a time: a bomb is refused, not inflated.
                chunk = inflater.decompress(pending, limits.max_body_bytes + 1 - len(out))
                pending = inflater.unconsumed_tail
                out += chunk
                if len(out) > limits.max_body_bytes:
                    raise body_too_large(f"the body is over {limits.max_body_bytes} bytes once decompressed", limits)
                if not chunk and not pending:
                    raise OtlpRefused(400, f"the {encoding} body is truncated")
            pending = inflater.unused_data
            if pending and encoding == "deflate":
                raise OtlpRefused(400, "the deflate body has data after its end")
    except zlib.error as exc:
        raise OtlpRefused(400, f"the body is not valid {encoding}: {exc}") from None
    return bytes(out)


# --- Protobuf ------------------------------------------------------------------------------------------------------


# A message of the lenient types, built at run time (_lenient_types): the checker knows none of its fields.
LenientMessage = Any


@functools.cache
def _lenient_types() -> tuple[type[Message], type[Message]]:
    """(request, span): the official message types with every string field read as bytes, and — in the request —
    each span kept as its encoded bytes, a scope's attributes (never kept) too."""
    pool = descriptor_pool.DescriptorPool()
    for module in (common_pb2, resource_pb2, trace_pb2, trace_service_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        for message in _message_protos(proto.message_type):
            for item in message.field:
                as_bytes = item.type == FieldDescriptor.TYPE_STRING or (message.name, item.name) in (
                    ("ScopeSpans", "spans"), ("InstrumentationScope", "attributes")
                )
                if as_bytes:
                    item.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                    item.ClearField("type_name")
        pool.Add(proto)
    return (
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName(trace_service_pb2.ExportTraceServiceRequest.DESCRIPTOR.full_name)
        ),
        message_factory.GetMessageClass(pool.FindMessageTypeByName(trace_pb2.Span.DESCRIPTOR.full_name)),
    )


def _message_protos(messages: Any) -> Iterator[descriptor_pb2.DescriptorProto]:
    for message in messages:
        yield message
        yield from _message_protos(message.nested_type)


def _request_from_protobuf(body: bytes, limits: Limits) -> LenientMessage:
    # The request is decoded with its resources' attributes: those are counted first.
    if _wire_values(body, limits.max_values, root=_REQUEST) > limits.max_values:
        raise OtlpRefused(413, f"the request's resources hold over {limits.max_values} attribute values "
                               "(AGENTTEST_TRACES_MAX_VALUES)")
    request_type, _ = _lenient_types()
    try:
        return request_type.FromString(body)
    except DecodeError as exc:
        raise OtlpRefused(400, f"the request is not an ExportTraceServiceRequest in protobuf: {exc}") from None


# --- JSON ----------------------------------------------------------------------------------------------------------

_ID_SIZES = {"traceId": 16, "trace_id": 16, "spanId": 8, "span_id": 8, "parentSpanId": 8, "parent_span_id": 8}


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def _request_from_json(body: bytes, limits: Limits) -> LenientMessage:
    # Every value, event, link and span of OTLP/JSON is an object: counted (outside strings, at C speed) before
    # json.loads and json_format build millions of them from a small compressed body.
    objects = _JSON_STRING.sub(b"", body).count(b"{")
    if objects > limits.max_values + 3 * limits.max_spans:
        raise OtlpRefused(413, f"the request holds {objects} JSON objects; at most {limits.max_values} attribute "
                               "values, events and links are taken in one request (AGENTTEST_TRACES_MAX_VALUES)")
    return _request_from_document(_json_text_read(body.decode("utf-8-sig", errors="replace")), limits)


def _request_from_document(document: Any, limits: Limits) -> LenientMessage:
    if not isinstance(document, dict):
        raise OtlpRefused(400, "the request must be a JSON object (an ExportTraceServiceRequest)")
    spans = list(_json_spans(document))
    if len(spans) > limits.max_spans:
        raise OtlpRefused(413, _too_many(len(spans), limits))
    for span in spans:
        _json_ids_as_base64(span)
        for link in span.get("links") or ():
            if isinstance(link, dict):
                _json_ids_as_base64(link)
    request = trace_service_pb2.ExportTraceServiceRequest()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise OtlpRefused(400, f"the request is not an ExportTraceServiceRequest in OTLP/JSON: {exc}") from None
    return _request_from_protobuf(request.SerializeToString(), limits)


def _json_spans(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The span objects of a JSON request, where it has the request's shape (json_format refuses any other)."""
    for resource_spans in _json_list(document, "resourceSpans", "resource_spans"):
        for scope_spans in _json_list(resource_spans, "scopeSpans", "scope_spans"):
            for span in _json_list(scope_spans, "spans", "spans"):
                if isinstance(span, dict):
                    yield span


def _json_list(parent: Any, name: str, proto_name: str) -> list[Any]:
    if not isinstance(parent, dict):
        return []
    items = parent.get(name, parent.get(proto_name))
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _json_ids_as_base64(item: dict[str, Any]) -> None:
    """OTLP/JSON writes ids in hex, where the proto3 mapping json_format reads expects base64: rewritten in place.
    A text that is neither becomes one byte, which the span's validation then refuses with the span named."""
    for name, size in _ID_SIZES.items():
        value = item.get(name)
        if not isinstance(value, str) or not value:
            continue
        raw = _hex_or_base64(value, size)
        item[name] = base64.b64encode(raw if raw is not None else b"\x00").decode("ascii")


def _hex_or_base64(text: str, size: int) -> bytes | None:
    if len(text) == 2 * size:
        try:
            return bytes.fromhex(text)
        except ValueError:
            return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == size else None


def _storable_strings(document: Any) -> Any:
    """`document` with every lone surrogate in its strings and keys replaced by U+FFFD (without recursion)."""
    root = [document]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        container, index = stack.pop()
        value = container[index]
        if isinstance(value, str):
            container[index] = _UNSTORABLE.sub("\ufffd", value)
        elif isinstance(value, list):
            stack.extend((value, position) for position in range(len(value)))
        elif isinstance(value, dict):
            cleaned = {_UNSTORABLE.sub("\ufffd", key): item for key, item in value.items()}
            container[index] = cleaned
            stack.extend((cleaned, key) for key in cleaned)
    return root[0]


# --- Spans ---------------------------------------------------------------------------------------------------------


def _too_many(count: int, limits: Limits) -> str:
    return (
        f"the request holds {count} spans; at most {limits.max_spans} are taken in one request "
        "(AGENTTEST_TRACES_MAX_SPANS): send smaller batches (the SDK's OTEL_BSP_MAX_EXPORT_BATCH_SIZE)"
    )


def _decoded(request: LenientMessage, kept: Callable[[str], bool], limits: Limits) -> DecodedRequest:
    count = sum(len(scope_spans.spans) for resource_spans in request.resource_spans
                for scope_spans in resource_spans.scope_spans)
    if count > limits.max_spans:
        raise OtlpRefused(413, _too_many(count, limits))
    _, span_type = _lenient_types()
    # The same few names on every span: asked once each per request.
    kept = functools.lru_cache(maxsize=4096)(kept)
    decoded = DecodedRequest()
    budget = limits.max_values
    for resource_spans in request.resource_spans:
        resource_attributes = resource_spans.resource.attributes
        service = _label(_text(next(
            (item.value.string_value for item in resource_attributes if item.key == b"service.name"), b""
        )))
        resource = _attributes(resource_attributes, kept)
        for scope_spans in resource_spans.scope_spans:
            scope = _label(_text(scope_spans.scope.name))
            for encoded in scope_spans.spans:
                # Counted on the wire first: a span is decoded only within what is left of the request's budget.
                values = _wire_values(encoded, budget)
                if values > budget:
                    budget = 0
                    decoded.rejected.append(
                        f"span {len(decoded.spans) + len(decoded.rejected) + 1} of the request: over the "
                        f"{limits.max_values} attribute values, events and links taken in one request "
                        "(AGENTTEST_TRACES_MAX_VALUES); send it in a smaller batch"
                    )
                    continue
                budget -= values
                try:
                    span: LenientMessage = span_type.FromString(encoded)
                except DecodeError as exc:
                    raise OtlpRefused(400, f"span {len(decoded.spans) + len(decoded.rejected) + 1} of the request "
                                           f"cannot be decoded: {exc}") from None
                problem = _span_problem(span)
                if problem:
                    decoded.rejected.append(f"span {_name(span)!r} ({_hex(span.trace_id)}/{_hex(span.span_id)}): "
                                            f"{problem}")
                    continue
                decoded.spans.append(_span(span, service=service, scope=scope, resource=resource, kept=kept))
    return _finished(decoded, limits)


# The fields of a span that hold what decoding multiplies: (message, field number) → the message the field holds.
# And a request's own: its resources' attributes (a scope's are never decoded; its spans are counted one by one, as
# they are decoded, and not walked here: 10⁶ of them are refused by their count).
_SPAN, _EVENT, _LINK, _KEY_VALUE, _ANY_VALUE, _ARRAY, _KEY_VALUE_LIST = range(7)
_REQUEST, _RESOURCE_SPANS, _RESOURCE = range(7, 10)
_HELD = {
    (_REQUEST, 1): _RESOURCE_SPANS, (_RESOURCE_SPANS, 1): _RESOURCE, (_RESOURCE, 1): _KEY_VALUE,
    (_SPAN, 9): _KEY_VALUE, (_SPAN, 11): _EVENT, (_SPAN, 13): _LINK, (_EVENT, 3): _KEY_VALUE, (_LINK, 4): _KEY_VALUE,
    (_KEY_VALUE, 2): _ANY_VALUE, (_ANY_VALUE, 5): _ARRAY, (_ANY_VALUE, 6): _KEY_VALUE_LIST, (_ARRAY, 1): _ANY_VALUE,
    (_KEY_VALUE_LIST, 1): _KEY_VALUE,
}
# AnyValue's array_value (field 5) and kvlist_value (6), length-delimited: the values that nest.
_NESTING_TAGS = (5 << 3 | 2, 6 << 3 | 2)
# Deeper than protobuf's decoder reads: such a span is refused by the decoder, not walked further here.
_WIRE_DEPTH = 101


def _wire_values(encoded: bytes, limit: int, *, root: int = _SPAN) -> int:
    """How many values (key-values and any-values at every level), events and links the encoded span holds, read
    from the wire without decoding it — and no further than one past `limit`, so the count costs at most the limit.
    Malformed bytes end the count: the decoder refuses them."""
    count = 0
    stack = [(root, 0, len(encoded), 0)]
    try:
        while stack:
            kind, position, end, depth = stack.pop()
            while position < end:
                key, position = _varint(encoded, position)
                wire = key & 7
                if wire == 0:
                    _, position = _varint(encoded, position)
                elif wire == 1:
                    position += 8
                elif wire == 5:
                    position += 4
                elif wire == 2:
                    length, position = _varint(encoded, position)
                    held = _HELD.get((kind, key >> 3))
                    if held is not None and depth < _WIRE_DEPTH:
                        count += 1
                        if count > limit:
                            return count
                        # A value that is no array or key-value list holds nothing more to count: not walked.
                        if length and (held != _ANY_VALUE or encoded[position] in _NESTING_TAGS):
                            stack.append((held, position, min(position + length, end), depth + 1))
                    position += length
                else:
                    break
    except IndexError:
        pass
    return count


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80 or shift > 63:
            return value, position
        shift += 7


def _span_problem(span: LenientMessage) -> str:
    if len(span.trace_id) != 16 or not any(span.trace_id):
        return "trace_id must be 16 bytes (32 hex digits), not all zero"
    if len(span.span_id) != 8 or not any(span.span_id):
        return "span_id must be 8 bytes (16 hex digits), not all zero"
    if span.parent_span_id and len(span.parent_span_id) != 8:
        return "parent_span_id must be empty or 8 bytes (16 hex digits)"
    if span.start_time_unix_nano > _MAX_TIME_NS or span.end_time_unix_nano > _MAX_TIME_NS:
        return "a start or end time after the year 2262"
    return ""


def _span(span: LenientMessage, *, service: str, scope: str, resource: dict[str, Any],
          kept: Callable[[str], bool]) -> DecodedSpan:
    events = []
    for event in span.events:
        name = _name_text(event.name)
        attributes = _attributes(event.attributes, kept)
        if attributes or kept(name):
            events.append(SpanEvent(name=name, time_ns=min(event.time_unix_nano, _MAX_TIME_NS),
                                    attributes=attributes))
    record = SpanRecord(
        trace_id=_hex(span.trace_id),
        span_id=_hex(span.span_id),
        parent_span_id=_hex(span.parent_span_id) if any(span.parent_span_id) else "",
        name=_text(span.name),  # cut once redacted (_finished)
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        service_name=service,
        scope_name=scope,
        kind=span.kind if span.kind in trace_pb2.Span.SpanKind.values() else 0,
        status_code=span.status.code if span.status.code in trace_pb2.Status.StatusCode.values() else 0,
        status_message=_text(span.status.message),
        attributes=_attributes(span.attributes, kept),
        resource=resource,
        events=tuple(events),
    )
    return DecodedSpan(record=record, conversation_id=_conversation_id(span.attributes))


def _conversation_id(attributes: Any) -> str:
    found: dict[bytes, str] = {}
    for item in attributes:
        if item.key in _CONVERSATION_KEYS and item.key not in found:
            which = item.value.WhichOneof("value")
            if which == "string_value":
                found[item.key] = _text(item.value.string_value).strip()
            elif which == "int_value":
                found[item.key] = str(item.value.int_value)
    return next((found[name] for name in _CONVERSATION_KEYS if found.get(name)), "")


def _conversation_key(conversation_id: str, redacted: str) -> str:
    """The id as stored: redacted like any value, and cut to fit its column. Either way it stays told apart from every
    other id by a keyed hash of the original (keyed, so that a short secret cannot be found again from its hash)."""
    if redacted == conversation_id and len(conversation_id) <= MAX_LABEL_CHARS:
        return conversation_id
    digest = hmac.new(settings.SECRET_KEY.encode(), conversation_id.encode(), hashlib.sha256).hexdigest()[:16]
    return f"{redacted[:MAX_LABEL_CHARS - 17]}~{digest}"


def _attributes(attributes: Any, kept: Callable[[str], bool]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in attributes:
        key = _name_text(item.key)
        if kept(key):
            found[key] = _value(item.value, 0)
    return found


def _value(value: LenientMessage, depth: int) -> Any:
    """An AnyValue as a JSON value; arrays and key-value lists nested deeper than MAX_VALUE_DEPTH are CUT."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return _text(value.string_value)
    if which == "bool_value":
        return value.bool_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        number = value.double_value
        # JSON, and so a JSON column, has no NaN or infinity.
        return number if math.isfinite(number) else repr(number)
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if which in ("array_value", "kvlist_value"):
        if depth >= MAX_VALUE_DEPTH:
            return CUT
        if which == "array_value":
            return [_value(item, depth + 1) for item in value.array_value.values]
        return {_name_text(item.key): _value(item.value, depth + 1) for item in value.kvlist_value.values}
    return None


def _finished(decoded: DecodedRequest, limits: Limits) -> DecodedRequest:
    """Redacted first (a secret cut in half would no longer be recognised), then cut to size; all of the request's
    text in one call, which reads the secrets to look for once."""
    if not decoded.spans:
        return decoded
    redacted = redact([
        [span.record.name, span.record.status_message, span.conversation_id, span.record.attributes,
         span.record.resource, [event.attributes for event in span.record.events]]
        for span in decoded.spans
    ])
    finished = []
    for span, (name, status_message, conversation_id, attributes, resource, event_attributes) in zip(
        decoded.spans, redacted, strict=True
    ):
        record = span.record
        events = tuple(
            replace(event, attributes=_bounded_attributes(attributes_of_event, limits))
            for event, attributes_of_event in zip(record.events, event_attributes, strict=True)
        )
        finished.append(replace(
            span,
            conversation_id=_conversation_key(span.conversation_id, conversation_id),
            record=replace(
                record,
                name=_cut_name(name),
                status_message=_cut_name(status_message),
                attributes=_bounded_attributes(attributes, limits),
                resource=_bounded_attributes(resource, limits),
                events=events,
            ),
        ))
    decoded.spans = finished
    return decoded


def _bounded_attributes(attributes: dict[str, Any], limits: Limits) -> dict[str, Any]:
    return {key: _bounded(value, [limits.max_value_chars]) for key, value in attributes.items()}


def _bounded(value: Any, budget: list[int]) -> Any:
    """`value` within the characters left in `budget` (one per number, key or item beyond its text): a string that
    does not fit is cut and ends with TRUNCATED, a list or object stops with a TRUNCATED item."""
    if isinstance(value, str):
        if len(value) > budget[0]:
            kept, budget[0] = value[: max(budget[0], 0)], 0
            return kept + TRUNCATED
        budget[0] -= len(value)
        return value
    if isinstance(value, list):
        items: list[Any] = []
        for item in value:
            if budget[0] <= 0:
                items.append(TRUNCATED)
                break
            budget[0] -= 1
            items.append(_bounded(item, budget))
        return items
    if isinstance(value, dict):
        entries: dict[str, Any] = {}
        for key, item in value.items():
            if budget[0] <= 0:
                entries[TRUNCATED] = None
                break
            budget[0] -= 1 + len(key)
            entries[key] = _bounded(item, budget)
        return entries
    budget[0] -= 1
    return value


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").replace("\x00", "\ufffd")


def _name_text(raw: bytes) -> str:
    return _cut_name(_text(raw))


def _cut_name(text: str) -> str:
    return text if len(text) <= MAX_NAME_CHARS else text[:MAX_NAME_CHARS] + TRUNCATED


def _label(text: str) -> str:
    return text[:MAX_LABEL_CHARS]


def _name(span: LenientMessage) -> str:
    return _text(span.name)[:100]


def _hex(raw: bytes) -> str:
    return raw.hex()
