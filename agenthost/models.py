from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

# The limits of what the host stores, written here once: the API, the admin and the agent files read them.
AGENT_NAME_MAX_LENGTH = 100
# An agent's code path, deps factory, command and working directory.
AGENT_PATH_MAX_LENGTH = 300
AGENT_RUNTIME_MAX_LENGTH = 50
AGENT_PROTOCOL_MAX_LENGTH = 20
PROVIDER_MAX_LENGTH = 100
MODEL_NAME_MAX_LENGTH = 200
CONVERSATION_TITLE_MAX_LENGTH = 200
# Each of a conversation's tags (a JSON list, so the column does not bound them).
TAG_MAX_LENGTH = 100
# What a person sends in one turn.
MESSAGE_MAX_LENGTH = 20_000


class Agent(models.Model):
    class Runtime(models.TextChoices):
        # agenttest's own loop, over the instruction, model and functions below.
        NATIVE = "native", "native (agenttest's loop)"
        OPENAI_AGENTS = "openai-agents", "OpenAI Agents SDK"
        PYDANTIC_AI = "pydantic-ai", "pydantic-ai"
        PYTHON = "python", "plain Python function"
        LANGGRAPH = "langgraph", "LangGraph graph"
        # The team's agent as a program in any language, spoken to over its stdio (agenthost/runtimes/process.py).
        PROCESS = "process", "a process (any language, over stdio)"

    name = models.CharField(max_length=AGENT_NAME_MAX_LENGTH, unique=True)
    description = models.TextField(blank=True, help_text="What this agent handles; a router reads it to choose.")
    instruction = models.TextField(
        blank=True,
        help_text="System instruction. A Django template rendered with the conversation state, e.g. {{ customer }}. "
        "Empty for an agent whose runtime is the team's own code: its instruction is in that code.",
    )
    runtime = models.CharField(
        max_length=AGENT_RUNTIME_MAX_LENGTH,
        choices=Runtime.choices,
        default=Runtime.NATIVE,
        help_text="Whose loop runs the agent: agenttest's own (native), or the team's code named by `entry`.",
    )
    entry = models.CharField(
        max_length=AGENT_PATH_MAX_LENGTH,
        blank=True,
        help_text='The team\'s code a non-native runtime runs, "module:attribute" (e.g. "shop.bot:respond"); '
        "imported like a plugin, from the current directory.",
    )
    deps = models.CharField(
        max_length=AGENT_PATH_MAX_LENGTH,
        blank=True,
        default="",
        help_text='For a pydantic-ai agent: the factory of its run\'s deps, "module:attribute" (e.g. '
        '"shop.deps:make_deps"), called with the conversation\'s state (a dict) at each turn.',
    )
    command = models.CharField(
        max_length=AGENT_PATH_MAX_LENGTH,
        blank=True,
        default="",
        help_text="For a process agent: the program to start (a name on PATH, or a path relative to `cwd`).",
    )
    args = models.JSONField(default=list, blank=True, help_text="For a process agent: the program's arguments.")
    cwd = models.CharField(
        max_length=AGENT_PATH_MAX_LENGTH,
        blank=True,
        default="",
        help_text="For a process agent: the directory it starts in, relative to where agenttest runs; empty: there.",
    )
    env = models.JSONField(
        default=list,
        blank=True,
        help_text="For a process agent: the names of the environment variables it is given from agenttest's "
        "(values never stored).",
    )
    protocol = models.CharField(
        max_length=AGENT_PROTOCOL_MAX_LENGTH,
        blank=True,
        default="",
        help_text='For a process agent: how it is spoken to over stdio: "jsonl" (one JSON object per line) or "acp" '
        "(the Agent Client Protocol, agenttest its client).",
    )
    outside_effects = models.JSONField(
        default=dict,
        blank=True,
        help_text='For an agent of the team\'s code: which of its tools have effects outside agenttest, e.g. '
        '{"find_order": false}. A tool not named counts as having them (tests must mock it).',
    )
    provider = models.CharField(max_length=PROVIDER_MAX_LENGTH, help_text="A configured model provider, e.g. 'openai'.")
    model = models.CharField(max_length=MODEL_NAME_MAX_LENGTH)
    temperature = models.FloatField(
        default=0.0, null=True, blank=True, help_text="Empty: the model's default (no temperature is sent)."
    )
    functions = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            'Functions the agent may call: [{"name", "description", "parameters": <JSON Schema>, "output"?}]. '
            "A name alone uses the registered function's description and schema; 'output' is a static answer."
        ),
    )
    rules = models.JSONField(
        default=list,
        blank=True,
        help_text='Rule-triggered calls: [{"trigger": "conversation_started"|"state_changed", "key"?, "function", '
        '"arguments"?}].',
    )
    sub_agents = models.ManyToManyField("self", symmetrical=False, blank=True, related_name="routers")
    max_steps = models.PositiveIntegerField(
        null=True, blank=True, help_text="Model steps allowed per turn; empty uses AGENTTEST_MAX_STEPS."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def model_key(self) -> str:
        return f"{self.provider}:{self.model}"


class Conversation(models.Model):
    class Source(models.TextChoices):
        CHAT = "chat", "Chat"
        TRACE = "trace", "Trace"

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="conversations")
    current_agent = models.ForeignKey(
        Agent,
        on_delete=models.PROTECT,
        related_name="+",
        null=True,
        blank=True,
        help_text="The agent the next turn starts with after routing; empty means the entry agent.",
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="conversations"
    )
    tags = models.JSONField(default=list, blank=True)
    title = models.CharField(max_length=CONVERSATION_TITLE_MAX_LENGTH, blank=True)
    turn_count = models.PositiveIntegerField(default=0)
    message_count = models.PositiveIntegerField(
        default=0, help_text="Messages written so far; the next message's seq. Claimed per turn, optimistically."
    )
    sealed_reason = models.CharField(
        max_length=200, blank=True, help_text="Why nothing can be sent to this conversation without its seal key."
    )
    seal_hash = models.CharField(
        max_length=64,
        blank=True,
        help_text="SHA-256 (hex) of the seal key its creator holds; empty means anyone allowed to see it may send.",
    )
    turn_claimed_until = models.DateTimeField(
        null=True, blank=True, help_text="A turn is running until then (or until it ends); no other turn may start."
    )
    source = models.CharField(
        max_length=20,
        choices=Source.choices,
        default=Source.CHAT,
        help_text="Where the conversation happened: agenttest's chat, or a team's service whose traces were imported.",
    )
    trace_service = models.CharField(max_length=200, blank=True, help_text="An imported conversation's service.name.")
    # Attributes of one instance, never stored (annotations only: no class attribute, so `hasattr` tells whether one
    # was set): the seal key conversation_start hands a sealed conversation's creator, and the state the API's
    # detail shows.
    seal_key: str
    state: dict[str, Any]
    trace_key = models.CharField(
        max_length=300,
        blank=True,
        help_text="An imported conversation's key in its service: gen_ai.conversation.id, else its trace id. "
        "Importing the same key again updates this conversation.",
    )
    trace_ids = models.JSONField(default=list, blank=True, help_text="The traces an imported conversation spans.")
    trace_agent = models.CharField(
        max_length=200, blank=True, help_text="The agent name the trace gave (gen_ai.agent.name); empty if none."
    )
    bound_by = models.CharField(
        max_length=20,
        blank=True,
        help_text="How an imported conversation was bound to `agent`: 'agent name', 'service name' or 'chosen'.",
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["trace_service", "trace_key"],
                condition=models.Q(source="trace"),
                name="conversation_unique_trace_key",
            )
        ]

    def __str__(self) -> str:
        return self.title or f"Conversation #{self.pk} with {self.agent_id and self.agent.name}"

    @property
    def sealed(self) -> bool:
        return bool(self.seal_hash)


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"
        TOOL_CALL = "tool_call", "Tool call"
        TOOL_RESULT = "tool_result", "Tool result"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField(help_text="Order within the conversation.")
    turn = models.IntegerField(help_text="Turn index; -1 for pre-written history and start-up rules.")
    role = models.CharField(max_length=20, choices=Role.choices)
    content = models.TextField(blank=True)
    function_name = models.CharField(max_length=200, blank=True)
    arguments = models.JSONField(null=True, blank=True)
    raw_arguments = models.TextField(blank=True, help_text="The arguments as the model wrote them.")
    tool_call_id = models.CharField(max_length=200, blank=True)
    agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    agent_name = models.CharField(
        max_length=200,
        blank=True,
        help_text="The agent of the team's framework that wrote the message, when it is not `agent` itself (a "
        "runtime agent's sub-agent, handed off to, has only a name); empty otherwise.",
    )
    trigger = models.CharField(max_length=20, blank=True, help_text="model, rule or direct, for tool calls.")
    outcome = models.CharField(max_length=20, blank=True, help_text="How a tool call was answered.")
    model = models.CharField(max_length=300, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    latency_ms = models.FloatField(default=0)
    span_id = models.CharField(
        max_length=16, blank=True, help_text="The span an imported message was read from; empty for a chat's."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["conversation", "seq"], name="message_unique_seq")]

    def __str__(self) -> str:
        return f"{self.role} #{self.seq}"

    @property
    def author(self) -> str | None:
        """The name of the agent that wrote the message, as a transcript shows it: the framework's sub-agent that
        made it, else the agenttest agent; None when there is neither."""
        return self.agent_name or (self.agent.name if self.agent is not None else None)


class StateChange(models.Model):
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="state_changes")
    key = models.CharField(max_length=200)
    value = models.JSONField(null=True)
    message = models.ForeignKey(
        Message,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="state_changes",
        help_text="The message that caused the change; empty for initial state.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation_id", "id"]
        indexes = [models.Index(fields=["conversation", "key"])]

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}"


class McpToolList(models.Model):
    """The last tools/list answer of a configured MCP server. Agents' declarations of the server's tools expand from
    it, so a test run offers the model exactly what was listed and never contacts the server to find out."""

    server = models.CharField(max_length=100, unique=True)
    tools = models.JSONField(default=list, help_text="The tools as the server listed them (name, inputSchema, …).")
    listed_at = models.DateTimeField()

    class Meta:
        ordering = ["server"]

    def __str__(self) -> str:
        return f"MCP tools of {self.server}"
