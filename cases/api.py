"""The suites and cases API: one view class per action, reads through selectors, writes through services.

Actions that share a URL are combined into one mounted view, as in the host's API. Any signed-in user may read;
only staff may change suites and cases. A request body that breaks a rule gets 400 with
`{"errors": [{"field": "turns[0].assertions[1].params.pattern", "message": "..."}]}` — every error names its field.
Request bodies are checked by cases/validation/ (the admin, import and recording use the same rules) against the
shapes of cases/schema.py, and the same pydantic models describe the bodies in the OpenAPI schema.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from drf_spectacular.utils import OpenApiResponse, extend_schema
from pydantic import Field
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ParseError, ValidationError
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cases.models import Case, Suite
from cases.permissions import CASE_SWITCH_REFUSED, case_switch_allowed
from cases.schema import CaseDocument, SuiteDocument
from cases.selectors import (
    case_detail,
    case_hidden_from,
    case_list,
    case_text_for,
    cases_visible,
    suite_detail,
    suite_list,
)
from cases.services import (
    case_copy,
    case_create,
    case_delete,
    case_disable,
    case_enable,
    case_to_document,
    case_update,
    suite_create,
    suite_delete,
    suite_update,
)
from cases.validation.case_documents import case_warnings, mock_schema_warnings, validate_case_document
from cases.validation.problems import CaseValidationError, Problem
from common.api import (
    ApiPagination,
    ErrorSerializer,
    IdField,
    IsStaffOrReadOnly,
    StrictInputSerializer,
    validation_problems,
)
from common.inputs import parse_id

# Read-only keys of a case as the API returns it; a client may send a fetched case back with them unchanged.
CASE_OUTPUT_ONLY_KEYS = ("id", "suite", "suite_name", "created_at", "updated_at")
SUITE_OUTPUT_ONLY_KEYS = ("id", "case_count", "enabled_case_count", "created_at", "updated_at")


class StoredCaseErrorSerializer(serializers.Serializer):
    class Meta:
        ref_name = "StoredCaseErrors"

    detail = serializers.CharField()
    # The response's key; DRF's metaclass moves a declared field out of the class (common/api.py's ErrorSerializer).
    errors = ErrorSerializer.ProblemSerializer(  # type: ignore[assignment]
        many=True, help_text="Paths into the case's document."
    )


class CasesApiView(APIView):
    permission_classes = [IsStaffOrReadOnly]
    staff_only_message = "Only staff users may change suites and cases."

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, CaseValidationError):
            return Response(
                {"errors": [problem.as_dict() for problem in exc.problems]}, status=status.HTTP_400_BAD_REQUEST
            )
        if isinstance(exc, ValidationError | ParseError):
            return Response({"errors": list(validation_problems(exc.detail))}, status=status.HTTP_400_BAD_REQUEST)
        return super().handle_exception(exc)


def _no_body(request: Request) -> None:
    """For an action that takes no fields (copy, enable, disable): nothing, or an empty object. Anything else is
    refused with a 400 rather than ignored, so a client expecting `{"name": ...}` to rename a copy learns it does
    not; reading request.data refuses malformed or too deeply nested JSON the same way."""
    StrictInputSerializer(data=request.data).is_valid(raise_exception=True)


def _body(request: Request, *, output_only: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise CaseValidationError([Problem("document", "the body must be a JSON object")])
    return {key: value for key, value in request.data.items() if key not in output_only}


# --- Suites -------------------------------------------------------------------------------------------------------


class SuiteOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    agent = serializers.CharField(source="agent.name")
    agent_id = serializers.IntegerField()
    judge_model = serializers.CharField()
    extra_allowed_functions = serializers.ListField(child=serializers.CharField())
    force_blocked_functions = serializers.ListField(child=serializers.CharField())
    network_allow = serializers.ListField(child=serializers.CharField())
    case_timeout_seconds = serializers.IntegerField()
    enabled = serializers.BooleanField()
    isolation_group = serializers.CharField()
    case_concurrency = serializers.IntegerField()
    mock_rules = serializers.DictField(help_text="Per tool, how `agenttest mocks verify` compares its mocks.")
    case_count = serializers.IntegerField()
    enabled_case_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


def _suite_or_404(suite_id: int) -> Suite:
    try:
        return suite_detail(suite_id=suite_id)
    except Suite.DoesNotExist as exc:
        raise NotFound(f"no suite with id {suite_id}") from exc


class SuiteListApi(CasesApiView):
    class FilterSerializer(serializers.Serializer):
        # Ids read as everywhere else (ASCII digits): DRF's IntegerField reads "٣" as 3.
        agent = IdField(thing="agent", required=False, help_text="Agent id.")
        enabled = serializers.BooleanField(required=False, allow_null=True, default=None)
        search = serializers.CharField(required=False, default="")

    @extend_schema(
        tags=["suites"], operation_id="suites_list", parameters=[FilterSerializer],
        responses={200: SuiteOutputSerializer(many=True), 400: ErrorSerializer},
    )
    def get(self, request: Request) -> Response:
        filters = SuiteListApi.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        paginator = ApiPagination()
        page = paginator.paginate_queryset(suite_list(filters=filters.validated_data), request, view=self)
        return paginator.get_paginated_response(SuiteOutputSerializer(page, many=True).data)


class SuiteCreateApi(CasesApiView):
    @extend_schema(
        tags=["suites"], operation_id="suites_create", request=SuiteDocument,
        responses={201: SuiteOutputSerializer, 400: ErrorSerializer},
    )
    def post(self, request: Request) -> Response:
        suite = suite_create(data=_body(request, output_only=SUITE_OUTPUT_ONLY_KEYS))
        return Response(SuiteOutputSerializer(_suite_or_404(suite.pk)).data, status=status.HTTP_201_CREATED)


class SuitesApi(SuiteListApi, SuiteCreateApi):
    """GET lists suites (any signed-in user); POST creates one (staff)."""


class SuiteDetailApi(CasesApiView):
    @extend_schema(tags=["suites"], operation_id="suites_retrieve", responses=SuiteOutputSerializer)
    def get(self, request: Request, suite_id: int) -> Response:
        return Response(SuiteOutputSerializer(_suite_or_404(suite_id)).data)


class SuiteUpdateApi(CasesApiView):
    @extend_schema(
        tags=["suites"], operation_id="suites_partial_update", request=SuiteDocument,
        responses={200: SuiteOutputSerializer, 400: ErrorSerializer},
    )
    def patch(self, request: Request, suite_id: int) -> Response:
        suite = suite_update(suite=_suite_or_404(suite_id), data=_body(request, output_only=SUITE_OUTPUT_ONLY_KEYS))
        return Response(SuiteOutputSerializer(_suite_or_404(suite.pk)).data)


class SuiteDeleteApi(CasesApiView):
    @extend_schema(tags=["suites"], operation_id="suites_destroy", responses={204: None})
    def delete(self, request: Request, suite_id: int) -> Response:
        suite_delete(suite=_suite_or_404(suite_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SuiteApi(SuiteDetailApi, SuiteUpdateApi, SuiteDeleteApi):
    """GET reads a suite (any signed-in user); PATCH changes it and DELETE removes it with its cases (staff)."""


# --- Cases --------------------------------------------------------------------------------------------------------


class CaseOutput(CaseDocument):
    """A case as the API returns it: the case document and where it lives."""

    warnings: list[str] = Field(
        [], description="Notes for a reviewer, then what is wrong with the case as it stands, e.g. enabled with no "
        "assertions (a run ends it Error); that one is never stored.",
    )
    id: int
    suite: int = Field(description="Suite id.")
    suite_name: str
    created_at: datetime
    updated_at: datetime


class CaseCreateInput(CaseDocument):
    suite: int = Field(description="The id of the suite the case joins.")


_TIME = serializers.DateTimeField()


def _case_output(case: Case, *, user: Any, one: bool = True) -> dict[str, Any]:
    """The case as the API answers it. Its mocks are checked against their tools' schemas only when it is answered
    alone (`one`): a list asks no agent about each of its cases."""
    document = case_to_document(case=case)
    # A member reads a case made from production traces without its service, conversation key or trace ids.
    document["name"], document["description"], document["warnings"] = case_text_for(case, user=user)
    return {
        **document,
        # The stored notes, then what is wrong with the case as it stands (e.g. enabled with nothing to check); the
        # latter is never stored, so sending the case back does not turn it into a note.
        "warnings": [
            *document["warnings"], *case_warnings(document),
            *(mock_schema_warnings(document, suite=case.suite) if one else []),
        ],
        "id": case.pk,
        "suite": case.suite_id,
        "suite_name": case.suite.name,
        "created_at": _TIME.to_representation(case.created_at),
        "updated_at": _TIME.to_representation(case.updated_at),
    }


def _case_or_404(case_id: int, *, user: Any = None) -> Case:
    """With `user`, a draft from production traces they may not see is not found either."""
    try:
        case = case_detail(case_id=case_id)
    except Case.DoesNotExist as exc:
        raise NotFound(f"no case with id {case_id}") from exc
    if user is not None and case_hidden_from(case, user=user):
        raise NotFound(f"no case with id {case_id}")
    return case


def _same_suite(data: dict[str, Any], case: Case) -> dict[str, Any]:
    """The body without its output-only keys; a `suite` other than the case's own is refused, not ignored."""
    if "suite" in data and data["suite"] != case.suite_id:
        raise CaseValidationError(
            [Problem("suite", f"a case stays in its suite ({case.suite_id}); create it in the other suite instead")]
        )
    return {key: value for key, value in data.items() if key not in CASE_OUTPUT_ONLY_KEYS}


