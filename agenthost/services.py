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
from agenthost.models import Agent, Conversation
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
    # Claimed from birth until the start-up rules are done, so nothing can be sent in between.
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
        session = ConversationSession(conversation, claim=claim)
        if initial_state:
            session.write_state(initial_state, None)
        turn = PRE_TURN
        for item in history:
            if item["role"] == "user":
                turn += 1
            session.add_message(
                turn=max(turn, 0), role=item["role"], content=redact_text(item["content"]), agent=agent
            )
        loaded = load_agent(agent, conversation)
        starts_rules = any(rule.get("trigger") == "conversation_started" for rule in loaded.rules)
        session.flush(release=not starts_rules, turn_count=turn + 1 if history else 0)
    if starts_rules:
        try:
            fire_rules(session, loaded, trigger="conversation_started", turn=PRE_TURN)
            session.flush(release=True)
        finally:
            if session.claim is not None:
                # The claim as renewed by the rules' tool calls.
                release_claim(conversation.pk, session.claim)
    if seal:
        conversation.seal_key = seal_key
    return conversation


def conversation_send(*, conversation: Conversation, text: str, seal_key: str = "") -> TurnResult:
    """Run one user turn to its end and return what happened. Raises ConversationError (with `.partial`):
    ConversationSealed without the conversation's seal key and ConcurrentTurn while another turn runs, both before
    anything is written or run."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the message text must not be empty")
    check_seal(conversation, seal_key)
    with claimed_session(conversation) as session:
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
            session.flush(release=True, turn_count=turn + 1, current_agent_id=current_agent_id)
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
        if record:
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
