"""The case document and the suite document, as DRF serializers: what the API returns, and the request shapes its
schema describes. The rules a document must meet are not here but in cases/validation.py, shared with the admin,
import and recording, so a document is judged the same way whichever door it comes through."""

from __future__ import annotations

from rest_framework import serializers

from cases.models import Assertion, Case, HistoryMessage
from cases.validation import EXTRA_ALLOWED_HELP, FORCE_BLOCKED_HELP, INT_RANGE


class AssertionDocumentSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=Assertion.Type.choices)
    params = serializers.DictField(
        child=serializers.JSONField(),
        help_text=(
            "Per type: outputContains/outputNotContains {text, case_sensitive?}; outputRegex {pattern}; "
            "toolCalled {function, arguments?}; toolNotCalled {function}; stateEquals {key, value}; "
            "routedToAgent {agent}; agentChain {agents, mode: contains|ordered|exact}; "
            "llmJudge {criterion, min_score? 1-5}; noBlockedTools {}."
        ),
    )
    fatal = serializers.BooleanField(default=False, help_text="When it fails, the remaining turns are skipped.")


class HistoryMessageDocumentSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=HistoryMessage.Role.choices)
    content = serializers.CharField()


class TurnDocumentSerializer(serializers.Serializer):
    user_message = serializers.CharField()
    assertions = AssertionDocumentSerializer(many=True, default=list, help_text="Checked after this turn.")


class MockDocumentSerializer(serializers.Serializer):
    function_name = serializers.CharField()
    arguments = serializers.DictField(
        child=serializers.JSONField(), allow_null=True, default=None,
        help_text="Answer only calls whose arguments contain these; null: any arguments.",
    )
    call_index = serializers.IntegerField(
        min_value=0, max_value=INT_RANGE[1], allow_null=True, default=None,
        help_text="Answer only the N-th call (0-based); null: any.",
    )
    result = serializers.CharField(allow_blank=True, default="", help_text="The tool result the agent receives.")
    stop = serializers.BooleanField(default=False, help_text="The turn ends with this result.")
    state_writes = serializers.DictField(child=serializers.JSONField(), default=dict)


class CaseDocumentSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(allow_blank=True, default="")
    enabled = serializers.BooleanField(default=True)
    source = serializers.ChoiceField(choices=Case.Source.choices, default=Case.Source.MANUAL)
    source_conversation = serializers.IntegerField(allow_null=True, default=None, help_text="A conversation id.")
    type = serializers.ChoiceField(choices=Case.Type.choices, default=Case.Type.AGENT)
    entry_agent = serializers.CharField(
        allow_null=True, default=None, help_text="Agent name the conversation starts with; null: the suite's agent."
    )
    initial_state = serializers.DictField(child=serializers.JSONField(), default=dict)
    priority = serializers.IntegerField(
        min_value=INT_RANGE[0], max_value=INT_RANGE[1], default=0, help_text="Higher runs first."
    )
    tags = serializers.ListField(child=serializers.CharField(), default=list)
    unmocked_policy = serializers.ChoiceField(
        choices=Case.UnmockedPolicy.choices, default=Case.UnmockedPolicy.BLOCK,
        help_text="Only 'block': a tool call no mock answers is blocked, never really executed.",
    )
    warnings = serializers.ListField(
        child=serializers.CharField(), default=list,
        help_text="Notes for a reviewer. Responses add what is wrong with the case as it stands, e.g. enabled with no "
        "assertions (a run ends it Error); that one is never stored.",
    )
    history = HistoryMessageDocumentSerializer(many=True, default=list, help_text="Pre-written messages.")
    turns = TurnDocumentSerializer(many=True, help_text="At least one.")
    assertions = AssertionDocumentSerializer(many=True, default=list, help_text="Case-level: checked at the end.")
    mocks = MockDocumentSerializer(many=True, default=list)


class SuiteDocumentSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(allow_blank=True, default="")
    agent = serializers.CharField(help_text="The name of the agent under test.")
    judge_model = serializers.CharField(
        allow_blank=True, default="", help_text="provider:model scoring llmJudge assertions; empty: none."
    )
    extra_allowed_functions = serializers.ListField(
        child=serializers.CharField(), default=list,
        help_text=EXTRA_ALLOWED_HELP,
    )
    force_blocked_functions = serializers.ListField(
        child=serializers.CharField(), default=list, help_text=FORCE_BLOCKED_HELP
    )
    case_timeout_seconds = serializers.IntegerField(min_value=1, max_value=3600, default=120)
    enabled = serializers.BooleanField(default=True)
    isolation_group = serializers.CharField(
        default="default", help_text="Runs of one group execute one at a time; groups run side by side."
    )
    case_concurrency = serializers.IntegerField(
        min_value=1, max_value=64, default=1, help_text="Case × model pairs at once; above 1 only for a hermetic suite."
    )
