"""Spans as they were received over OTLP (or imported from a file exporter's output). Conversations are not stored:
they are the spans that share a conversation key (docs/decisions/0019-traces-stored-as-spans.md). And the ingest-only
tokens production exporters post them with (docs/decisions/0034-production-traces.md)."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models
from django.utils import timezone


class TraceSpan(models.Model):
    class Kind(models.IntegerChoices):
        UNSPECIFIED = 0, "Unspecified"
        INTERNAL = 1, "Internal"
        SERVER = 2, "Server"
        CLIENT = 3, "Client"
        PRODUCER = 4, "Producer"
        CONSUMER = 5, "Consumer"

    class StatusCode(models.IntegerChoices):
        UNSET = 0, "Unset"
        OK = 1, "Ok"
        ERROR = 2, "Error"

    trace_id = models.CharField(max_length=32, help_text="32 lowercase hex digits.")
    span_id = models.CharField(max_length=16, help_text="16 lowercase hex digits.")
    parent_span_id = models.CharField(max_length=16, blank=True, help_text="Empty for a root span.")
    name = models.TextField()
    start_ns = models.BigIntegerField(help_text="Start, in nanoseconds since the Unix epoch.")
    end_ns = models.BigIntegerField(help_text="End, in nanoseconds since the Unix epoch.")
    service_name = models.CharField(max_length=200, blank=True, help_text="The resource's service.name.")
    scope_name = models.CharField(max_length=200, blank=True, help_text="The instrumentation scope's name.")
    kind = models.IntegerField(choices=Kind.choices, default=Kind.UNSPECIFIED)
    status_code = models.IntegerField(choices=StatusCode.choices, default=StatusCode.UNSET)
    status_message = models.TextField(blank=True)
    attributes = models.JSONField(
        default=dict, blank=True, help_text="Only the attributes the dialect mapping reads, redacted and cut to size."
    )
    resource = models.JSONField(default=dict, blank=True, help_text="The resource's attributes, kept the same way.")
    events = models.JSONField(
        default=list, blank=True, help_text="[{name, time_ns, attributes}]: the events the mapping reads."
    )
    conversation_key = models.CharField(
        max_length=200,
        help_text="gen_ai.conversation.id, else OpenInference's session.id, of the span or of another span of its "
        "trace; else the trace id.",
    )
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["trace_id", "span_id"], name="traces_span_unique_trace_span"),
        ]
        indexes = [
            # One conversation's spans in order; and its first and last time.
            models.Index(fields=["conversation_key", "start_ns"], name="traces_span_key_start"),
            models.Index(fields=["service_name", "conversation_key"], name="traces_span_service_key"),
            # Conversations active since a time ("the last hour").
            models.Index(fields=["end_ns"], name="traces_span_end"),
            # The retention sweep.
            models.Index(fields=["received_at"], name="traces_span_received"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.trace_id}/{self.span_id})"


# Every ingest token's key starts so: recognisable in a header (traces.middleware) and in text to redact.
INGEST_KEY_PREFIX = "agt_ingest_"


def ingest_key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class IngestToken(models.Model):
    """A credential that may POST spans to /v1/traces and nothing else: what a production service's exporter holds,
    instead of a staff token that could do everything staff can. Its key is shown once, when it is made; only the
    key's SHA-256 is kept (a random 256-bit key needs no slow hash)."""

    name = models.CharField(max_length=200, help_text="Who holds it, e.g. the service's production deployment.")
    service_name = models.CharField(
        max_length=200, blank=True,
        help_text="When set, a request is taken only if all its spans are of this service.name.",
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    key_prefix = models.CharField(
        max_length=24, editable=False, help_text="The key's first characters, to tell tokens apart."
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class ConversationMapping(models.Model):
    """Where the mapping of one imported conversation stands (traces.spans.Resume), so that a span arriving maps only
    its conversation's last turn and what came after it, and the host appends, instead of every stored span being
    mapped and every stored message compared again. Deleted with its conversation; a span the state cannot account
    for (older than the last turn, or spans the count says were added or removed elsewhere) maps the whole
    conversation again, which writes the state anew."""

    conversation = models.OneToOneField(
        "agenthost.Conversation", on_delete=models.CASCADE, related_name="trace_mapping"
    )
    conversation_key = models.CharField(max_length=200, help_text="The spans' conversation key.")
    service_name = models.CharField(max_length=200, blank=True, help_text="The spans' service.name.")
    span_count = models.PositiveIntegerField(help_text="The spans of the key when it was mapped.")
    last_span = models.BigIntegerField(help_text="The newest span's id then: spans after it are new.")
    message_count = models.PositiveIntegerField(help_text="The conversation's messages as it was written.")
    resume = models.JSONField(help_text="traces.spans.Resume: what the turns before the last one left behind.")

    class Meta:
        indexes = [models.Index(fields=["conversation_key"], name="traces_mapping_key")]

    def __str__(self) -> str:
        return f"mapping of {self.conversation_key} ({self.service_name or 'unnamed service'})"
