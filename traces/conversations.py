"""A conversation mapped from a team's spans (traces.dialects) becomes a conversation of the host, bound to one of
agenttest's agents, where the recording pipeline takes it like a chat: recorded into a disabled draft whose mocks are
the real tool results.

Binding: the agent chosen, else the agent named as the trace's agent (`gen_ai.agent.name`), else the agent named as
its service (`service.name`). A conversation that binds to none is refused, and so is one whose spans carry no
message content: a draft of it would be half empty.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction

from agenthost.seams import Agent, Conversation, InvalidInput, conversation_import, conversation_messages_append
from cases.models import Case
from common.broker import BrokerUnavailable, broker_ping, broker_publish
from traces.dialects import conversations_from_spans
from traces.models import ConversationMapping, TraceSpan
from traces.selectors import (
    TraceConversation,
    history_cut,
    spans_of,
    trace_conversation_mark,
    trace_conversation_spans,
    trace_conversation_touched,
)
from traces.spans import MappedConversation, Resume

logger = logging.getLogger("traces.receiver")
IMPORT_CONVERSATIONS = "traces.tasks.import_trace_conversations"
# A queued message's share of the rest: each task writes a few conversations and returns, so a runs worker that takes
# it is held for seconds, not for the whole overflow of a large request.
KEYS_PER_TASK = 20
# The queue every `agenttest worker` consumes unless told otherwise (common.queues: the default group's).
TRACES_TASK_QUEUE = "runs"
_BROKER_PING_SECONDS = 1.0


class ConversationImportError(ValueError):
    """The conversation cannot be imported; nothing was written. `field` names the input to change."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def conversation_from_mapped(
    *, mapped: MappedConversation, agent: Agent | None = None, owner: Any = None
) -> Conversation:
    """Write `mapped` as an imported conversation (again: update the one imported before under its key), bound to
    `agent` or to the agent its trace names."""
    where = f"conversation {mapped.key!r} of service {mapped.service_name or '(unnamed)'}"
    if mapped.content_missing:
        raise ConversationImportError(
            f"{where} carries no message content, so it cannot become a draft: {mapped.content_missing}",
            field="conversation",
        )
    if agent is None:
        # A binding staff chose holds over the agent later spans name (or fail to name): it is why it was chosen.
        chosen = Conversation.objects.filter(
            source=Conversation.Source.TRACE, trace_service=mapped.service_name, trace_key=mapped.key,
            bound_by="chosen",
        ).select_related("agent").first()
        agent = chosen.agent if chosen is not None else None
    agent, bound_by = _bound(mapped, agent, where)
    try:
        return conversation_import(agent=agent, mapped=mapped, bound_by=bound_by, owner=owner)
    except InvalidInput as exc:
        raise ConversationImportError(f"{where}: {exc}", field="conversation") from None


def _bound(mapped: MappedConversation, chosen: Agent | None, where: str) -> tuple[Agent, str]:
    if chosen is not None:
        return chosen, "chosen"
    for name, bound_by in ((mapped.agent_name, "agent name"), (mapped.service_name, "service name")):
        agent = Agent.objects.filter(name=name).first() if name else None
        if agent is not None:
            return agent, bound_by
    raise ConversationImportError(f"{where} is bound to no agent: {_unbound(mapped)}; choose one", field="agent")


def _unbound(mapped: MappedConversation) -> str:
    names = " or ".join(
        f"{name!r} ({attribute})"
        for name, attribute in ((mapped.agent_name, "gen_ai.agent.name"), (mapped.service_name, "service.name"))
        if name
    )
    return f"no agent is named {names}" if names else "its spans name no agent and no service"


@transaction.atomic
def _adopt_provisional(mapped: MappedConversation) -> None:
    """A conversation imported while its spans named no conversation id was keyed by its trace; once a later span
    names the id (pydantic-ai's invoke_agent span, which carries it, ends — and is exported — last), that conversation
    takes the id as its key, so the update lands on it rather than making a second copy of the same talk. Any other
    conversation keyed by one of its traces (a later turn's spans that arrived before their own named one) is part of
    the same talk: its drafts move to the one conversation, and it goes — no orphan copy is left behind."""
    provisional = [trace_id for trace_id in mapped.trace_ids if trace_id != mapped.key]
    if not provisional:
        return
    imported = Conversation.objects.filter(source=Conversation.Source.TRACE, trace_service=mapped.service_name)
    copies = list(imported.filter(trace_key__in=provisional).order_by("pk").values_list("pk", flat=True))
    if not copies:
        return
    keeper = imported.filter(trace_key=mapped.key).values_list("pk", flat=True).first()
    if keeper is None:
        keeper, *copies = copies
        imported.filter(pk=keeper).update(trace_key=mapped.key)
    if copies:
        Case.objects.filter(source_conversation__in=copies).update(source_conversation=keeper)
        Conversation.objects.filter(pk__in=copies).delete()


