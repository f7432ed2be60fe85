"""Suites and cases. What a reviewer edits in the admin (history, turns, mocks, assertions) are rows with inlines."""

from __future__ import annotations

from django.db import models

from agenthost.seams import Agent, Conversation


class Suite(models.Model):
    name = models.CharField(max_length=200, unique=True)
    description = models.TextField(blank=True)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="suites")
    judge_model = models.CharField(
        max_length=300, blank=True, help_text="provider:model that scores llmJudge assertions; empty: none."
    )
    extra_allowed_functions = models.JSONField(
        default=list,
        blank=True,
        help_text="Function names allowed to really execute during a test, on top of the five control-flow ones.",
    )
    force_blocked_functions = models.JSONField(
        default=list, blank=True, help_text="Function names always blocked, even when allowed or mocked."
    )
    network_allow = models.JSONField(
        default=list, blank=True,
        help_text="Hosts the suite's extra-allowed effect-free tools may reach under test (agenthost/seal.py).",
    )
    case_timeout_seconds = models.PositiveIntegerField(default=120)
    enabled = models.BooleanField(default=True)
    isolation_group = models.CharField(
        max_length=50,
        default="default",
        help_text="Runs of one group execute one at a time, in trigger order; groups run side by side on workers "
        "serving them (agenttest worker --groups).",
    )
    case_concurrency = models.PositiveSmallIntegerField(
        default=1,
        help_text="How many case × model pairs of a run execute at once. Above 1 only for a hermetic suite (every "
        "function mocked or blocked, extra-allowed ones free of outside effects).",
    )
    mock_rules = models.JSONField(
        default=dict, blank=True,
        help_text='How `agenttest mocks verify` compares each tool\'s mocks with the real tool: function name → '
        '{"compare": "exact" | "shape", "ignore": [paths such as "updated_at" or "items[*].price"]}.',
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Case(models.Model):
    class Source(models.TextChoices):
        MANUAL = "manual", "Manual"
        RECORDED = "recorded", "Recorded"
        EXTRACTED = "extracted", "Extracted"

    class Type(models.TextChoices):
        AGENT = "agent", "Agent"
        ROUTING = "routing", "Routing"

    class UnmockedPolicy(models.TextChoices):
        BLOCK = "block", "Block"

    suite = models.ForeignKey(Suite, on_delete=models.CASCADE, related_name="cases")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.MANUAL)
    source_conversation = models.ForeignKey(
        Conversation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    type = models.CharField(max_length=20, choices=Type.choices, default=Type.AGENT)
    entry_agent = models.ForeignKey(
        Agent,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The agent the conversation starts with; empty: the suite's agent.",
    )
    initial_state = models.JSONField(default=dict, blank=True)
    tables = models.JSONField(
        default=dict, blank=True,
        help_text="Records for stateful mocks: table name → list of rows (JSON objects). Each trial starts from these.",
    )
    unmocked_policy = models.CharField(
        max_length=20,
        choices=UnmockedPolicy.choices,
        default=UnmockedPolicy.BLOCK,
        help_text="What happens to a tool call no mock answers. Only 'block' exists: a test never runs a real tool.",
    )
    priority = models.IntegerField(default=0)
    tags = models.JSONField(default=list, blank=True)
    warnings = models.JSONField(default=list, blank=True, help_text="Notes left by recording for the reviewer.")
    # A document, as cases/schema.py's SimulatedUserEntry shapes it: edited whole, never row by row.
    simulated_user = models.JSONField(
        null=True, blank=True,
        help_text="A user played by a model after the scripted turns (persona, goal, facts, max_turns, model, "
        "end_when); empty: none.",
    )
    content_hash = models.CharField(
        max_length=64, blank=True, editable=False,
        help_text="SHA-256 of what the case tests (history, state, turns, mocks, assertions); a result keeps the "
        "hash of the case it ran, so a result of a case changed since can say so.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["suite_id", "-priority", "name", "id"]
        constraints = [models.UniqueConstraint(fields=["suite", "name"], name="case_unique_name_per_suite")]

    def __str__(self) -> str:
        return self.name


class HistoryMessage(models.Model):
    class Role(models.TextChoices):
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"

    case = models.ForeignKey(Case, on_delete=models.CASCADE, related_name="history")
    position = models.PositiveIntegerField(default=0)
    role = models.CharField(max_length=20, choices=Role.choices)
    content = models.TextField()

    class Meta:
        ordering = ["case_id", "position", "id"]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"


class Turn(models.Model):
    case = models.ForeignKey(Case, on_delete=models.CASCADE, related_name="turns")
    position = models.PositiveIntegerField(default=0)
    user_message = models.TextField()

    class Meta:
        ordering = ["case_id", "position", "id"]

    def __str__(self) -> str:
        return f"Turn {self.position}: {self.user_message[:40]}"


class Mock(models.Model):
    # Given to one instance by case_review, never stored (an annotation only, no class attribute): its last
    # verification against the real tool.
    verification: MockVerification | None

    case = models.ForeignKey(Case, on_delete=models.CASCADE, related_name="mocks")
    position = models.PositiveIntegerField(default=0)
    function_name = models.CharField(max_length=200)
    arguments = models.JSONField(
        null=True, blank=True, help_text="Answer only calls whose arguments contain these (a subset match)."
    )
    call_index = models.PositiveIntegerField(
        null=True, blank=True, help_text="Answer only the N-th call of this function (0-based)."
    )
    result = models.TextField(blank=True, help_text="The tool result the agent receives.")
    stop = models.BooleanField(default=False, help_text="A stop-completion: the turn ends with this result.")
    state_writes = models.JSONField(default=dict, blank=True)
    table = models.JSONField(
        null=True, blank=True,
        help_text='Stateful: {"name": table, "key": {field: "$args.<argument>"}, "when": {...}, "update": {...}, '
        '"not_found": text, "refused": text}. Answers from the case\'s table instead of the result.',
    )

    class Meta:
        ordering = ["case_id", "position", "id"]

    def __str__(self) -> str:
        return f"mock {self.function_name}"


class Assertion(models.Model):
    class Type(models.TextChoices):
        OUTPUT_CONTAINS = "outputContains", "Output contains"
        OUTPUT_NOT_CONTAINS = "outputNotContains", "Output does not contain"
        OUTPUT_REGEX = "outputRegex", "Output matches regex"
        TOOL_CALLED = "toolCalled", "Tool called"
        TOOL_NOT_CALLED = "toolNotCalled", "Tool not called"
        STATE_EQUALS = "stateEquals", "State equals"
        ROUTED_TO_AGENT = "routedToAgent", "Routed to agent"
        AGENT_CHAIN = "agentChain", "Agent chain"
        LLM_JUDGE = "llmJudge", "LLM judge"
        NO_BLOCKED_TOOLS = "noBlockedTools", "No blocked tools"
        TABLE_EQUALS = "tableEquals", "Table equals"
        GOAL_REACHED = "goalReached", "Goal reached"
        NODES_VISITED = "nodesVisited", "Nodes visited"
        SNAPSHOT_MATCHES = "snapshotMatches", "Snapshot matches"

    case = models.ForeignKey(Case, on_delete=models.CASCADE, related_name="assertions")
    turn = models.ForeignKey(
        Turn,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="assertions",
        help_text="Empty: a case-level assertion over the whole conversation.",
    )
    position = models.PositiveIntegerField(default=0)
    type = models.CharField(max_length=30, choices=Type.choices)
    params = models.JSONField(default=dict, blank=True)
    fatal = models.BooleanField(default=False, help_text="When it fails, the remaining turns are skipped.")

    class Meta:
        ordering = ["case_id", "position", "id"]

    def __str__(self) -> str:
        return f"{self.type} {self.params}"


class MockVerification(models.Model):
    """A mock's last verification against the real tool (`agenttest mocks verify`, cases/verification.py). Mock rows
    are written again whenever their case is saved, so a verification belongs to the case and names its mock by
    `mock_key`, the hash of what the mock says: it survives a save that leaves the mock as it was, and an edited
    mock has none until it is verified again."""

    class Verdict(models.TextChoices):
        EQUAL = "equal", "Equal"
        SHAPE = "shape", "Equal in shape"
        DRIFTED = "drifted", "Drifted"
        FAILED = "failed", "Tool failed"
        UNVERIFIABLE = "unverifiable", "Unverifiable"

    case = models.ForeignKey(Case, on_delete=models.CASCADE, related_name="mock_verifications")
    mock_key = models.CharField(max_length=64)
    # The case's content hash when verified: a result that ran that content (CaseResult.case_hash) ran these mocks.
    case_hash = models.CharField(max_length=64, blank=True, db_index=True)
    position = models.PositiveIntegerField(default=0, help_text="The mock's place in its case when verified.")
    function_name = models.CharField(max_length=200)
    verdict = models.CharField(max_length=20, choices=Verdict.choices)
    reason = models.TextField(blank=True, help_text="Why it is unverifiable or failed.")
    diff = models.JSONField(default=list, blank=True, help_text="Each path that differs: path, change, mock, real.")
    real_result = models.TextField(blank=True, help_text="What the real tool answered.")
    tool_version = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 of the tool's schemas and effects declaration when verified."
    )
    verified_at = models.DateTimeField()

    class Meta:
        ordering = ["case_id", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["case", "mock_key"], name="cases_mock_verification_one_per_mock")
        ]

    def __str__(self) -> str:
        return f"{self.function_name}: {self.verdict}"
