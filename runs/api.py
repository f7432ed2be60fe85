"""The runs API: configured models, run lists and details, trigger, cancel, resume, bless and delete.

One view class per action; actions sharing a URL are combined into one mounted view, as in the host's and the cases
API. Any signed-in user may read; only staff may trigger, cancel or delete a run, because a run really spends token
quota. A request that breaks a rule gets 400 with `{"errors": [{"field": ..., "message": ...}]}`; a run queue that
does not answer is 503 and leaves no run behind; an action that the run's state forbids is 409.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle, ScopedRateThrottle
from rest_framework.views import APIView

from agenthost.seams import configured_models
from cases.models import Suite
from cases.selectors import suite_detail
from common.api import (
    ApiPagination,
    AsciiDecimalField,
    ErrorSerializer,
    IdField,
    IsStaffOrReadOnly,
    StrictInputSerializer,
    WholeNumberField,
    validation_problems,
)
from runs.models import CaseResult, Run
from runs.selectors import run_list, run_results, run_summary
from runs.services import (
    QueueUnavailable,
    RunConflict,
    RunError,
    result_freeze,
    run_bless,
    run_cancel,
    run_delete,
    run_resume,
    run_trigger,
    run_unbless,
)

TRIGGER_THROTTLE_SCOPE = "run_trigger"


class DetailSerializer(serializers.Serializer):
    class Meta:
        ref_name = "RunDetailMessage"

    detail = serializers.CharField()


class RunsApiView(APIView):
    permission_classes = [IsStaffOrReadOnly]
    staff_only_message = "Only staff users may trigger, cancel, resume or delete runs."

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, QueueUnavailable):
            return Response({"detail": str(exc)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        if isinstance(exc, RunConflict):
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        if isinstance(exc, RunError):
            return Response(
                {"errors": [{"field": exc.field, "message": str(exc)}]}, status=status.HTTP_400_BAD_REQUEST
            )
        if isinstance(exc, ValidationError):
            return Response({"errors": list(validation_problems(exc.detail))}, status=status.HTTP_400_BAD_REQUEST)
        return super().handle_exception(exc)


# --- Models -------------------------------------------------------------------------------------------------------


class ModelListApi(RunsApiView):
    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ConfiguredModel"

        key = serializers.CharField(help_text="provider:model, as a run names it.")
        provider = serializers.CharField()
        model = serializers.CharField()
        # The response's key; DRF's metaclass moves a declared field out of the class, so it never shadows the
        # serializer's own `label` the stubs see it override.
        label = serializers.CharField()  # type: ignore[assignment]
        input_price = serializers.FloatField(help_text="Per million input tokens.")
        output_price = serializers.FloatField(help_text="Per million output tokens.")

    @extend_schema(tags=["runs"], operation_id="models_list", responses=OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(ModelListApi.OutputSerializer(configured_models(), many=True).data)


# --- Runs: output -------------------------------------------------------------------------------------------------


class SuiteRefSerializer(serializers.Serializer):
    class Meta:
        ref_name = "RunSuite"

    id = serializers.IntegerField()
    name = serializers.CharField()


class PassRateSerializer(serializers.Serializer):
    model = serializers.CharField()
    pass_rate = serializers.FloatField(allow_null=True, help_text="passed / ran; cancelled results do not count.")
    passed = serializers.IntegerField()
    ran = serializers.IntegerField(help_text="Results that ran (not cancelled).")


class RunOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    suite = SuiteRefSerializer()
    models = serializers.ListField(source="model_keys", child=serializers.CharField())
    case_filter = serializers.CharField()
    mode = serializers.CharField()
    trials = serializers.IntegerField(help_text="How many times each case runs on each model.")
    status = serializers.CharField()
    reason = serializers.CharField()
    cancel_requested = serializers.BooleanField()
    passed = serializers.IntegerField()
    failed = serializers.IntegerField()
    errored = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    done = serializers.IntegerField(help_text="Results written so far.")
    total = serializers.IntegerField(help_text="Cases × models × trials selected at trigger time.")
    current = serializers.CharField(help_text="The case × model in progress.")
    isolation_group = serializers.CharField(help_text="Runs of one group execute one at a time.")
    throttle = serializers.DictField(help_text="Per provider that answered 429: how often, and the concurrency moves.")
    triggered_by = serializers.CharField(source="triggered_by.username", allow_null=True, default=None)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    duration_seconds = serializers.SerializerMethodField(help_text="So far, while it runs; null before it starts.")
    pass_rates = PassRateSerializer(many=True, help_text="Per model, in the run's model order.")
    blessed_at = serializers.DateTimeField(
        allow_null=True, help_text="Set while the run is its suite's blessed baseline (compared with by default)."
    )

    def get_duration_seconds(self, run: Run) -> float | None:
        if run.started_at is None:
            return None
        return round(((run.finished_at or timezone.now()) - run.started_at).total_seconds(), 3)


class ModelSummarySerializer(serializers.Serializer):
    model = serializers.CharField()
    total = serializers.IntegerField()
    passed = serializers.IntegerField()
    failed = serializers.IntegerField()
    errored = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    pass_rate = serializers.FloatField(allow_null=True)
    pass_at_1 = serializers.FloatField(
        allow_null=True, help_text="pass@1: the share of the trials that ran which passed (the pass rate)."
    )
    latency_p50_ms = serializers.FloatField(allow_null=True)
    latency_p95_ms = serializers.FloatField(allow_null=True)
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cached_input_tokens = serializers.IntegerField(help_text="Of the input tokens, those served from a prompt cache.")
    reasoning_tokens = serializers.IntegerField(help_text="Of the output tokens, those spent reasoning.")
    unanswered = serializers.IntegerField(help_text="Results the model never answered; not in p50/p95.")
    total_tokens = serializers.IntegerField(help_text="The model's tokens plus the judge's.")
    cost = serializers.FloatField(help_text="The model's cost; the judge's is judge_cost.")
    judge_tokens = serializers.IntegerField(help_text="Tokens the llmJudge used on these results.")
    judge_cost = serializers.FloatField(help_text="The llmJudge's cost, at the judge model's price.")
    total_cost = serializers.FloatField(help_text="cost + judge_cost: what the budget counts.")
    trial_cost = serializers.FloatField(help_text="total_cost over the trials: what one trial of the cases cost.")
    cost_note = serializers.CharField(help_text="Why the cost reads as it does (a replay costs nothing); or empty.")
    mode = serializers.CharField()
    trials = serializers.IntegerField()
    cases = serializers.IntegerField(help_text="Cases whose every trial ran.")
    pass_k = serializers.FloatField(allow_null=True, help_text="Share of those cases that passed every trial.")
    stable_pass = serializers.IntegerField()
    stable_fail = serializers.IntegerField()
    flaky = serializers.IntegerField()


class ResultOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    case_id = serializers.IntegerField(allow_null=True, help_text="Null once the case has been deleted.")
    case_name = serializers.CharField()
    model = serializers.CharField()
    trial = serializers.IntegerField(help_text="0-based repetition of this case on this model.")
    position = serializers.IntegerField()
    status = serializers.CharField()
    reason = serializers.CharField()
    duration_ms = serializers.FloatField()
    model_latency_ms = serializers.FloatField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cached_input_tokens = serializers.IntegerField(help_text="Of the input tokens, those served from a prompt cache.")
    reasoning_tokens = serializers.IntegerField(help_text="Of the output tokens, those spent reasoning.")
    total_tokens = serializers.IntegerField(help_text="The model's tokens plus the judge's.")
    cost = serializers.FloatField(help_text="The model's cost; the judge's is judge_cost.")
    judge_tokens = serializers.IntegerField(help_text="Tokens the llmJudge used on this result.")
    judge_cost = serializers.FloatField(help_text="The llmJudge's cost, at the judge model's price.")
    tool_calls = serializers.JSONField()
    assertions = serializers.JSONField()
    conversation_id = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()


class ResultDetailOutputSerializer(ResultOutputSerializer):
    run_id = serializers.IntegerField()
    transcript = serializers.JSONField(help_text="A user message the simulated user wrote has `simulated: true`.")
    final_state = serializers.JSONField()
    final_tables = serializers.JSONField(help_text="The stateful mocks' tables as the case left them: name → rows.")
    simulation = serializers.JSONField(
        help_text="For a case with a simulated user: its model, the turns it wrote, what stopped the conversation "
        "(`stop.text`) and what its model used; empty otherwise."
    )


class RunDetailOutputSerializer(RunOutputSerializer):
    case_ids = serializers.ListField(child=serializers.IntegerField())
    agent_snapshot = serializers.JSONField(help_text="The agent as it was when the run was triggered.")
    budget_tokens = serializers.IntegerField(allow_null=True)
    budget_cost = serializers.FloatField(allow_null=True)
    summary = ModelSummarySerializer(many=True)
    results = ResultOutputSerializer(many=True, source="result_rows", help_text="In execution order.")


def _attach_pass_rates(runs: list[Run]) -> None:
    """Per-model pass rates for a page of runs, from one grouped query."""
    counts: dict[tuple[int, str], tuple[int, int]] = {}
    rows = (
        CaseResult.objects.filter(run_id__in=[run.pk for run in runs])
        .order_by()
        .values("run_id", "model")
        .annotate(
            passed=Count("id", filter=Q(status=CaseResult.Status.PASSED)),
            ran=Count("id", filter=~Q(status=CaseResult.Status.CANCELLED)),
        )
    )
    for row in rows:
        counts[(row["run_id"], row["model"])] = (row["passed"], row["ran"])
    # Each run is given its pass rates here, for RunOutputSerializer (not a field of the model).
    run: Any
    for run in runs:
        run.pass_rates = []
        for model in run.model_keys:
            passed, ran = counts.get((run.pk, model), (0, 0))
            run.pass_rates.append(
                {"model": model, "passed": passed, "ran": ran, "pass_rate": passed / ran if ran else None}
            )


def _run_detail(run_id: int) -> dict[str, Any]:
    # Given its pass rates, summary and result rows here, for RunDetailOutputSerializer (none is a field of the model).
    run: Any = get_object_or_404(run_list(), pk=run_id)
    summary = run_summary(run=run)
    run.pass_rates = [
        {"model": item.model, "passed": item.passed, "ran": item.total - item.cancelled, "pass_rate": item.pass_rate}
        for item in summary
    ]
    run.summary = [item.as_dict() for item in summary]
    # The transcript is the heavy part; it is served per result.
    run.result_rows = run_results(run=run).defer("transcript", "final_state", "final_tables")
    return RunDetailOutputSerializer(run).data


# --- Runs: views --------------------------------------------------------------------------------------------------


class RunListApi(RunsApiView):
    pagination_class = ApiPagination

    class FilterSerializer(serializers.Serializer):
        suite = IdField(thing="suite", required=False)
        status = serializers.ChoiceField(choices=Run.Status.choices, required=False)
        agent = IdField(thing="agent", required=False, help_text="The suite's agent (id).")

    @extend_schema(
        tags=["runs"], operation_id="runs_list", parameters=[FilterSerializer],
        responses={200: RunOutputSerializer(many=True), 400: ErrorSerializer},
    )
    def get(self, request: Request) -> Response:
        filters = RunListApi.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        queryset: QuerySet[Run] = run_list(
            suite_id=filters.validated_data.get("suite"), status=filters.validated_data.get("status", "")
        )
        if filters.validated_data.get("agent"):
            queryset = queryset.filter(suite__agent_id=filters.validated_data["agent"])
        paginator = ApiPagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        _attach_pass_rates(page or [])
        return paginator.get_paginated_response(RunOutputSerializer(page, many=True).data)


class RunTriggerApi(RunsApiView):
    """Throttled per user (scope "run_trigger"): every run spends token quota."""

    throttle_scope = TRIGGER_THROTTLE_SCOPE

    class InputSerializer(StrictInputSerializer):
        class Meta:
            ref_name = "RunTrigger"

        suite = IdField(thing="suite", help_text="The suite's id.")
        models = serializers.ListField(
            child=serializers.CharField(), help_text='provider:model keys, e.g. ["openai:gpt-4o-mini"].'
        )
        case_filter = serializers.CharField(
            max_length=200, required=False, allow_blank=True, default="",
            help_text="A name substring, or tag:<tag>; empty: every enabled case.",
        )
        mode = serializers.CharField(
            required=False, default=Run.Mode.LIVE,
            help_text="live: call the models; record: call them and keep every answer; replay: serve kept answers.",
        )
        trials = WholeNumberField(
            required=False, default=1, help_text="How many times each case runs on each model."
        )
        budget_tokens = WholeNumberField(
            required=False, allow_null=True, default=None, help_text="Stop the run once its results used this many."
        )
        budget_cost = AsciiDecimalField(
            max_digits=12, decimal_places=4, required=False, allow_null=True, default=None,
            help_text="Stop the run once its results cost this much.",
        )

    def get_throttles(self) -> list[BaseThrottle]:
        # Only triggering is throttled; reads on the same URL are not.
        if self.request.method == "POST":
            return [ScopedRateThrottle()]
        return super().get_throttles()

    @extend_schema(
        tags=["runs"], operation_id="runs_create", request=InputSerializer,
        responses={
            201: RunDetailOutputSerializer,
            400: ErrorSerializer,
            503: OpenApiResponse(DetailSerializer, description="The run queue did not answer; no run was created."),
        },
    )
    def post(self, request: Request) -> Response:
        serializer = RunTriggerApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            suite = suite_detail(suite_id=data["suite"])
        except Suite.DoesNotExist:
            raise RunError(f"no suite with id {data['suite']}", field="suite") from None
        run = run_trigger(
            suite=suite, model_keys=data["models"], case_filter=data["case_filter"], triggered_by=request.user,
            mode=data["mode"], trials=data["trials"], budget_tokens=data["budget_tokens"],
            budget_cost=data["budget_cost"],
        )
        return Response(_run_detail(run.pk), status=status.HTTP_201_CREATED)


class RunsApi(RunListApi, RunTriggerApi):
    """GET lists runs (any signed-in user); POST triggers one (staff)."""


class RunDetailApi(RunsApiView):
    @extend_schema(tags=["runs"], operation_id="runs_retrieve", responses=RunDetailOutputSerializer)
    def get(self, request: Request, run_id: int) -> Response:
        return Response(_run_detail(run_id))


class RunDeleteApi(RunsApiView):
    @extend_schema(
        tags=["runs"], operation_id="runs_destroy",
        responses={204: None, 409: OpenApiResponse(DetailSerializer, description="The run is in progress.")},
    )
    def delete(self, request: Request, run_id: int) -> Response:
        run = get_object_or_404(Run.objects.all(), pk=run_id)
        _, skipped = run_delete(runs=[run])
        if skipped:
            raise RunConflict(f"run #{run.pk} is running; cancel it and delete it once it has stopped")
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunApi(RunDetailApi, RunDeleteApi):
    """GET reads one run with its summary and results (any signed-in user); DELETE removes it (staff)."""


class RunCancelApi(RunsApiView):
    @extend_schema(
        tags=["runs"], operation_id="runs_cancel", request=None,
        responses={200: RunDetailOutputSerializer, 409: OpenApiResponse(DetailSerializer, description="Finished.")},
    )
    def post(self, request: Request, run_id: int) -> Response:
        StrictInputSerializer(data=request.data).is_valid(raise_exception=True)
        run = get_object_or_404(Run.objects.all(), pk=run_id)
        run_cancel(run=run)
        return Response(_run_detail(run.pk))


class RunBlessApi(RunsApiView):
    @extend_schema(
        tags=["runs"], operation_id="runs_bless", request=None,
        description="Make the run its suite's blessed baseline: later runs of the suite compare with it by default "
        "(the compare page and run_suite). Replaces the suite's previously blessed run. Only a run that finished "
        "Passed or Failed can be blessed.",
        responses={
            200: RunDetailOutputSerializer, 409: OpenApiResponse(DetailSerializer, description="Not blessable."),
        },
    )
    def post(self, request: Request, run_id: int) -> Response:
        StrictInputSerializer(data=request.data).is_valid(raise_exception=True)
        run = get_object_or_404(Run.objects.all(), pk=run_id)
        run_bless(run=run, by=request.user)
        return Response(_run_detail(run.pk))


class RunUnblessApi(RunsApiView):
    @extend_schema(
        tags=["runs"], operation_id="runs_unbless", request=None,
        description="Stop using the run as its suite's baseline (idempotent); later runs compare with their previous "
        "run again.",
        responses={200: RunDetailOutputSerializer},
    )
    def post(self, request: Request, run_id: int) -> Response:
        StrictInputSerializer(data=request.data).is_valid(raise_exception=True)
        run = get_object_or_404(Run.objects.all(), pk=run_id)
        run_unbless(run=run)
        return Response(_run_detail(run.pk))


class RunResumeApi(RunsApiView):
    throttle_scope = "run_trigger"

    @extend_schema(
        tags=["runs"], operation_id="runs_resume", request=None,
        description="Queue an interrupted run (Error or Cancelled) again: only the case × model pairs without a "
        "result run, into the same run.",
        responses={
            200: RunDetailOutputSerializer,
            409: OpenApiResponse(DetailSerializer, description="Not resumable."),
            503: OpenApiResponse(DetailSerializer, description="The run queue is unavailable."),
        },
    )
    def post(self, request: Request, run_id: int) -> Response:
        StrictInputSerializer(data=request.data).is_valid(raise_exception=True)
        run = get_object_or_404(Run.objects.all(), pk=run_id)
        run_resume(run=run)
        return Response(_run_detail(run.pk))


class RunBulkDeleteApi(RunsApiView):
    class InputSerializer(StrictInputSerializer):
        class Meta:
            ref_name = "RunBulkDelete"

        ids = serializers.ListField(child=IdField(thing="run"), allow_empty=False, max_length=1000)

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "RunBulkDeleteResult"

        deleted = serializers.ListField(child=serializers.IntegerField())
        skipped = serializers.ListField(
            child=serializers.IntegerField(), help_text="Running runs, left alone: cancel them first."
        )
        not_found = serializers.ListField(child=serializers.IntegerField())
        detail = serializers.CharField()

    @extend_schema(
        tags=["runs"], operation_id="runs_bulk_delete", request=InputSerializer,
        responses={200: OutputSerializer, 400: ErrorSerializer},
    )
    def post(self, request: Request) -> Response:
        serializer = RunBulkDeleteApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        ids = list(dict.fromkeys(serializer.validated_data["ids"]))
        runs = list(Run.objects.filter(pk__in=ids))
        deleted, skipped = run_delete(runs=runs)
        found = {run.pk for run in runs}
        detail = f"deleted {len(deleted)} run(s)"
        if skipped:
            detail += f"; skipped {', '.join(f'#{pk}' for pk in skipped)}: running — cancel first, delete once stopped"
        not_found = [pk for pk in ids if pk not in found]
        data = {"deleted": deleted, "skipped": skipped, "not_found": not_found, "detail": detail}
        return Response(RunBulkDeleteApi.OutputSerializer(data).data)


class ResultFreezeApi(RunsApiView):
    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "FrozenCase"

        id = serializers.IntegerField(help_text="The new case.")
        name = serializers.CharField()
        suite = serializers.IntegerField(source="suite_id")
        enabled = serializers.BooleanField(help_text="Always false: a person reviews the draft and enables it.")
        turns = serializers.IntegerField(help_text="Its turns: the scripted ones, then one per simulated line.")

    @extend_schema(
        tags=["runs"], operation_id="runs_results_freeze", request=None,
        description="Freeze a result of a case with a simulated user into a scripted case: the user model's lines "
        "become turns. The case lands disabled, as a draft for review, in the result's suite.",
        responses={
            201: OutputSerializer, 400: ErrorSerializer,
            409: OpenApiResponse(DetailSerializer, description="Not freezable: no simulated line, or what it ran was "
                                 "not kept."),
        },
    )
    def post(self, request: Request, run_id: int, result_id: int) -> Response:
        StrictInputSerializer(data=request.data).is_valid(raise_exception=True)
        result = CaseResult.objects.filter(run__pk=run_id, pk=result_id).first()
        if result is None:
            raise NotFound(f"run #{run_id} has no result {result_id}")
        case = result_freeze(result=result)
        data = ResultFreezeApi.OutputSerializer(
            {"id": case.pk, "name": case.name, "suite_id": case.suite_id, "enabled": case.enabled,
             "turns": case.turns.count()}
        ).data
        return Response(data, status=status.HTTP_201_CREATED)


class ResultDetailApi(RunsApiView):
    @extend_schema(tags=["runs"], operation_id="runs_results_retrieve", responses=ResultDetailOutputSerializer)
    def get(self, request: Request, run_id: int, result_id: int) -> Response:
        # run__pk, not run_id: Django keeps an id beyond the column's range out of a pk lookup, not out of a foreign
        # key's (SQLite raises OverflowError on it).
        result = CaseResult.objects.filter(run__pk=run_id, pk=result_id).first()
        if result is None:
            raise NotFound(f"run #{run_id} has no result {result_id}")
        return Response(ResultDetailOutputSerializer(result).data)