def trace_conversation_bind(*, key: Any, agent: Any, owner: Any = None) -> Conversation:
    """The stored spans of conversation `key` written as a conversation bound to the agent chosen (`agent`: its id or
    its name) — the way to bind a trace whose agent agenttest does not know, or to bind one again to another agent.
    ConversationImportError naming the field (`conversation`, `agent`) when it cannot be; nothing is written then."""
    text = key.strip() if isinstance(key, str) else ""
    if not text:
        raise ConversationImportError("must be the key of a conversation of stored spans", field="conversation")
    chosen = _agent_chosen(agent)
    mapped = conversations_from_spans(trace_conversation_spans(key=text))
    if not mapped:
        raise ConversationImportError(
            f"no stored spans make a conversation {text[:200]!r} (none, or none of a model call in a known dialect)",
            field="conversation",
        )
    conversation = next((item for item in mapped if item.key == text), mapped[0])
    _adopt_provisional(conversation)
    return conversation_from_mapped(mapped=conversation, agent=chosen, owner=owner)


def _unimported_reason(conversation: MappedConversation, known: Collection[str]) -> str:
    """Why a mapped conversation is not (yet) an agenttest conversation; `known`: the agent names it could bind to
    that exist."""
    where = f"conversation {conversation.key!r} of service {conversation.service_name or '(unnamed)'}"
    if conversation.content_missing:
        return f"{where} carries no message content: {conversation.content_missing}"
    if not {conversation.agent_name, conversation.service_name} & set(known):
        return f"{where} is bound to no agent: {_unbound(conversation)}; choose one"
    return "not imported yet: its next span, `agenttest traces import` or binding it here imports it"


def trace_conversations_unimported(
    *, listed: Sequence[TraceConversation], placed: dict[str, set[str]]
) -> dict[str, list[str]]:
    """For each listed conversation key, why its spans are in no agenttest conversation: all of them when no
    imported conversation holds the key, else those of each service not in `placed[key]` (a key two services share
    can be one's conversation and not the other's, whose spans must still be seen). Two queries however many keys:
    the spans, and the agents they name."""
    unimported = [item.key for item in listed if item.key not in placed]
    partly = {
        item.key: sorted(set(item.services) - placed[item.key])
        for item in listed
        if item.key in placed and set(item.services) - placed[item.key]
    }
    mapped = {key: conversations_from_spans(records) for key, records in spans_of(keys=unimported,
                                                                                 services=partly).items()}
    names = {name for items in mapped.values() for item in items for name in (item.agent_name, item.service_name)}
    known = set(Agent.objects.filter(name__in=sorted(names - {""})).values_list("name", flat=True))
    nothing = "hold no model call of a known dialect (yet)"
    reasons: dict[str, list[str]] = {}
    for key in unimported:
        items = mapped.get(key, [])
        item = next((one for one in items if one.key == key), items[0] if items else None)
        reasons[key] = [_unimported_reason(item, known) if item else f"its spans {nothing}"]
    for key, missing in partly.items():
        by_service = {item.service_name: item for item in mapped.get(key, [])}
        reasons[key] = [
            _unimported_reason(by_service[service], known) if service in by_service
            else f"the spans of service {service or '(unnamed)'} {nothing}"
            for service in missing
        ]
    return reasons


def _agent_chosen(agent: Any) -> Agent:
    if isinstance(agent, Agent):
        return agent
    text = str(agent).strip() if isinstance(agent, int | str) and not isinstance(agent, bool) else ""
    found = None
    if text.isascii() and text.isdigit() and len(text) < 19:
        found = Agent.objects.filter(pk=int(text)).first()
    found = found or (Agent.objects.filter(name=text).first() if text else None)
    if found is None:
        raise ConversationImportError(
            f"must be an agent's id or name; no agent is {text[:200]!r}" if text else "choose an agent",
            field="agent",
        )
    return found


