"""Runs and their results. The database — not the broker — is the source of truth for what ran."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models

from agenthost.seams import Conversation
from cases.models import Case, Suite


class Run(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        PASSED = "passed", "Passed"
        FAILED = "failed", "Failed"
        ERROR = "error", "Error"
        CANCELLED = "cancelled", "Cancelled"

    class Mode(models.TextChoices):
        LIVE = "live", "Live"
        RECORD = "record", "Record"
        REPLAY = "replay", "Replay"

    FINISHED = (Status.PASSED, Status.FAILED, Status.ERROR, Status.CANCELLED)

    suite = models.ForeignKey(Suite, on_delete=models.CASCADE, related_name="runs")
    case_filter = models.CharField(
        max_length=200, blank=True, help_text="Case selection: a name substring, or tag:<tag>; empty: all enabled."
    )
    case_ids = models.JSONField(default=list, blank=True, help_text="The enabled cases selected at trigger time.")
    model_keys = models.JSONField(default=list, help_text="provider:model keys, in the order given.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING, db_index=True)
    reason = models.TextField(blank=True, help_text="Why the run ended as it did, for whoever has to act.")
    cancel_requested = models.BooleanField(default=False)
    mode = models.CharField(
        max_length=10,
        choices=Mode.choices,
        default=Mode.LIVE,
        help_text="live: call the models; record: call them and keep every answer; replay: serve kept answers.",
    )
    trials = models.PositiveIntegerField(default=1, help_text="How many times each case runs on each model.")
    update_snapshots = models.BooleanField(
        default=False,
        help_text="The run rewrites the snapshots its cases compare with (`agenttest run --update-snapshots`): a "
        "snapshotMatches assertion passes and keeps what the program said.",
    )
    budget_tokens = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Stop the run once its results used this many tokens."
    )
    budget_cost = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
        help_text="Stop the run once its results cost this much.",
    )
    total = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    errored = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    current = models.CharField(max_length=400, blank=True, help_text="The case × model in progress.")
    agent_snapshot = models.JSONField(default=dict, blank=True)
    triggered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(
        max_length=200, blank=True, help_text="The executor holding the run (host:pid:uuid) while it is Running."
    )
    lease_expires_at = models.DateTimeField(
        null=True, blank=True, db_index=True,
        help_text="Renewed by the executor's heartbeat; once past, the run may be swept as interrupted.",
    )
    # A Pending run's message can be lost (a broker restart, a task that failed before its claim): the database
    # knows when a worker last had the run in hand, and the sweep sends it again when none has for a lease period.
    queued_at = models.DateTimeField(
        null=True, blank=True, db_index=True,
        help_text="When the run went on the queue, or a worker last had it in hand while it waited (database time).",
    )
    requeued_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the sweep last sent the run again because no worker had picked it up since queued_at.",
    )
    # The suite's known-good run: later runs compare with it by default (page and CLI). At most one per suite.
    blessed_at = models.DateTimeField(
        null=True, blank=True, help_text="Set while this run is its suite's blessed baseline."
    )
    blessed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    isolation_group = models.CharField(
        max_length=50, default="default", help_text="The suite's isolation group when the run was triggered."
    )
    throttle = models.JSONField(
        default=dict, blank=True, help_text="Per provider: the 429s the run met and how its concurrency adapted."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["suite"], condition=models.Q(blessed_at__isnull=False), name="run_one_blessed_per_suite"
            ),
        ]

    def __str__(self) -> str:
        return f"Run #{self.pk} of {self.suite_id}"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def is_blessed(self) -> bool:
        return self.blessed_at is not None

    @property
    def done(self) -> int:
        return self.passed + self.failed + self.errored + self.cancelled


class CaseResult(models.Model):
    class Status(models.TextChoices):
        PASSED = "passed", "Passed"
        FAILED = "failed", "Failed"
        ERROR = "error", "Error"
        CANCELLED = "cancelled", "Cancelled"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="results")
    case = models.ForeignKey(Case, on_delete=models.SET_NULL, null=True, blank=True, related_name="results")
    case_name = models.CharField(max_length=200)
    case_hash = models.CharField(
        max_length=64, blank=True, help_text="The case's content hash when this result ran (see Case.content_hash)."
    )
    model = models.CharField(max_length=300)
    trial = models.PositiveIntegerField(default=0, help_text="0-based repetition of this case on this model.")
    position = models.PositiveIntegerField(default=0, help_text="Order of execution within the run.")
    status = models.CharField(max_length=20, choices=Status.choices, db_index=True)
    reason = models.TextField(blank=True)
    conversation = models.ForeignKey(Conversation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    duration_ms = models.FloatField(default=0)
    model_latency_ms = models.FloatField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cached_input_tokens = models.PositiveIntegerField(
        default=0, help_text="Of the input tokens, those the endpoint served from its prompt cache."
    )
    reasoning_tokens = models.PositiveIntegerField(
        default=0, help_text="Of the output tokens, those the model spent reasoning before it answered."
    )
    cost = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    judge_input_tokens = models.PositiveIntegerField(default=0, help_text="Tokens the llmJudge used on this result.")
    judge_output_tokens = models.PositiveIntegerField(default=0)
    judge_cost = models.DecimalField(
        max_digits=14, decimal_places=8, default=0, help_text="The llmJudge's cost, at the judge model's price."
    )
    transcript = models.JSONField(default=list, blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    assertions = models.JSONField(default=list, blank=True)
    final_state = models.JSONField(default=dict, blank=True)
    final_tables = models.JSONField(
        default=dict, blank=True, help_text="The case's tables as its stateful mocks left them; empty without tables."
    )
    # A case with a simulated user: which turns the user model wrote, what ended the conversation and what the user
    # model used (runs/engine/simulated_user.py, SimulationRecord); empty for a scripted case.
    simulation = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "case", "model", "trial"], name="result_unique_case_model_trial"),
        ]

    def __str__(self) -> str:
        return f"{self.case_name} on {self.model}: {self.status}"

    @property
    def case_changed_since(self) -> bool:
        """The case was edited after this result ran it: the result tells of an earlier version."""
        return bool(self.case_hash and self.case is not None and self.case.content_hash != self.case_hash)

    @property
    def judge_tokens(self) -> int:
        return self.judge_input_tokens + self.judge_output_tokens

    @property
    def total_tokens(self) -> int:
        """Everything this result spent, the judge's tokens included: what the budget counts."""
        return self.input_tokens + self.output_tokens + self.judge_tokens

    @property
    def total_cost(self) -> Decimal:
        return Decimal(self.cost or 0) + Decimal(self.judge_cost or 0)