class CaseListApi(CasesApiView):
    class FilterSerializer(serializers.Serializer):
        # Ids read as everywhere else (ASCII digits): DRF's IntegerField reads "٣" as 3.
        suite = IdField(thing="suite", required=False, help_text="Suite id.")
        agent = IdField(
            thing="agent", required=False, help_text="Agent id: the suite's agent or the case's entry agent."
        )
        enabled = serializers.BooleanField(required=False, allow_null=True, default=None)
        # A filter named `source`; DRF's metaclass moves a declared field out of the class.
        source = serializers.ChoiceField(choices=Case.Source.choices, required=False)  # type: ignore[assignment]
        tag = serializers.CharField(required=False, default="", help_text="Cases carrying exactly this tag.")
        search = serializers.CharField(required=False, default="", help_text="In name or description.")

    @extend_schema(
        tags=["cases"], operation_id="cases_list", parameters=[FilterSerializer],
        responses={200: {"type": "array", "items": {"$ref": "#/components/schemas/CaseOutput"}}, 400: ErrorSerializer},
    )
    def get(self, request: Request) -> Response:
        filters = CaseListApi.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        paginator = ApiPagination()
        page = paginator.paginate_queryset(
            cases_visible(case_list(filters=filters.validated_data), user=request.user), request, view=self
        )
        return paginator.get_paginated_response(
            [_case_output(case, user=request.user, one=False) for case in page or []]
        )