@dataclass(frozen=True)
class ImportOutcome:
    key: str  # the stored conversation key the spans were read under
    conversation: Conversation | None = None
    refused: str = ""  # why no conversation was written (ConversationImportError's message)


def trace_conversations_import(*, keys: Iterable[str], agent: Agent | None = None, owner: Any = None) -> list[
    ImportOutcome
]:
    """The stored spans of each conversation key mapped (traces.dialects) and written as host conversations, each
    bound to `agent` or the agent its trace names; a key whose spans make no conversation, or one that cannot be
    imported, is reported with the reason and nothing of it is written."""
    outcomes = []
    for key in keys:
        continued = _continued(key) if agent is None else None
        if continued is not None:
            outcomes.append(continued)
            continue
        mark = trace_conversation_mark(key=key)
        mapped = conversations_from_spans(trace_conversation_spans(key=key))
        if not mapped:
            outcomes.append(ImportOutcome(key, refused="its spans hold no model call of a known dialect"))
        written = []
        for conversation in mapped:
            _adopt_provisional(conversation)
            try:
                written.append(ImportOutcome(key, conversation_from_mapped(mapped=conversation, agent=agent,
                                                                           owner=owner)))
            except ConversationImportError as exc:
                written.append(ImportOutcome(key, refused=str(exc)))
        _remember(key, mapped, written, mark)
        outcomes.extend(written)
    return outcomes


def _remember(key: str, mapped: list[MappedConversation], written: list[ImportOutcome], mark: tuple[int, int]) -> None:
    """Keep where the mapping of `key` stands for its next span — when its spans make one conversation, written, whose
    last turn follows the others; else forget it, so the next span maps them all again."""
    outcome = written[0] if len(written) == 1 else None
    if len(mapped) != 1 or outcome is None or outcome.conversation is None or mapped[0].resume is None:
        ConversationMapping.objects.filter(conversation_key=key).delete()
        return
    conversation = outcome.conversation
    ConversationMapping.objects.filter(conversation_key=key).exclude(conversation=conversation).delete()
    ConversationMapping.objects.update_or_create(conversation=conversation, defaults={
        "conversation_key": key, "service_name": mapped[0].service_name, "span_count": mark[0],
        "last_span": mark[1], "message_count": conversation.message_count,
        "resume": dataclasses.asdict(mapped[0].resume),
    })


def _continued(key: str) -> ImportOutcome | None:
    """The conversation of `key` continued from where its mapping stands: only the spans of its last turn and of the
    traces that began after it are mapped, and the host appends from the last turn on, so a span costs what its turn
    holds, not what the conversation does. None when that cannot be done exactly — no state, or spans it cannot
    account for: of an earlier turn, of another service, added or removed elsewhere; the caller maps every span
    then."""
    with transaction.atomic():
        states = list(ConversationMapping.objects.select_for_update().filter(conversation_key=key)
                      .select_related("conversation__agent")[:2])
        if len(states) != 1:
            return None
        state = states[0]
        conversation = state.conversation
        if conversation.message_count != state.message_count:
            return None
        total, newest = trace_conversation_mark(key=key)
        touched = trace_conversation_touched(key=key, after=state.last_span)
        if total != state.span_count + sum(trace.new for trace in touched):
            return None
        if not touched:
            return ImportOutcome(key, conversation)
        prior = Resume(**{**state.resume, "prefix": tuple(state.resume["prefix"])})
        for trace in touched:
            if trace.service_name != state.service_name:
                return None
            if trace.trace_id == prior.last_trace:
                # A span older than a turn before the last one would change that turn: the whole is mapped again.
                if trace.first_new_ns <= prior.prior_max_start:
                    return None
            elif trace.old or trace.first_ns <= prior.max_start:
                return None
        traces = [prior.last_trace, *(t.trace_id for t in touched if t.trace_id != prior.last_trace)]
        mapped = conversations_from_spans(trace_conversation_spans(key=key, trace_ids=traces), prior=prior)
        if len(mapped) != 1:
            return None
        continuation = mapped[0]
        resume = continuation.resume
        if (continuation.key != key or continuation.service_name != state.service_name or resume is None
                or continuation.content_missing):
            return None
        _adopt_provisional(continuation)
        where = f"conversation {key!r} of service {continuation.service_name or '(unnamed)'}"
        try:
            chosen = conversation.agent if conversation.bound_by == "chosen" else None
            agent, bound_by = _bound(continuation, chosen, where)
            written = conversation_messages_append(
                conversation=conversation, agent=agent, mapped=continuation, bound_by=bound_by, from_seq=prior.seq,
                users_before=prior.users_before,
            )
        except ConversationImportError as exc:
            return ImportOutcome(key, refused=str(exc))
        except InvalidInput as exc:
            return ImportOutcome(key, refused=f"{where}: {exc}")
        state.span_count, state.last_span, state.message_count = total, newest, written.message_count
        state.resume = dataclasses.asdict(resume)
        state.save(update_fields=["span_count", "last_span", "message_count", "resume"])
        return ImportOutcome(key, written)


