"""Recording and AI extraction: a conversation becomes stored draft cases, through the same `case_create` as every
other case, so a draft meets the same rules.

Where drafts go when no suite is named: the one suite that tests the conversation's agent. When no suite tests it, a
suite "Recorded: <agent>" is created for it, so recording works on a fresh installation without a detour through the
admin; when several do, the request is refused with "choose a suite: …" naming them, because guessing would file
drafts where nobody reviews them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from agenthost.seams import (
    Agent,
    Conversation,
    Transcript,
    UnknownModel,
    configured_models,
    get_model,
    transcript_load,
)
from cases.models import Case, Suite
from cases.schema import NAME_MAX_LENGTH
from cases.selectors import suite_by_reference
from cases.services import case_create, case_to_document, case_update, suite_create
from cases.validation.problems import CaseValidationError, SuiteValidationError
from common.inputs import parse_id
from recording.drafts import NothingToRecord, draft_document
from recording.segmenter import ModelUnavailable, Segment, SegmentationError, segments_ask
from recording.signals import drafts_stored

RECORDED_SUITE_PREFIX = "Recorded: "


class RecordingError(Exception):
    """A recording or extraction request that cannot be honoured; nothing was stored. `field` names the input."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class ExtractionModelUnavailable(RecordingError):
    """The extraction model did not answer (a failure upstream, not a bad request)."""


@dataclass
class SuiteChoice:
    """An existing suite, or the name of one to create for `agent`."""

    agent: Agent
    suite: Suite | None = None
    new_name: str = ""

    @property
    def label(self) -> str:
        return self.suite.name if self.suite is not None else self.new_name


@dataclass
class Drafts:
    """What a recording or an extraction stored."""

    suite: Suite
    suite_created: bool
    cases: list[Case]
    # The extraction model's verified cut points; empty for a recording.
    segments: list[Segment] = field(default_factory=list)
    # What the reviewer should know about the extraction as a whole (each draft's warnings also carry it).
    warnings: list[str] = field(default_factory=list)


# --- Inputs -------------------------------------------------------------------------------------------------------


def conversation_find(*, conversation_id: Any) -> Conversation:
    text = str(conversation_id).strip() if isinstance(conversation_id, int | str) else ""
    if isinstance(conversation_id, bool) or not text.isascii() or not text.isdigit():
        raise RecordingError("must be a conversation id (a whole number)", field="conversation")
    pk = parse_id(text)
    conversation = None if pk is None else Conversation.objects.select_related("agent").filter(pk=pk).first()
    if conversation is None:
        raise RecordingError(f"no conversation with id {conversation_id}", field="conversation")
    return conversation


def suite_find(*, ref: Any) -> Suite:
    """A suite by id or by name."""
    if isinstance(ref, bool) or not isinstance(ref, int | str) or not str(ref).strip():
        raise RecordingError("must be a suite id or name", field="suite")
    text = str(ref).strip()
    suite = suite_by_reference(text, queryset=Suite.objects.select_related("agent"))
    if suite is None:
        raise RecordingError(f"no suite {text!r} (give a suite id or name)", field="suite")
    return suite


def draft_suite_choice(*, conversation: Conversation, suite: Suite | None = None) -> SuiteChoice:
    """Where the drafts of `conversation` go (see the module docstring); RecordingError when it must be chosen."""
    agent = conversation.agent
    if suite is not None:
        return SuiteChoice(agent=agent, suite=suite)
    candidates = list(Suite.objects.filter(agent=agent).order_by("name"))
    if len(candidates) == 1:
        return SuiteChoice(agent=agent, suite=candidates[0])
    if candidates:
        names = ", ".join(repr(candidate.name) for candidate in candidates)
        raise RecordingError(
            f"choose a suite: {len(candidates)} suites test agent {agent.name} ({names})", field="suite"
        )
    name = f"{RECORDED_SUITE_PREFIX}{agent.name}"[:NAME_MAX_LENGTH]
    if Suite.objects.filter(name=name).exists():
        raise RecordingError(
            f"choose a suite: no suite tests agent {agent.name}, and the name {name!r} is taken by a suite of "
            "another agent", field="suite",
        )
    return SuiteChoice(agent=agent, new_name=name)


def extraction_model_default() -> str:
    """The extraction model used when a request names none: settings.AGENTTEST_EXTRACTION_MODEL, if set."""
    return getattr(settings, "AGENTTEST_EXTRACTION_MODEL", "") or ""


# --- Recording ----------------------------------------------------------------------------------------------------


def recording_create(*, conversation: Conversation, suite: Suite | None = None) -> Drafts:
    """The whole conversation as one disabled draft, named "Recorded from <conversation>" — from "imported conversation
    #N" when it came from production traces, whose title names the service, which members may not read once the
    draft is enabled (docs/decisions/0034-production-traces.md)."""
    choice = draft_suite_choice(conversation=conversation, suite=suite)
    transcript = _transcript(conversation)
    label = (
        f"imported conversation #{conversation.pk}" if conversation.source == Conversation.Source.TRACE
        else str(conversation)
    )
    whole = [(f"Recorded from {label}", 0, len(transcript.turns) - 1)]
    drafts = _store(choice, transcript, whole, source=Case.Source.RECORDED)
    _drafts_stored(conversation, drafts, whole)
    return drafts


