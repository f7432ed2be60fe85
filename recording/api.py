"""The recording API: record a conversation as a draft case, or extract one draft per user goal with an AI model.

Staff only, because both copy raw conversation content into the test store (with no ownership check on the
conversation) and extraction spends tokens; both are throttled under the "recording" scope. A request that cannot be
honoured gets 400 with `{"errors": [{"field": ..., "message": ...}]}` and stores nothing; an extraction model that
does not answer is 502.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from cases.models import Case, Suite
from common.api import ErrorSerializer, IdField, IsStaff, StrictInputSerializer, validation_problems
from recording.services import (
    Drafts,
    ExtractionModelUnavailable,
    RecordingError,
    conversation_find,
    extraction_create,
    recording_create,
    suite_find,
)

THROTTLE_SCOPE = "recording"

SUITE_HELP = (
    "A suite id or name. Empty: the one suite that tests the conversation's agent; when none does, a suite "
    '"Recorded: <agent>" is created; when several do, 400 "choose a suite: …" names them.'
)


class DraftSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    enabled = serializers.BooleanField(help_text="Always false: a draft joins runs once a person enables it.")
    # The response's key; DRF's metaclass moves a declared field out of the class, so it never shadows the
    # `source` argument the stubs see it override.
    source = serializers.CharField(help_text="recorded or extracted.")  # type: ignore[assignment]
    source_conversation = serializers.IntegerField(source="source_conversation_id")
    turns = serializers.SerializerMethodField(help_text="Number of turns.")
    mocks = serializers.SerializerMethodField(help_text="Number of mocks.")
    assertions = serializers.SerializerMethodField(help_text="Number of assertions, turn and case level.")
    warnings = serializers.ListField(child=serializers.CharField(), help_text="Notes for the reviewer.")
    admin_url = serializers.SerializerMethodField(help_text="Where to review and enable it.")

    def get_turns(self, case: Case) -> int:
        return case.turns.count()

    def get_mocks(self, case: Case) -> int:
        return case.mocks.count()

    def get_assertions(self, case: Case) -> int:
        return case.assertions.count()

    def get_admin_url(self, case: Case) -> str:
        return reverse("admin:cases_case_change", args=[case.pk])


class SegmentSerializer(serializers.Serializer):
    name = serializers.CharField()
    firstTurn = serializers.IntegerField(source="first_turn")  # noqa: N815 (the wire name the model answers with)
    lastTurn = serializers.IntegerField(source="last_turn")  # noqa: N815


class SuiteRefSerializer(serializers.Serializer):
    class Meta:
        ref_name = "RecordingSuite"

    id = serializers.IntegerField()
    name = serializers.CharField()


class DraftsOutputSerializer(serializers.Serializer):
    suite = SuiteRefSerializer()
    suite_created = serializers.BooleanField(help_text="True when the suite was created for these drafts.")
    cases = DraftSerializer(many=True)


class ExtractionOutputSerializer(DraftsOutputSerializer):
    segments = SegmentSerializer(many=True, help_text="The verified cut points, one per draft, in order.")


class RecordingApiView(APIView):
    permission_classes = [IsStaff]
    staff_only_message = "Only staff users may record conversations or extract cases."
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = THROTTLE_SCOPE

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, RecordingError):
            code = (
                status.HTTP_502_BAD_GATEWAY
                if isinstance(exc, ExtractionModelUnavailable)
                else status.HTTP_400_BAD_REQUEST
            )
            return Response({"errors": [{"field": exc.field, "message": str(exc)}]}, status=code)
        if isinstance(exc, ValidationError):
            return Response({"errors": list(validation_problems(exc.detail))}, status=status.HTTP_400_BAD_REQUEST)
        return super().handle_exception(exc)

    def _inputs(self, serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
        serializer = serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        data["conversation"] = conversation_find(conversation_id=data["conversation"])
        data["suite"] = suite_from_ref(data.get("suite"))
        return data


def suite_from_ref(ref: str | None) -> Suite | None:
    """The suite a request names by id or name; None when it names none (the drafts' suite is then chosen)."""
    text = (ref or "").strip()
    if not text:
        return None
    return suite_find(ref=text)


def _drafts_data(drafts: Drafts) -> dict[str, Any]:
    return {"suite": drafts.suite, "suite_created": drafts.suite_created, "cases": drafts.cases,
            "segments": drafts.segments}


class RecordingCreateApi(RecordingApiView):
    class InputSerializer(StrictInputSerializer):
        class Meta:
            ref_name = "RecordingInput"

        conversation = IdField(thing="conversation", help_text="The id of the conversation to record.")
        suite = serializers.CharField(required=False, allow_null=True, allow_blank=True, help_text=SUITE_HELP)

    @extend_schema(
        tags=["recording"],
        operation_id="recordings_create",
        summary="Record a conversation as a draft case",
        description=(
            "Turns the whole conversation into one disabled draft case named \"Recorded from <conversation>\": each "
            "user message a turn, each real tool result a mock (a function called more than once matches by call "
            "order), state with no causing message initial state, each turn's state changes the state writes of its "
            "last mock (dropped, with a warning, when the turn has no mock), and generated assertions of two kinds "
            "only: toolCalled per mock with the recorded arguments, stateEquals per written key. Never output-text "
            f"assertions or a judge. Suite: {SUITE_HELP} Staff only."
        ),
        request=InputSerializer,
        responses={
            201: DraftsOutputSerializer,
            400: OpenApiResponse(ErrorSerializer, description="Nothing was stored; each error names its input."),
            403: OpenApiResponse(description="Not staff."),
        },
    )
    def post(self, request: Request) -> Response:
        data = self._inputs(RecordingCreateApi.InputSerializer, request)
        drafts = recording_create(conversation=data["conversation"], suite=data["suite"])
        return Response(DraftsOutputSerializer(_drafts_data(drafts)).data, status=status.HTTP_201_CREATED)


class ExtractionCreateApi(RecordingApiView):
    class InputSerializer(RecordingCreateApi.InputSerializer):
        class Meta:
            ref_name = "ExtractionInput"

        extraction_model = serializers.CharField(
            required=False,
            allow_blank=True,
            help_text="provider:model that splits the conversation. Empty: settings.AGENTTEST_EXTRACTION_MODEL; a "
            "one-turn conversation needs none.",
        )

    @extend_schema(
        tags=["recording"],
        operation_id="extractions_create",
        summary="Extract one draft case per user goal, with an AI model",
        description=(
            "Asks the extraction model where the conversation moves from one user goal to the next. It is sent only "
            "each turn's user message and the names of the tools called in that turn — never tool arguments, tool "
            "results or state — and answers only cut points and names. The answer is verified whole: no JSON, "
            "malformed JSON, no segments, a first segment not starting at turn 0, a gap or an overlap, a segment out "
            "of range or an uncovered last turn reject it with 400 \"AI extraction failed: <why>\" and nothing is "
            "stored. Each segment becomes a disabled draft the way a recording does; one that starts after turn 0 "
            "starts as a test of it would: with the conversation's entry agent, the earlier turns as history and the "
            "state as it stood then, and asserts only its own calls and state changes. "
            f"Suite: {SUITE_HELP} Staff only."
        ),
        request=InputSerializer,
        responses={
            201: ExtractionOutputSerializer,
            400: OpenApiResponse(ErrorSerializer, description="Nothing was stored; each error names its input."),
            403: OpenApiResponse(description="Not staff."),
            502: OpenApiResponse(ErrorSerializer, description="The extraction model did not answer."),
        },
    )
    def post(self, request: Request) -> Response:
        data = self._inputs(ExtractionCreateApi.InputSerializer, request)
        drafts = extraction_create(
            conversation=data["conversation"], suite=data["suite"], model_key=data.get("extraction_model", "")
        )
        return Response(ExtractionOutputSerializer(_drafts_data(drafts)).data, status=status.HTTP_201_CREATED)