class CaseSnapshot(models.Model):
    """What a case tested (cases.services.CONTENT_KEYS) as a run planned it, stored once per distinct content and
    shared by every run that ran it: a result names its snapshot by `case_hash`. The compare page diffs two runs'
    cases from these, not from the case as it is now."""

    content_hash = models.CharField(max_length=64, primary_key=True)
    content = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"case content {self.content_hash[:12]}"


class RunLock(models.Model):
    """One run at a time per isolation group, enforced in the database (the broker may deliver to many workers).
    Held by the run that claimed it until it finishes; a holder whose lease expired may be taken over."""

    DEFAULT_GROUP = "default"

    group = models.CharField(max_length=100, primary_key=True, default=DEFAULT_GROUP)
    run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"run lock {self.group!r} held by run {self.run_id}" if self.run_id else f"run lock {self.group!r}"


class Recording(models.Model):
    """One case's model traffic on one model, recorded once and replayed after: every model request — normalised,
    hashed — and what came back, in call order. Entries are documents (see runs/tapes/replay.py for their shape)."""

    class Source(models.TextChoices):
        RUN = "run", "Recorded by a run"
        IMPORT = "import", "Imported from files"

    case = models.ForeignKey(Case, on_delete=models.CASCADE, related_name="recordings")
    model = models.CharField(max_length=300, help_text="provider:model the answers came from.")
    entries = models.JSONField(default=list, blank=True)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.RUN)
    run = models.ForeignKey(
        Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="recordings",
        help_text="The run that recorded it, while that run exists.",
    )
    recorded_at = models.DateTimeField(help_text="When the answers were recorded (kept through export and import).")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["case_id", "model"]
        constraints = [models.UniqueConstraint(fields=["case", "model"], name="recording_unique_case_model")]

    def __str__(self) -> str:
        return f"recording of case {self.case_id} on {self.model}"


class WorkerBeat(models.Model):
    """A live run worker and the isolation groups it serves, renewed by its main process every third of
    AGENTTEST_RUN_LEASE_SECONDS; a row older than a lease period belongs to a worker that is gone."""

    name = models.CharField(max_length=200, primary_key=True)
    groups = models.JSONField(default=list)
    seen_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"worker {self.name} serving {', '.join(self.groups)}"