def extraction_create(*, conversation: Conversation, suite: Suite | None = None, model_key: str = "") -> Drafts:
    """One disabled draft per user goal, cut where the extraction model says. Nothing is stored unless its whole
    answer verifies; the model is asked before any write, so no transaction waits on it."""
    choice = draft_suite_choice(conversation=conversation, suite=suite)
    transcript = _transcript(conversation)
    model_key = (model_key or extraction_model_default()).strip()
    if len(transcript.turns) > 1:
        if not model_key:
            configured = ", ".join(config.key for config in configured_models()) or "none"
            raise RecordingError(
                f"choose an extraction model (provider:model); configured: {configured}", field="extraction_model"
            )
        try:
            get_model(model_key)
        except UnknownModel as exc:
            raise RecordingError(f"choose an extraction model: {exc}", field="extraction_model") from None
    try:
        segments = segments_ask(transcript=transcript, model_key=model_key)
    except ModelUnavailable as exc:
        raise ExtractionModelUnavailable(f"AI extraction failed: {exc}", field="extraction_model") from None
    except SegmentationError as exc:
        raise RecordingError(f"AI extraction failed: {exc}", field="extraction_model") from None
    slices = [(segment.name, segment.first_turn, segment.last_turn) for segment in segments]
    notes = _single_segment_notes(transcript, segments, model_key)
    drafts = _store(choice, transcript, slices, source=Case.Source.EXTRACTED, notes=notes)
    _drafts_stored(conversation, drafts, slices)
    drafts.segments = segments
    drafts.warnings = notes
    return drafts


def _single_segment_notes(transcript: Transcript, segments: list[Segment], model_key: str) -> list[str]:
    """A segmentation that cut nothing made a copy of what Record as draft makes; the reviewer is told, not left to
    notice that the extraction did nothing."""
    turns = len(transcript.turns)
    if len(segments) != 1 or turns < 2:
        return []
    return [
        f"the extraction model {model_key} found a single user goal across all {turns} turns, so this one draft "
        "covers the whole conversation — the same as Record as draft. If the conversation pursues several goals, "
        "record it and cut the turns yourself, or extract again with another model"
    ]


def _drafts_stored(conversation: Conversation, drafts: Drafts, slices: list[tuple[str, int, int]]) -> None:
    """Tell the harness the drafts are stored (their runs read them from the database); each note a receiver returns
    is added to its draft's warnings."""
    responses = drafts_stored.send(sender=Case, conversation=conversation, cases=list(drafts.cases), slices=slices)
    for _, notes in responses:
        for index, note in enumerate(notes or []):
            if note:
                case = drafts.cases[index]
                document = case_to_document(case=case)
                document["warnings"] = [*document["warnings"], note]
                drafts.cases[index] = case_update(case=case, document=document)


def _transcript(conversation: Conversation) -> Transcript:
    transcript = transcript_load(conversation=conversation)
    if not transcript.turns:
        raise RecordingError(
            f"conversation #{conversation.pk} has no turns: there is no user message to replay", field="conversation"
        )
    return transcript


@transaction.atomic
def _store(
    choice: SuiteChoice,
    transcript: Transcript,
    slices: list[tuple[str, int, int]],
    *,
    source: str,
    notes: list[str] | None = None,
) -> Drafts:
    suite = choice.suite or _suite_create(choice)
    taken = set(Case.objects.filter(suite=suite).values_list("name", flat=True))
    cases = []
    for name, first_turn, last_turn in slices:
        name = _free_name(name, taken)
        taken.add(name)
        try:
            document = draft_document(
                transcript, name=name, source=source, suite_agent=suite.agent.name, first_turn=first_turn,
                last_turn=last_turn,
            )
            document["warnings"] = [*(notes or []), *document["warnings"]]
            cases.append(case_create(suite=suite, document=document))
        except NothingToRecord as exc:
            raise RecordingError(str(exc), field="conversation") from None
        except CaseValidationError as exc:
            # Recording writes only what the conversation holds; a draft that still breaks a rule is reported whole.
            raise RecordingError(f"the draft {name!r} breaks the case rules: {exc}", field="conversation") from None
    return Drafts(suite=suite, suite_created=choice.suite is None, cases=cases)


def _suite_create(choice: SuiteChoice) -> Suite:
    try:
        return suite_create(
            data={
                "name": choice.new_name,
                "agent": choice.agent,
                "description": f"Drafts recorded from conversations with {choice.agent.name}.",
            }
        )
    except SuiteValidationError as exc:
        raise RecordingError(f"choose a suite: {exc}", field="suite") from None


def _free_name(wanted: str, taken: set[str]) -> str:
    wanted = wanted.strip()[:NAME_MAX_LENGTH]
    if wanted not in taken:
        return wanted
    number = 2
    while True:
        suffix = f" ({number})"
        name = wanted[: NAME_MAX_LENGTH - len(suffix)] + suffix
        if name not in taken:
            return name
        number += 1
