"""Turns in a session that holds its conversation (run_send, run_invoke) — shared by the conversation service,
which writes each turn as it ends, and HeldConversation (services.conversation_open), which writes them all at once.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import transaction

from agenthost.functions import FunctionResult
from agenthost.loading import load_agent
from agenthost.loop import turn_run
from agenthost.models import Agent, Message
from agenthost.rules import invoke
from agenthost.runtimes.base import RuntimeTurn, runtime_invoke, runtime_turn_run
from agenthost.runtimes.python import chat_completion
from agenthost.runtimes.responses import responses_create
from agenthost.seal import CaseSeal
from agenthost.session import ConversationSession, SessionCheckpoint, release_claim
from agenthost.turns import ConversationError, InvalidInput, TurnResult

# The turn number of what happens before the first user turn (start-up rules).
PRE_TURN = -1


def run_send(session: ConversationSession, text: str, *, flush: bool) -> TurnResult:
    """One user turn in a session that holds the conversation; written now (`flush`) or with the session's next
    flush."""
    conversation = session.conversation
    turn = conversation.turn_count
    result = TurnResult(conversation_id=conversation.pk, turn=turn)
    current = conversation.current_agent or session.entry_agent
    loaded = load_agent(current, conversation)
    result.agent_chain.append(loaded.name)
    # The agent's runtime: agenttest's own loop, or the team's code (agenthost/runtimes).
    run = turn_run if loaded.runtime == Agent.Runtime.NATIVE else runtime_turn_run
    if session.case is not None:
        # An openai client the team's code makes itself reaches the model layer as this turn's, through chat
        # completions or the Responses API.
        own_client_turn = RuntimeTurn(session, loaded, turn, result)
        session.case.answer_chat = functools.partial(chat_completion, own_client_turn)
        session.case.answer_responses = functools.partial(responses_create, own_client_turn)
    try:
        loaded = run(session, loaded, turn, text, result)
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


def run_invoke(
    session: ConversationSession, name: str, arguments: dict[str, Any] | None, *, record: bool, flush: bool
) -> FunctionResult:
    """A function called without the model, in a session that holds the conversation."""
    conversation = session.conversation
    loaded = load_agent(conversation.current_agent or session.entry_agent, conversation)
    if loaded.runtime != Agent.Runtime.NATIVE:
        # Through the runtime's own tool routing, so the harness's canary proves that routing live.
        outcome = runtime_invoke(
            session, loaded, name, arguments or {}, turn=max(conversation.turn_count - 1, PRE_TURN), record=record
        )
        if flush:
            session.flush(release=True)
        return outcome
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


class HeldConversation:
    """A conversation held by conversation_open: send and invoke as conversation_send and
    conversation_invoke_function do, the writes kept until `save()`. One thread at a time: the one running its
    turns, then the one saving it."""

    def __init__(self, session: ConversationSession, *, network_allow: frozenset[str] = frozenset()) -> None:
        self._session = session
        # Saved and committed: no longer held.
        self._saved = False
        # Where the session stood before a save whose transaction has not committed (see save).
        self._unsettled: SessionCheckpoint | None = None
        self.conversation = session.conversation
        # Under test nothing of the team's code reaches beyond agenttest while a turn runs (agenthost/seal.py).
        session.case = CaseSeal(session, network_allow=network_allow)

    def send(self, text: str) -> TurnResult:
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("the message text must not be empty")
        self._check_open()
        case = self._session.case
        with case.sealing():
            try:
                result = run_send(self._session, text, flush=False)
            except ConversationError as exc:
                # A breach the team's code turned into another error (or swallowed and failed on) is the news.
                case.raise_breach(exc.partial)
                raise
            except BaseException:
                case.raise_breach()
                raise
        case.raise_breach(result)
        return result

    def invoke_function(
        self, name: str, arguments: dict[str, Any] | None = None, *, record: bool = True
    ) -> FunctionResult:
        self._check_open()
        case = self._session.case
        with case.sealing():
            try:
                outcome = run_invoke(self._session, name, arguments, record=record, flush=False)
            except BaseException:
                case.raise_breach()
                raise
        case.raise_breach()
        return outcome

    def _check_open(self) -> None:
        if self._saved or self._unsettled is not None:
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
        once that is committed (a second save does nothing).

        Inside a caller's transaction (a run stores the conversation with its result) nothing changes here until
        that transaction commits: if it rolls back instead (a transient database error), the held conversation is
        as it was before the save, and a save in the caller's retry writes everything again."""
        if self._saved:
            return
        session = self._session
        if self._unsettled is not None:
            # An earlier save's transaction rolled back: its rows are gone, and the session goes back to match.
            session.restore(self._unsettled)
        self._unsettled = session.checkpoint()
        try:
            session.flush(release=True)
        finally:
            if session.claim is not None and not transaction.get_connection().in_atomic_block:
                # The flush failed before it gave the claim back; inside the caller's transaction the release would
                # be rolled back with it, so it is left to the claim's expiry.
                release_claim(session.conversation.pk, session.claim)
        # At once when no transaction is open (the flush committed its own).
        transaction.on_commit(self._settle)

    def _settle(self) -> None:
        self._saved = True
        self._unsettled = None