def trace_conversations_write(*, keys: Sequence[str]) -> list[ImportOutcome]:
    """What the receiver does once a request's spans are committed: the first
    AGENTTEST_TRACES_CONVERSATIONS_PER_REQUEST of their conversations written now, and the next
    AGENTTEST_TRACES_CONVERSATIONS_QUEUED_PER_REQUEST queued for a worker, so a conversation past the limit is written
    without waiting for its next span. Any beyond both wait for their next span or `agenttest traces import`."""
    now = settings.AGENTTEST_TRACES_CONVERSATIONS_PER_REQUEST
    later = list(keys[now : now + settings.AGENTTEST_TRACES_CONVERSATIONS_QUEUED_PER_REQUEST])
    outcomes = trace_conversations_import(keys=keys[:now])
    trace_conversations_queue(keys=later)
    return outcomes


def trace_conversations_queue(*, keys: Sequence[str]) -> int:
    """Queue the conversations `keys` to be written by a worker (`traces.tasks`, which runs
    trace_conversations_import: writing one again changes nothing), KEYS_PER_TASK to a message; how many were queued.
    A broker that takes none is logged, not raised: the spans are stored, and their next span or an import writes
    them."""
    if not keys:
        return 0
    try:
        # Asked first and briefly: a dead broker must not hold the exporter's request for a publish's retries.
        broker_ping(timeout=_BROKER_PING_SECONDS)
    except BrokerUnavailable as exc:
        logger.warning("%s conversation(s) of stored spans not queued for a worker: %s; they wait for their next span "
                       "or `agenttest traces import`", len(keys), exc)
        return 0
    task = current_app.tasks[IMPORT_CONVERSATIONS]  # by name: the tasks module imports this one
    queued = 0
    for start in range(0, len(keys), KEYS_PER_TASK):
        chunk = list(keys[start : start + KEYS_PER_TASK])
        try:
            broker_publish(functools.partial(_publish_chunk, task, chunk))
        except Exception:
            logger.warning(
                "could not queue %s conversation(s) of stored spans for a worker; they wait for their next span or "
                "`agenttest traces import`", len(keys) - queued, exc_info=True,
            )
            break
        queued += len(chunk)
    return queued


def _publish_chunk(task: Any, chunk: list[str], connection: Any) -> None:
    # `connection` is send_task's (apply_async passes it on), which celery-types does not declare.
    task.apply_async(args=(chunk,), queue=TRACES_TASK_QUEUE, retry=False, connection=connection)


def history_cut_notes_for_drafts(
    *, conversation: Conversation, cases: list[Case], slices: list[tuple[str, int, int]], **kwargs: Any
) -> list[str] | None:
    """The `drafts_stored` receiver: each draft of a conversation whose history was cut at the receiver says which
    turns are incomplete (the mapping's warnings), so a reviewer does not enable a case missing its question."""
    if conversation.source != Conversation.Source.TRACE:
        return None
    spans = TraceSpan.objects.filter(conversation_key=conversation.trace_key, service_name=conversation.trace_service)
    # The common case is answered by one query, without mapping the spans again.
    if not spans.filter(history_cut()).exists():
        return None
    warnings = [
        warning
        for mapped in conversations_from_spans(trace_conversation_spans(key=conversation.trace_key))
        if mapped.service_name == conversation.trace_service
        for warning in mapped.warnings
    ]
    return ["; ".join(warnings)] * len(cases) if warnings else None