class CaseCreateApi(CasesApiView):
    @extend_schema(
        tags=["cases"], operation_id="cases_create", request=CaseCreateInput,
        responses={201: CaseOutput, 400: ErrorSerializer},
    )
    def post(self, request: Request) -> Response:
        document = _body(request, output_only=CASE_OUTPUT_ONLY_KEYS)
        # Read from the body itself: the document leaves the output-only `suite` out; _body made sure it is an object.
        suite_id = cast(dict[str, Any], request.data).get("suite")
        suite = None
        # A JSON number only ("5" is not an id here), and one a database can hold.
        if isinstance(suite_id, int) and parse_id(suite_id) is not None:
            suite = Suite.objects.filter(pk=suite_id).first()
        if suite is None:
            # Checked without a suite as well, so the client sees every problem at once.
            problems = [Problem("suite", f"must be the id of an existing suite, not {suite_id!r}")]
            raise CaseValidationError(problems + validate_case_document(document, suite=None))
        case = case_create(suite=suite, document=document)
        return Response(_case_output(_case_or_404(case.pk), user=request.user), status=status.HTTP_201_CREATED)


class CasesApi(CaseListApi, CaseCreateApi):
    """GET lists cases as documents (any signed-in user); POST creates one (staff)."""


class CaseDetailApi(CasesApiView):
    @extend_schema(tags=["cases"], operation_id="cases_retrieve", responses=CaseOutput)
    def get(self, request: Request, case_id: int) -> Response:
        return Response(_case_output(_case_or_404(case_id, user=request.user), user=request.user))


