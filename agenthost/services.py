"""The conversation service: start a conversation, send a user message through the agent loop (loop.py), invoke a
function without the model (rules.py); and the agent writes.

A conversation may be sealed by whoever started it: then only the holder of its seal key can send to it. One turn at
a time: a send claims the conversation before it starts (session.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from django.db import transaction

from agenthost.functions import FunctionResult
from agenthost.loading import load_agent
from agenthost.loop import turn_run
from agenthost.models import Agent, Conversation, Message
from agenthost.redaction import redact_text
from agenthost.rules import fire_rules, invoke
from agenthost.session import ConversationSession, check_seal, claim_expiry, claimed_session, release_claim, seal_digest
from agenthost.turns import ConversationError, InvalidInput, TurnResult

PRE_TURN = -1


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
) -> HeldConversation:
    """Start a conversation (as conversation_start) and hold it: its turns run one after the other through the
    returned HeldConversation, with no claim, seal check or read of their own, and everything they did is written
    by `save()` — once, in one transaction (the caller's, if it has one open) — which also gives the claim back.

    For a caller that alone drives a conversation from start to end (the harness's test conversations, sealed):
    a turn costs no database round trip, and a crash loses the conversation's unsaved turns, never a saved one.
    Until it is saved nobody else can send to it: its turn claim is held (and renewed while turns run)."""
    session = _start(
        agent=agent, tags=tags, initial_state=initial_state, history=history, owner=None, title=title,
        on_created=on_created, seal=seal, held=True,
    )
    return HeldConversation(session)


class HeldConversation:
    """A conversation held by conversation_open: send and invoke as conversation_send and
    conversation_invoke_function do, the writes kept until `save()`. Used as a context manager, it saves when the
    block ends, however it ends. One thread at a time: the one running its turns, then the one saving it."""

    def __init__(self, session: ConversationSession) -> None:
        self._session = session
        self._saved = False
        self.conversation = session.conversation

    def __enter__(self) -> HeldConversation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.save()

    def send(self, text: str) -> TurnResult:
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("the message text must not be empty")
        self._check_open()
        return _send(self._session, text, flush=False)

    def invoke_function(
        self, name: str, arguments: dict[str, Any] | None = None, *, record: bool = True
    ) -> FunctionResult:
        self._check_open()
        return _invoke(self._session, name, arguments, record=record, flush=False)

    def _check_open(self) -> None:
        if self._saved:
            # Its claim was given back with the save: a turn now would run unclaimed.
            raise ConversationError(f"conversation {self.conversation.pk} was saved and is no longer held")

    def messages(self) -> list[Message]:
        """Every message so far, saved or not, in seq order (after a save, as saved)."""
        return self._session.transcript()

    def agent_names(self) -> dict[int, str]:
        """The name of each agent that wrote a message, by id: the agents the turns loaded, read again only for an
        id they did not (an agent-load hook may hand a turn another agent)."""
        names = {agent.pk: agent.name for agent in self._session.known_agents()}
        missing = {m.agent_id for m in self.messages() if m.agent_id is not None and m.agent_id not in names}
        if missing:
            names.update(Agent.objects.filter(pk__in=missing).values_list("pk", "name"))
        return names

    def save(self) -> None:
        """Write what the conversation's turns did and give its claim back; the conversation is no longer held
        (a second save does nothing)."""
        if self._saved:
            return
        session = self._session
        try:
            session.flush(release=True)
            self._saved = True
        finally:
            if session.claim is not None and not transaction.get_connection().in_atomic_block:
                # The flush failed before it gave the claim back; inside the caller's transaction the release would
                # be rolled back with it, so it is left to the claim's expiry.
                release_claim(session.conversation.pk, session.claim)


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
    # Claimed from birth until the start-up rules are done (a held conversation: until its block ends), so nothing
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


def conversation_send(*, conversation: Conversation, text: str, seal_key: str = "") -> TurnResult:
    """Run one user turn to its end and return what happened. Raises ConversationError (with `.partial`):
    ConversationSealed without the conversation's seal key and ConcurrentTurn while another turn runs, both before
    anything is written or run."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the message text must not be empty")
    check_seal(conversation, seal_key)
    with claimed_session(conversation) as session:
        return _send(session, text, flush=True)


def _send(session: ConversationSession, text: str, *, flush: bool) -> TurnResult:
    conversation = session.conversation
    turn = conversation.turn_count
    result = TurnResult(conversation_id=conversation.pk, turn=turn)
    current = conversation.current_agent or session.entry_agent
    loaded = load_agent(current, conversation)
    result.agent_chain.append(loaded.name)
    try:
        loaded = turn_run(session, loaded, turn, text, result)
    except ConversationError as exc:
        # Whatever stopped the turn (a broken instruction, a lost claim), the caller is shown how far it got.
        if exc.partial is None:
            exc.partial = result
        raise
    finally:
        # What happened is written even when the turn failed: the transcript must show how far it got.
        current_agent_id = None if loaded.id == session.entry_agent.pk else loaded.id
        session.set_fields(turn_count=turn + 1, current_agent_id=current_agent_id)
        if flush:
            session.flush(release=True)
        # After a lost claim the turn is written after the other turn's, as the next turn.
        result.turn = conversation.turn_count - 1
        result.state = dict(session.state)
    return result


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
    check_seal(conversation, seal_key)
    with claimed_session(conversation) as session:
        return _invoke(session, name, arguments, record=record, flush=record)


def _invoke(
    session: ConversationSession, name: str, arguments: dict[str, Any] | None, *, record: bool, flush: bool
) -> FunctionResult:
    conversation = session.conversation
    loaded = load_agent(conversation.current_agent or session.entry_agent, conversation)
    outcome = invoke(
        session,
        loaded,
        name,
        arguments or {},
        turn=max(conversation.turn_count - 1, PRE_TURN),
        trigger="direct",
        record=record,
    )
    if flush:
        session.flush(release=True)
    return outcome


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
