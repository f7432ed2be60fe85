"""The host's REST API: one view class per action, reads through selectors, writes through services.

Two actions that share a URL (list + create, detail + update) are combined into one mounted view; each action keeps
its own serializers, referenced by the action's class name so the combination cannot mix them up.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agenthost.document import TEMPERATURE_MESSAGE, AgentInput
from agenthost.mcp.tools import refresh_for_chat
from agenthost.models import (
    CONVERSATION_TITLE_MAX_LENGTH,
    MESSAGE_MAX_LENGTH,
    TAG_MAX_LENGTH,
    Agent,
    Conversation,
)
from agenthost.selectors import (
    SEALED_FILTER_CHOICES,
    agent_list,
    conversation_list,
    conversation_messages,
    conversation_state,
    conversation_state_timeline,
)
from agenthost.services import agent_create, agent_update, conversation_send, conversation_start
from agenthost.turns import (
    ConcurrentTurn,
    ConversationError,
    ConversationSealed,
    InvalidInput,
    ModelCallFailed,
    StepLimitExceeded,
)
from agenthost.validation import agent_problems, agent_shape_problems, unstorable_paths
from common.api import (
    ApiPagination,
    AsciiFloatField,
    IdField,
    IsStaffOrReadOnly,
    JSONInputField,
    StrictInputSerializer,
    WholeNumberField,
)
from common.inputs import UNSTORABLE_MESSAGE, parse_id
from common.schemas import defaults

# What a PositiveIntegerField holds on every database Django supports.
MAX_POSITIVE_INT = 2**31 - 1


def _paginated_response(
    *, serializer_class: type[serializers.Serializer[Any]], queryset: QuerySet[Any], request: Request, view: APIView
) -> Response:
    paginator = ApiPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


# --- Agents -----------------------------------------------------------------------------------------------------


class AgentOutputSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    provider = serializers.CharField()
    model = serializers.CharField()
    model_key = serializers.CharField()
    temperature = serializers.FloatField(allow_null=True)
    functions = serializers.JSONField()
    runtime = serializers.CharField(help_text="Whose loop runs the agent: native (agenttest's) or the team's code.")
    entry = serializers.CharField(help_text='The team\'s code a non-native runtime runs, "module:attribute".')
    outside_effects = serializers.JSONField(help_text="Tool name → whether it has effects outside agenttest.")
    deps = serializers.CharField(help_text='pydantic-ai: the run\'s deps factory, "module:attribute", given the state.')
    command = serializers.CharField(help_text="A process agent's program.")
    args = serializers.JSONField(help_text="A process agent's program's arguments.")
    cwd = serializers.CharField(help_text="A process agent's directory, relative to where agenttest runs.")
    env = serializers.JSONField(help_text="Names of the environment variables a process agent is given.")
    protocol = serializers.CharField(help_text='How a process agent is spoken to over stdio: "jsonl".')
    sub_agents = serializers.SerializerMethodField(help_text="Names of the agents this one may route to.")

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_sub_agents(self, agent: Agent) -> list[str]:
        return [sub.name for sub in agent.sub_agents.all()]


class AgentDetailOutputSerializer(AgentOutputSerializer):
    instruction = serializers.CharField()
    rules = serializers.JSONField()
    max_steps = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class AgentListApi(APIView):
    pagination_class = ApiPagination

    @extend_schema(tags=["agents"], operation_id="agents_list", responses=AgentOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return _paginated_response(
            serializer_class=AgentOutputSerializer, queryset=agent_list(), request=request, view=self
        )


class AgentCreateApi(APIView):
    permission_classes = [IsAuthenticated, IsStaffOrReadOnly]
    staff_only_message = "Only staff users may change agents."

    class InputSerializer(StrictInputSerializer):
        """Reads an agent from a JSON body or a form (whose numbers and JSON values are text). Its shape, limits and
        defaults are the agent document's (agenthost/document.py, checked by agent_shape_problems), its meaning
        agent_problems'."""

        name = serializers.CharField(required=False, allow_blank=True)
        description = serializers.CharField(required=False, allow_blank=True)
        instruction = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
        runtime = serializers.CharField(required=False, allow_blank=True)
        entry = serializers.CharField(required=False, allow_blank=True)
        outside_effects = JSONInputField(required=False)
        deps = serializers.CharField(required=False, allow_blank=True)
        command = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
        args = JSONInputField(required=False)
        cwd = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
        env = JSONInputField(required=False)
        protocol = serializers.CharField(required=False, allow_blank=True)
        provider = serializers.CharField(required=False, allow_blank=True)
        model = serializers.CharField(required=False, allow_blank=True)
        # null: the model's default — what a reasoning model needs, since it refuses any other.
        temperature = AsciiFloatField(
            required=False, allow_null=True, error_messages={"invalid": TEMPERATURE_MESSAGE}
        )
        functions = JSONInputField(required=False)
        rules = JSONInputField(required=False)
        sub_agents = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False)
        # Text that is no whole number keeps the one integer parser's message (WholeNumberField).
        max_steps = WholeNumberField(required=False, allow_null=True)

        def validate_name(self, value: str) -> str:
            others = Agent.objects.filter(name=value)
            if self.instance is not None:
                others = others.exclude(pk=self.instance.pk)
            if others.exists():
                raise serializers.ValidationError(f"an agent named {value!r} already exists")
            return value

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if shape := agent_shape_problems(attrs, partial=self.partial):
                raise serializers.ValidationError(shape)
            if not self.partial:
                attrs = {**defaults(AgentInput), **attrs}
            current = self.instance
            merged: dict[str, Any] = {
                field: attrs[field] if field in attrs else getattr(current, field, "")
                for field in (
                    "name", "instruction", "provider", "model", "functions", "rules", "runtime", "entry",
                    "outside_effects", "deps", "command", "args", "cwd", "env", "protocol",
                )
            }
            if "sub_agents" in attrs:
                merged["sub_agents"] = attrs["sub_agents"]
            else:
                merged["sub_agents"] = [sub.name for sub in current.sub_agents.all()] if current else []
            if problems := agent_problems(**merged, instruction_required=True):
                raise serializers.ValidationError(problems)
            return attrs

    @extend_schema(
        tags=["agents"], operation_id="agents_create", request=AgentInput,
        responses={201: AgentDetailOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        serializer = AgentCreateApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            agent = agent_create(**serializer.validated_data)
        except IntegrityError:
            if not _name_taken(serializer.validated_data["name"], exclude=None):
                raise
            return _name_taken_response(serializer.validated_data["name"])
        return Response(AgentDetailOutputSerializer(agent).data, status=status.HTTP_201_CREATED)


class AgentsApi(AgentListApi, AgentCreateApi):
    """GET lists agents (any signed-in user); POST creates one (staff)."""

    permission_classes = [IsAuthenticated, IsStaffOrReadOnly]
    staff_only_message = "Only staff users may change agents."


def _name_taken(name: str, *, exclude: int | None) -> bool:
    """After an IntegrityError: whether another request took the name between validation and the write. Any other
    integrity failure is the server's, and never reported as a name clash."""
    others = Agent.objects.filter(name=name)
    if exclude is not None:
        others = others.exclude(pk=exclude)
    return others.exists()


def _name_taken_response(name: str) -> Response:
    return Response({"name": [f"an agent named {name!r} already exists"]}, status=status.HTTP_400_BAD_REQUEST)


def _agent_or_404(agent_id: int) -> Agent:
    return get_object_or_404(agent_list(), pk=agent_id)


class AgentDetailApi(APIView):
    @extend_schema(tags=["agents"], operation_id="agents_retrieve", responses=AgentDetailOutputSerializer)
    def get(self, request: Request, agent_id: int) -> Response:
        return Response(AgentDetailOutputSerializer(_agent_or_404(agent_id)).data)


class AgentUpdateApi(APIView):
    permission_classes = [IsAuthenticated, IsStaffOrReadOnly]
    staff_only_message = "Only staff users may change agents."

    class InputSerializer(AgentCreateApi.InputSerializer):
        """The create fields: a PATCH changes only what it sends."""

    @extend_schema(
        tags=["agents"], operation_id="agents_partial_update", request=AgentInput,
        responses=AgentDetailOutputSerializer,
    )
    def patch(self, request: Request, agent_id: int) -> Response:
        agent = _agent_or_404(agent_id)
        serializer = AgentUpdateApi.InputSerializer(agent, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        try:
            agent = agent_update(agent=agent, **serializer.validated_data)
        except IntegrityError:
            name = serializer.validated_data.get("name")
            if name is None or not _name_taken(name, exclude=agent.pk):
                raise
            return _name_taken_response(name)
        return Response(AgentDetailOutputSerializer(_agent_or_404(agent.pk)).data)


class AgentApi(AgentDetailApi, AgentUpdateApi):
    """GET reads one agent (any signed-in user); PATCH changes it (staff)."""

    permission_classes = [IsAuthenticated, IsStaffOrReadOnly]
    staff_only_message = "Only staff users may change agents."


# --- Conversations ----------------------------------------------------------------------------------------------


def _visible_conversations(request: Request) -> QuerySet[Conversation]:
    return conversation_list(user=request.user).select_related("current_agent")


def _conversation_or_404(request: Request, conversation_id: int) -> Conversation:
    # Someone else's conversation is indistinguishable from a missing one: its existence is not disclosed.
    return get_object_or_404(_visible_conversations(request), pk=conversation_id)


class AgentRefSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()


class ConversationOutputSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    title = serializers.CharField()
    agent = AgentRefSerializer()
    current_agent = AgentRefSerializer(allow_null=True, help_text="The agent the next turn starts with.")
    owner = serializers.CharField(source="owner.username", allow_null=True, default=None)
    tags = serializers.ListField(child=serializers.CharField())
    turn_count = serializers.IntegerField()
    sealed = serializers.BooleanField(help_text="Nothing can be sent to a sealed conversation; sealed_reason says why.")
    sealed_reason = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ConversationDetailOutputSerializer(ConversationOutputSerializer):
    state = serializers.DictField(child=serializers.JSONField(), help_text="The current state, key → value.")


def _conversation_detail(conversation: Conversation) -> dict[str, Any]:
    conversation.state = conversation_state(conversation=conversation)
    return ConversationDetailOutputSerializer(conversation).data


class ConversationListApi(APIView):
    pagination_class = ApiPagination

    class FilterSerializer(serializers.Serializer[Any]):
        agent = IdField(thing="agent", required=False)
        tag = serializers.CharField(required=False, default="")
        search = serializers.CharField(required=False, default="")
        sealed = serializers.ChoiceField(
            choices=list(SEALED_FILTER_CHOICES),
            required=False,
            default="0",
            help_text="0 (default): hide sealed conversations (e.g. a test run's); 1: only them; all: both.",
        )

    @extend_schema(
        tags=["conversations"], operation_id="conversations_list", parameters=[FilterSerializer],
        responses=ConversationOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        filters = ConversationListApi.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        queryset = conversation_list(
            user=request.user,
            agent_id=filters.validated_data.get("agent"),
            tag=filters.validated_data["tag"],
            search=filters.validated_data["search"],
            sealed=SEALED_FILTER_CHOICES[filters.validated_data["sealed"]],
        ).select_related("current_agent")
        return _paginated_response(
            serializer_class=ConversationOutputSerializer, queryset=queryset, request=request, view=self
        )


class ConversationStartApi(APIView):
    class InputSerializer(StrictInputSerializer):
        class Meta:
            ref_name = "ConversationStart"

        class HistoryItemSerializer(StrictInputSerializer):
            role = serializers.ChoiceField(choices=["user", "assistant"])
            content = serializers.CharField()

        agent = serializers.CharField(help_text="The entry agent's id or name.")
        title = serializers.CharField(max_length=CONVERSATION_TITLE_MAX_LENGTH, required=False, default="")
        tags = serializers.ListField(
            child=serializers.CharField(max_length=TAG_MAX_LENGTH), required=False, default=list
        )
        initial_state = serializers.DictField(
            child=serializers.JSONField(), required=False, default=dict, help_text="State before the first turn."
        )
        history = serializers.ListField(
            child=HistoryItemSerializer(), required=False, default=list,
            help_text="Pre-written messages the conversation starts with.",
        )

        def validate_agent(self, value: str) -> Agent:
            agent_id = parse_id(value)
            agent = Agent.objects.filter(pk=agent_id).first() if agent_id is not None else None
            agent = agent or Agent.objects.filter(name=value).first()
            if agent is None:
                raise serializers.ValidationError(f"no agent with id or name {value!r}")
            return agent

        def validate_initial_state(self, value: dict[str, Any]) -> dict[str, Any]:
            if paths := unstorable_paths(value, "initial_state"):
                raise serializers.ValidationError([f"{path}: {UNSTORABLE_MESSAGE}" for path in paths])
            return value

    @extend_schema(
        tags=["conversations"], operation_id="conversations_create", request=InputSerializer,
        responses={201: ConversationDetailOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        serializer = ConversationStartApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # A chat (this API, never a test run) offers what the agent's MCP servers list now.
        refresh_for_chat(serializer.validated_data["agent"])
        try:
            conversation = conversation_start(owner=request.user, **serializer.validated_data)
        except InvalidInput as exc:
            return Response({"detail": str(exc), "code": exc.code}, status=status.HTTP_400_BAD_REQUEST)
        return Response(
            _conversation_detail(_conversation_or_404(request, conversation.pk)), status=status.HTTP_201_CREATED
        )


class ConversationsApi(ConversationListApi, ConversationStartApi):
    """GET lists the conversations you may see (staff: all); POST starts one owned by you."""


class ConversationDetailApi(APIView):
    @extend_schema(tags=["conversations"], responses=ConversationDetailOutputSerializer)
    def get(self, request: Request, conversation_id: int) -> Response:
        return Response(_conversation_detail(_conversation_or_404(request, conversation_id)))


class UsageSerializer(serializers.Serializer[Any]):
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()


class ToolCallSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    arguments = serializers.JSONField(help_text="Parsed arguments, or the raw text when they were not valid JSON.")
    result = serializers.CharField()
    outcome = serializers.CharField(
        help_text="executed, static, missing, invalid, unavailable (not declared by the agent), mocked, blocked, …"
    )
    agent = serializers.CharField()
    tool_call_id = serializers.CharField()
    error = serializers.BooleanField()
    trigger = serializers.CharField()
    stop = serializers.BooleanField()


class TurnSerializer(serializers.Serializer[Any]):
    conversation_id = serializers.IntegerField()
    turn = serializers.IntegerField()
    output = serializers.CharField()
    finish = serializers.CharField(help_text="answer, stop_completion or missing_function; empty if it did not end.")
    tool_calls = ToolCallSerializer(many=True)
    agent_chain = serializers.ListField(child=serializers.CharField())
    usage = UsageSerializer()
    model_latency_ms = serializers.FloatField()
    steps = serializers.IntegerField()
    models = serializers.ListField(child=serializers.CharField())
    nodes_visited = serializers.ListField(
        child=serializers.CharField(), help_text="A langgraph agent's graph nodes the turn ran, in order."
    )


class TurnFailureSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()
    code = serializers.CharField()
    # The response's key; DRF's metaclass moves a declared field out of the class, so it never shadows the
    # serializer's `partial` flag the stubs see it override.
    partial = TurnSerializer(  # type: ignore[assignment]
        allow_null=True, help_text="What happened in the turn before it stopped."
    )
    state = serializers.DictField(child=serializers.JSONField())


class MessageSendApi(APIView):
    class InputSerializer(StrictInputSerializer):
        class Meta:
            ref_name = "MessageSend"

        text = serializers.CharField(max_length=MESSAGE_MAX_LENGTH)

    class OutputSerializer(TurnSerializer):
        class Meta:
            ref_name = "TurnWithState"

        state = serializers.DictField(child=serializers.JSONField(), help_text="The state after the turn.")

    # Each failure keeps what the turn did before it stopped, so a caller can show it.
    _failure_status = (
        (ModelCallFailed, status.HTTP_502_BAD_GATEWAY),
        (StepLimitExceeded, status.HTTP_422_UNPROCESSABLE_ENTITY),
        (InvalidInput, status.HTTP_400_BAD_REQUEST),
        # Refused before anything ran: a sealed conversation, or another turn in progress in it.
        (ConversationSealed, status.HTTP_409_CONFLICT),
        (ConcurrentTurn, status.HTTP_409_CONFLICT),
    )

    @extend_schema(
        tags=["conversations"], operation_id="conversations_messages_create", request=InputSerializer,
        responses={
            200: OutputSerializer,
            400: TurnFailureSerializer,
            409: TurnFailureSerializer,
            422: TurnFailureSerializer,
            502: TurnFailureSerializer,
        },
    )
    def post(self, request: Request, conversation_id: int) -> Response:
        conversation = _conversation_or_404(request, conversation_id)
        serializer = MessageSendApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            result = conversation_send(
                conversation=conversation, text=serializer.validated_data["text"], team_code_in_child=True
            )
        except ConversationError as exc:
            code = next(
                (code for kind, code in self._failure_status if isinstance(exc, kind)),
                status.HTTP_422_UNPROCESSABLE_ENTITY,
            )
            body = {
                "detail": str(exc),
                "code": exc.code,
                "partial": exc.partial.as_dict() if exc.partial else None,
                "state": conversation_state(conversation=conversation),
            }
            return Response(TurnFailureSerializer(body).data, status=code)
        data = {**result.as_dict(), "state": conversation_state(conversation=conversation)}
        return Response(MessageSendApi.OutputSerializer(data).data)


class MessageOutputSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    seq = serializers.IntegerField()
    turn = serializers.IntegerField(help_text="-1 for pre-written history and start-up rules.")
    role = serializers.CharField()
    content = serializers.CharField()
    function_name = serializers.CharField()
    arguments = serializers.JSONField(allow_null=True)
    raw_arguments = serializers.CharField()
    tool_call_id = serializers.CharField()
    agent = serializers.CharField(
        source="author", allow_null=True, default=None,
        help_text="The agent that wrote the message; for a runtime agent's sub-agent, the framework's name for it.",
    )
    trigger = serializers.CharField()
    outcome = serializers.CharField()
    model = serializers.CharField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    latency_ms = serializers.FloatField()
    created_at = serializers.DateTimeField()


class MessageListApi(APIView):
    pagination_class = ApiPagination

    @extend_schema(
        tags=["conversations"], operation_id="conversations_messages_list",
        responses=MessageOutputSerializer(many=True),
    )
    def get(self, request: Request, conversation_id: int) -> Response:
        conversation = _conversation_or_404(request, conversation_id)
        return _paginated_response(
            serializer_class=MessageOutputSerializer,
            queryset=conversation_messages(conversation=conversation),
            request=request,
            view=self,
        )


class MessagesApi(MessageListApi, MessageSendApi):
    """GET lists a conversation's messages in order; POST sends a user message and runs the turn."""


class MessageSeqField(serializers.IntegerField):
    """A message seq (0 and up) in a query string, ASCII digits only: DRF's IntegerField reads any Unicode digit
    ("٣" is 3 to it), and ids and seqs are parsed one way everywhere (common.inputs.parse_id)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, str) and not (data.strip().isascii() and data.strip().isdigit()):
            self.fail("invalid")
        return super().to_internal_value(data)


class ConversationStateApi(APIView):
    class FilterSerializer(serializers.Serializer[Any]):
        at = MessageSeqField(
            required=False, min_value=0, max_value=MAX_POSITIVE_INT,
            help_text="A message seq: the state right after that message.",
        )

    class OutputSerializer(serializers.Serializer[Any]):
        class Meta:
            ref_name = "ConversationState"

        class TimelineEntrySerializer(serializers.Serializer[Any]):
            key = serializers.CharField()
            value = serializers.JSONField()
            message_seq = serializers.IntegerField(allow_null=True, help_text="Empty for the initial state.")
            turn = serializers.IntegerField(allow_null=True)

        conversation_id = serializers.IntegerField()
        at = serializers.IntegerField(allow_null=True)
        state = serializers.DictField(child=serializers.JSONField())
        timeline = TimelineEntrySerializer(many=True)

    @extend_schema(
        tags=["conversations"], operation_id="conversations_state_retrieve",
        parameters=[OpenApiParameter("at", OpenApiTypes.INT, description="A message seq (≥ 0).")],
        responses=OutputSerializer,
    )
    def get(self, request: Request, conversation_id: int) -> Response:
        conversation = _conversation_or_404(request, conversation_id)
        filters = ConversationStateApi.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        at = filters.validated_data.get("at")
        data = {
            "conversation_id": conversation.pk,
            "at": at,
            "state": conversation_state(conversation=conversation, at_seq=at),
            "timeline": conversation_state_timeline(conversation=conversation),
        }
        return Response(ConversationStateApi.OutputSerializer(data).data)
