"""The model answers of a conversation imported from a production trace, written as a recording of its draft — so the
draft replays with no key (docs/decisions/0026-trace-recordings.md). The recording app asks for it when it stores the
drafts (`recording.signals.drafts_stored`), which `trace_tapes_for_drafts` answers.

A recording is keyed by the requests the agent under test sends, normalised and hashed (runs/tapes/replay.py), and
only the agent's own code knows those: the framework builds them (its instructions, tool schemas, settings). So the
draft is run once, as a record run would run it — its mocks answering the tools, nothing of the team's world touched —
with the trace's answers standing in for the model, in the order the trace had them; each exchange is kept as a record
run keeps it. The recording is written only when that run used every answer of the trace and passed: anything else
would replay something other than what happened, and the draft says why it has none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agenthost.seams import (
    PROVIDER_EXECUTED,
    Conversation,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
)
from cases.models import Case
from common.model_keys import split_model_key
from runs.engine.case_runner import PASSED, execute_case
from runs.engine.planning import case_plans, model_config
from runs.engine.plans import SuitePlan
from runs.models import Run
from runs.tapes.files import recording_save
from runs.tapes.replay import Recorder

TRACE_EXHAUSTED = "trace_exhausted"


@dataclass(frozen=True)
class TraceRecording:
    """What became of a draft's recording: the model it replays on, and why there is none when there is none."""

    model: str
    written: bool
    reason: str = ""


class TraceAnswers(Recorder):
    """A record tape whose model is the trace: each request is answered by the trace's next answer."""

    def __init__(self, *, case_name: str, model_key: str, answers: list[ModelResponse]) -> None:
        super().__init__(case_name=case_name, model_key=model_key)
        self._answers = list(answers)
        self.used = 0

    def answer(self, request: ModelRequest, model_key: str) -> ModelResponse:
        with self._lock:
            if self.used >= len(self._answers):
                self.failure = self.failure or (
                    f"the agent asked its model more than the {len(self._answers)} time(s) the trace did"
                )
                raise ProviderError(
                    self.failure, code=TRACE_EXHAUSTED, provider=self.provider_name, model=request.model
                )
            self.used += 1
            return self._answers[self.used - 1]

    @property
    def unused(self) -> int:
        return len(self._answers) - self.used


def trace_answers(
    *, conversation: Conversation, first_turn: int = 0, last_turn: int | None = None
) -> list[ModelResponse]:
    """The model's answers in the conversation's turns `first_turn`..`last_turn`, one per model call: an assistant
    message with the tool calls that follow it (a call the provider ran itself is no call the agent's code sees)."""
    messages = conversation.messages.filter(turn__gte=first_turn).order_by("seq")
    if last_turn is not None:
        messages = messages.filter(turn__lte=last_turn)
    answers: list[dict[str, Any]] = []
    previous = ""
    for message in messages:
        if message.role == Message.Role.ASSISTANT or (
            message.role == Message.Role.TOOL_CALL and previous not in (Message.Role.ASSISTANT, Message.Role.TOOL_CALL)
        ):
            answers.append({"text": "", "calls": [], "model": message.model, "usage": (0, 0)})
        if message.role == Message.Role.ASSISTANT:
            answers[-1].update(text=message.content, usage=(message.input_tokens, message.output_tokens))
        elif message.role == Message.Role.TOOL_CALL and message.outcome != PROVIDER_EXECUTED:
            answers[-1]["calls"].append(
                ToolCall(
                    id=message.tool_call_id or f"call_{message.seq}",
                    name=message.function_name,
                    # As the model wrote them when the trace kept that, else the object it recorded.
                    arguments=message.raw_arguments or json.dumps(message.arguments or {}, ensure_ascii=False),
                )
            )
        previous = message.role
    return [
        ModelResponse(
            text=answer["text"],
            tool_calls=answer["calls"],
            finish_reason="tool_calls" if answer["calls"] else "stop",
            usage=Usage(*answer["usage"]),
            model=_model_name(answer["model"]),
        )
        for answer in answers
    ]


def _model_name(named: str) -> str:
    """The model's own name in what a span names it: `provider:model`, or the model alone."""
    parts = split_model_key(named)
    return parts[1] if parts else named


def trace_model_key(conversation: Conversation) -> str:
    """The model the conversation's answers came from (`provider:model`, as its spans name it), else its agent's."""
    named = conversation.messages.filter(role=Message.Role.ASSISTANT).exclude(model="").values_list("model", flat=True)
    key = next((model for model in named if split_model_key(model) is not None), "")
    return key or f"{conversation.agent.provider}:{conversation.agent.model}"


def trace_recording_write(
    *, case: Case, conversation: Conversation, first_turn: int = 0, last_turn: int | None = None
) -> TraceRecording:
    """Run the draft `case` once on the trace's answers and keep the exchanges as its recording on the trace's model
    (see the module docstring). Never raises for what the agent does: the reason is returned."""
    key = trace_model_key(conversation)
    answers = trace_answers(conversation=conversation, first_turn=first_turn, last_turn=last_turn)
    if not answers:
        return TraceRecording(key, False, "the trace holds no model answer")
    suite = case.suite
    [plan] = case_plans(case_ids=[case.pk], default_agent=suite.agent, judge_model=suite.judge_model)
    tape = TraceAnswers(case_name=case.name, model_key=key, answers=answers)
    execution = execute_case(
        plan=plan,
        model=model_config(key=key, mode=Run.Mode.REPLAY),
        suite=SuitePlan(
            extra_allowed=frozenset(suite.extra_allowed_functions or []),
            force_blocked=frozenset(suite.force_blocked_functions or []),
            judge_model=suite.judge_model,
            timeout_seconds=float(suite.case_timeout_seconds),
            network_allow=frozenset(suite.network_allow or []),
        ),
        tape=tape,
        save_conversation=False,
    )
    if execution.status != PASSED:
        return TraceRecording(
            key,
            False,
            f"run on the trace's answers it ended {execution.status}: {execution.reason or 'no reason given'}",
        )
    if tape.unused:
        return TraceRecording(
            key, False, f"the agent asked its model {tape.used} time(s); the trace did {tape.used + tape.unused} times"
        )
    recording_save(case_id=case.pk, model=key, entries=tape.entries())
    return TraceRecording(key, True)


def trace_tapes_for_drafts(
    *, conversation: Conversation, cases: list[Case], slices: list[tuple[str, int, int]], **kwargs: Any
) -> list[str] | None:
    """The `drafts_stored` receiver: each draft of a conversation imported from a trace gets the trace's model answers
    of its turns as its recording; the note for each says on which model it replays, or why it cannot."""
    if conversation.source != Conversation.Source.TRACE:
        return None
    notes = []
    for case, (_, first_turn, last_turn) in zip(cases, slices, strict=True):
        outcome = trace_recording_write(
            case=case, conversation=conversation, first_turn=first_turn, last_turn=last_turn
        )
        if outcome.written:
            notes.append(
                f"the model's answers are the trace's, recorded on {outcome.model}: run it in replay mode on "
                f"{outcome.model} and it needs no key"
            )
        else:
            notes.append(
                f"the trace's model answers could not be recorded ({outcome.reason}); record it with a run in record "
                "mode before it can replay"
            )
    return notes
