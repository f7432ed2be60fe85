"""The conversation service: start a conversation, send a user message through the agent loop (loop.py), invoke a
function without the model (rules.py), import one that happened elsewhere (a team's service, read from its traces);
and the agent writes.

A conversation may be sealed by whoever started it: then only the holder of its seal key can send to it. One turn at
a time: a send claims the conversation before it starts (session.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from typing import Any

from django.db import IntegrityError, transaction

from agenthost.calls import stored_name
from agenthost.functions import FunctionResult
from agenthost.held import PRE_TURN, HeldConversation, run_invoke, run_send
from agenthost.imported import (
    SAME_MESSAGE,
    ImportedConversation,
    check_imported,
    imported_fields,
    imported_rows,
    refuse_imported,
)
from agenthost.loading import load_agent
from agenthost.models import Agent, Conversation, Message
from agenthost.redaction import redact_text
from agenthost.rules import fire_rules
from agenthost.runtimes.child import send_in_child
from agenthost.session import ConversationSession, check_seal, claim_expiry, claimed_session, release_claim, seal_digest
from agenthost.turns import InvalidInput, TurnResult


def conversation_start(
    *,
    agent: Agent,
    tags: list[str] | tuple[str, ...] = (),
    initial_state: dict[str, Any] | None = None,
    history: list[dict[str, Any]] | None = None,
    owner: Any = None,
    title: str = "",
    on_created: Callable[[Conversation], None] | None = None,
    seal: str = "",
) -> Conversation:
    """Create a conversation with its initial state (no causing message) and pre-written history, commit it, then
    fire the agent's "conversation_started" rules through the factory (so their tools see a committed conversation).

    `on_created` runs right after the row exists and before anything else happens in the conversation — the place
    for a caller to prepare (the harness registers its mocks there, before a start-up rule could call a tool).

    `seal` (a reason, e.g. "this conversation belongs to test run 12") seals the conversation: the returned instance
    carries `seal_key`, which only its hash is stored of, and every later send or invoke must present it."""
    session = _start(
        agent=agent, tags=tags, initial_state=initial_state, history=history, owner=owner, title=title,
        on_created=on_created, seal=seal, held=False,
    )
    return session.conversation


def conversation_open(
    *,
    agent: Agent,
    tags: list[str] | tuple[str, ...] = (),
    initial_state: dict[str, Any] | None = None,
    history: list[dict[str, Any]] | None = None,
    title: str = "",
    on_created: Callable[[Conversation], None] | None = None,
    seal: str = "",
    network_allow: Iterable[str] = (),
) -> HeldConversation:
    """Start a conversation (as conversation_start) and hold it: its turns run one after the other through the
    returned HeldConversation, with no claim, seal check or read of their own, and everything they did is written
    by `save()` — once, in one transaction (the caller's, if it has one open) — which also gives the claim back.

    For a caller that alone drives a conversation from start to end (the harness's test conversations, sealed):
    a turn costs no database round trip, and a crash loses the conversation's unsaved turns, never a saved one.
    Until it is saved nobody else can send to it: its turn claim is held (and renewed while turns run).

    Its turns run sealed (agenthost/seal.py): the agent's code reaches no host but `network_allow`'s."""
    session = _start(
        agent=agent, tags=tags, initial_state=initial_state, history=history, owner=None, title=title,
        on_created=on_created, seal=seal, held=True,
    )
    return HeldConversation(session, network_allow=frozenset(network_allow))


def _start(
    *,
    agent: Agent,
    tags: list[str] | tuple[str, ...],
    initial_state: dict[str, Any] | None,
    history: list[dict[str, Any]] | None,
    owner: Any,
    title: str,
    on_created: Callable[[Conversation], None] | None,
    seal: str,
    held: bool,
) -> ConversationSession:
    history = history or []
    for index, item in enumerate(history):
        if not isinstance(item, dict) or item.get("role") not in ("user", "assistant"):
            raise InvalidInput(f"history[{index}]: role must be 'user' or 'assistant'")
        if not isinstance(item.get("content"), str) or not item["content"].strip():
            raise InvalidInput(f"history[{index}]: content must be non-empty text")
    if initial_state is not None and not isinstance(initial_state, dict):
        raise InvalidInput("initial_state must be an object of key → value")
    if not isinstance(seal, str):
        raise InvalidInput("seal must be a text saying why the conversation is sealed")
    seal_key = secrets.token_urlsafe(32) if seal else ""
    # Claimed from birth until the start-up rules are done (a held conversation: until it is saved), so nothing
    # can be sent in between.
    claim = claim_expiry()
    with transaction.atomic():
        conversation = Conversation.objects.create(
            agent=agent,
            owner=owner,
            tags=list(tags),
            title=title[:200],
            sealed_reason=seal[:200],
            seal_hash=seal_digest(seal_key) if seal else "",
            turn_claimed_until=claim,
        )
        if on_created is not None:
            on_created(conversation)
        session = ConversationSession(conversation, claim=claim, new=True)
        if initial_state:
            session.write_state(initial_state, None)
        turn = PRE_TURN
        for item in history:
            if item["role"] == "user":
                turn += 1
            session.add_message(
                turn=max(turn, 0), role=item["role"], content=redact_text(item["content"]), agent=agent
            )
        if history:
            session.set_fields(turn_count=turn + 1)
        loaded = load_agent(agent, conversation)
        starts_rules = any(rule.get("trigger") == "conversation_started" for rule in loaded.rules)
        if not held:
            session.flush(release=not starts_rules)
    if seal:
        conversation.seal_key = seal_key
    if starts_rules:
        try:
            fire_rules(session, loaded, trigger="conversation_started", turn=PRE_TURN)
            if not held:
                session.flush(release=True)
        finally:
            if not held and session.claim is not None:
                # The claim as renewed by the rules' tool calls.
                release_claim(conversation.pk, session.claim)
    return session


def conversation_send(
    *, conversation: Conversation, text: str, seal_key: str = "", team_code_in_child: bool = False
) -> TurnResult:
    """Run one user turn to its end and return what happened. Raises ConversationError (with `.partial`):
    ConversationSealed without the conversation's seal key and ConcurrentTurn while another turn runs, both before
    anything is written or run.

    `team_code_in_child` (the web process): a turn of an agent whose runtime runs the team's code runs in a child
    process with a deadline (runtimes/child.py), so that code exiting, aborting or hanging costs the turn, never
    the caller's process."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the message text must not be empty")
    refuse_imported(conversation)
    check_seal(conversation, seal_key)
    if not conversation.title:
        _conversation_title(conversation, text)
    with claimed_session(conversation) as session:
        current = conversation.current_agent or conversation.agent
        if team_code_in_child and current.runtime != Agent.Runtime.NATIVE:
            return send_in_child(session, current, text)
        return run_send(session, text, flush=True)


# A conversation's title in the lists: its first user message on one line, cut at a word past this length.
TITLE_LENGTH = 80


def _conversation_title(conversation: Conversation, text: str) -> None:
    """Title an untitled conversation (a chat started in Chat or by the API without one) after its first user message,
    as stored (redacted), so the lists and a draft recorded from it read what it was about, not "(untitled)". The
    conditional update leaves a title written meanwhile alone."""
    line = " ".join(redact_text(text).split())
    if len(line) > TITLE_LENGTH:
        line = (line[: TITLE_LENGTH - 1].rsplit(" ", 1)[0] or line[: TITLE_LENGTH - 1]) + "…"
    conversation.title = line
    Conversation.objects.filter(pk=conversation.pk, title="").update(title=line)


def conversation_invoke_function(
    *,
    conversation: Conversation,
    name: str,
    arguments: dict[str, Any] | None = None,
    record: bool = True,
    seal_key: str = "",
) -> FunctionResult:
    """Call a function without the model, through the same factory (the harness canary uses this). The caller
    chose the name, so it need not be one the agent declares. Sealed and claimed like a send."""
    refuse_imported(conversation)
    check_seal(conversation, seal_key)
    with claimed_session(conversation) as session:
        return run_invoke(session, name, arguments, record=record, flush=record)


@transaction.atomic
def conversation_import(
    *, agent: Agent, mapped: ImportedConversation, bound_by: str, owner: Any = None
) -> Conversation:
    """Write a conversation a team's service had (read from its traces) as an imported conversation of `agent`, the
    agent it was bound to (`bound_by`: how). Importing the same key of the same service again updates that
    conversation: a conversation that grew keeps its messages and gets the new ones; one that differs is rewritten.

    A message names an agent by its FK when an agent of that name exists, else by name (`agent_name`) under `agent`.
    Raises InvalidInput, writing nothing, for a conversation without content or a message of an unknown role."""
    check_imported(mapped, bound_by)
    rows = imported_rows(mapped, agent=agent)
    fields = imported_fields(mapped, agent=agent, bound_by=bound_by, trace_ids=mapped.trace_ids,
                              turn_count=sum(row.role == Message.Role.USER for row in rows), message_count=len(rows))
    service, key = stored_name(mapped.service_name), redact_text(mapped.key)[:300]
    same_key = Conversation.objects.select_for_update().filter(
        source=Conversation.Source.TRACE, trace_service=service, trace_key=key
    )
    conversation = same_key.first()
    created = False
    if conversation is None:
        try:
            with transaction.atomic():
                conversation = Conversation.objects.create(
                    source=Conversation.Source.TRACE, trace_service=service, trace_key=key, owner=owner, **fields
                )
                created = True
        except IntegrityError:
            # The receiver and a worker (or two requests) wrote the same new conversation at once: the other one's
            # insert won, and this import updates what it wrote.
            conversation = same_key.get()
    kept = 0
    if not created:
        stored = list(conversation.messages.order_by("seq").values_list(*SAME_MESSAGE))
        imported = [tuple(getattr(row, name) for name in SAME_MESSAGE) for row in rows[: len(stored)]]
        if stored == imported:
            kept = len(stored)
        else:
            conversation.messages.all().delete()
        for name, value in fields.items():
            setattr(conversation, name, value)
        conversation.save(update_fields=[*fields, "updated_at"])
    for row in rows:
        row.conversation = conversation
    Message.objects.bulk_create(rows[kept:])
    return conversation


# What an appended message must equal to be kept: all that the import writes of it. Only the last turn is compared,
# so what later spans of the turn tell (the agent that ran it, a tool call that ran locally after all) is written.
_SAME_WRITTEN = (*SAME_MESSAGE, "turn", "agent_id", "agent_name", "outcome", "model", "input_tokens", "output_tokens")


@transaction.atomic
def conversation_messages_append(
    *,
    conversation: Conversation,
    agent: Agent,
    mapped: ImportedConversation,
    bound_by: str,
    from_seq: int,
    users_before: int,
) -> Conversation:
    """Continue an imported conversation from message `from_seq` on with `mapped`'s messages (those of its last turns,
    which `users_before` user messages precede), without reading or comparing the messages before it: what a span
    arriving at a long conversation writes. Messages from `from_seq` on are kept up to the first that a new one does
    not repeat exactly, and replaced from there. Its trace ids gain `mapped`'s; its binding, title and counts are set
    as conversation_import sets them. Raises InvalidInput, writing nothing, as conversation_import does, and for a
    `from_seq` past its messages."""
    check_imported(mapped, bound_by)
    locked = Conversation.objects.select_for_update().filter(pk=conversation.pk, source=Conversation.Source.TRACE)
    current = locked.first()
    if current is None:
        raise InvalidInput(f"conversation #{conversation.pk} is not an imported conversation (any longer)")
    if not isinstance(from_seq, int) or not 0 <= from_seq <= current.message_count:
        raise InvalidInput(f"from_seq must be between 0 and the conversation's {current.message_count} messages")
    if not isinstance(users_before, int) or not 0 <= users_before <= from_seq:
        raise InvalidInput("users_before must count the user messages before from_seq")
    rows = imported_rows(mapped, agent=agent, seq=from_seq, users_before=users_before)
    stored = list(current.messages.filter(seq__gte=from_seq).order_by("seq").values_list(*_SAME_WRITTEN))
    kept = 0
    for row, values in zip(rows, stored, strict=False):
        if tuple(getattr(row, name) for name in _SAME_WRITTEN) != values:
            break
        kept += 1
    if kept < len(stored):
        current.messages.filter(seq__gte=from_seq + kept).delete()
    trace_ids = [*current.trace_ids, *(str(t) for t in mapped.trace_ids if str(t) not in current.trace_ids)]
    fields = imported_fields(
        mapped, agent=agent, bound_by=bound_by, trace_ids=trace_ids,
        turn_count=users_before + sum(row.role == Message.Role.USER for row in rows),
        message_count=from_seq + len(rows),
    )
    for name, value in fields.items():
        setattr(current, name, value)
    current.save(update_fields=[*fields, "updated_at"])
    for row in rows:
        row.conversation = current
    Message.objects.bulk_create(rows[kept:])
    return current


@transaction.atomic
def agent_create(*, sub_agents: list[str], **fields: Any) -> Agent:
    agent = Agent.objects.create(**fields)
    agent.sub_agents.set(Agent.objects.filter(name__in=sub_agents))
    return agent


@transaction.atomic
def agent_update(*, agent: Agent, sub_agents: list[str] | None = None, **fields: Any) -> Agent:
    for field, value in fields.items():
        setattr(agent, field, value)
    agent.save()
    if sub_agents is not None:
        agent.sub_agents.set(Agent.objects.filter(name__in=sub_agents))
    return agent