class CaseReplaceApi(CasesApiView):
    @extend_schema(
        tags=["cases"], operation_id="cases_update", request=CaseDocument,
        responses={200: CaseOutput, 400: ErrorSerializer},
    )
    def put(self, request: Request, case_id: int) -> Response:
        case = _case_or_404(case_id)
        document = _same_suite(_body(request, output_only=()), case)
        case = case_update(case=case, document=document)
        return Response(_case_output(_case_or_404(case.pk), user=request.user))


class CaseUpdateApi(CasesApiView):
    @extend_schema(
        tags=["cases"], operation_id="cases_partial_update", request=CaseDocument,
        responses={200: CaseOutput, 400: ErrorSerializer},
    )
    def patch(self, request: Request, case_id: int) -> Response:
        case = _case_or_404(case_id)
        changes = _same_suite(_body(request, output_only=()), case)
        case = case_update(case=case, document={**case_to_document(case=case), **changes})
        return Response(_case_output(_case_or_404(case.pk), user=request.user))


class CaseDeleteApi(CasesApiView):
    @extend_schema(tags=["cases"], operation_id="cases_destroy", responses={204: None})
    def delete(self, request: Request, case_id: int) -> Response:
        case_delete(case=_case_or_404(case_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class CaseApi(CaseDetailApi, CaseReplaceApi, CaseUpdateApi, CaseDeleteApi):
    """GET reads a case (any signed-in user); PUT replaces it, PATCH changes some fields, DELETE removes it (staff)."""


class CaseCopyApi(CasesApiView):
    @extend_schema(
        tags=["cases"], operation_id="cases_copy", request=None,
        responses={
            201: OpenApiResponse(CaseOutput, description="A disabled copy named '<name> (copy)'."),
            400: OpenApiResponse(ErrorSerializer, description="A body with any field: this takes none."),
        },
    )
    def post(self, request: Request, case_id: int) -> Response:
        _no_body(request)
        copy = case_copy(case=_case_or_404(case_id))
        return Response(_case_output(_case_or_404(copy.pk), user=request.user), status=status.HTTP_201_CREATED)


class CanSwitchCases(BasePermission):
    """Enable and Disable: cases.permissions' rule, the one the admin's actions and review panel follow."""

    message = CASE_SWITCH_REFUSED

    def has_permission(self, request: Request, view: Any) -> bool:
        return case_switch_allowed(request.user)


class CaseEnableApi(CasesApiView):
    permission_classes = [IsAuthenticated, CanSwitchCases]

    @extend_schema(
        tags=["cases"], operation_id="cases_enable", request=None,
        responses={
            200: CaseOutput,
            400: OpenApiResponse(ErrorSerializer, description="A body with any field: this takes none."),
            409: OpenApiResponse(
                StoredCaseErrorSerializer,
                description="The case as stored does not pass validation (e.g. its agent no longer declares a "
                "mocked function); it stays disabled, and each error names the field of the case at fault.",
            ),
        },
    )
    def post(self, request: Request, case_id: int) -> Response:
        _no_body(request)
        try:
            case = case_enable(case=_case_or_404(case_id))
        except CaseValidationError as exc:
            # Nothing in the request is wrong (it has no body): the stored case conflicts with the rules as they
            # stand, so this is a 409 whose errors name the fields of the case, not of the request.
            return Response(
                {
                    "detail": "This case does not pass validation as stored; edit it, then enable it.",
                    "errors": [problem.as_dict() for problem in exc.problems],
                },
                status=status.HTTP_409_CONFLICT,
            )
        return Response(_case_output(_case_or_404(case.pk), user=request.user))


class CaseDisableApi(CasesApiView):
    permission_classes = [IsAuthenticated, CanSwitchCases]

    @extend_schema(
        tags=["cases"], operation_id="cases_disable", request=None,
        responses={
            200: CaseOutput,
            400: OpenApiResponse(ErrorSerializer, description="A body with any field: this takes none."),
        },
    )
    def post(self, request: Request, case_id: int) -> Response:
        _no_body(request)
        case = case_disable(case=_case_or_404(case_id))
        return Response(_case_output(_case_or_404(case.pk), user=request.user))

