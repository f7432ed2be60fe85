"""One conversation while the service works on it (ConversationSession), its seal and its turn claim.

A conversation may be sealed by whoever started it: then only the holder of its seal key can send to it. One turn at
a time: a send claims the conversation before anything runs, and gives the claim back however the turn ends.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from agenthost.models import Agent, Conversation, Message, StateChange
from agenthost.redaction import redact
from agenthost.seal import exempt
from agenthost.turns import (
    ConcurrentTurn,
    ConversationGone,
    ConversationSealed,
    TurnClaimLost,
    TurnResult,
)

_MISSING = object()


def seal_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def check_seal(conversation: Conversation, seal_key: str) -> None:
    """Raise ConversationSealed unless the conversation is unsealed or `seal_key` is its key. The seal is read from
    the database: a caller's instance could be stale or built by hand."""
    row = Conversation.objects.filter(pk=conversation.pk).values_list("seal_hash", "sealed_reason").first()
    if row is None:
        raise ConversationGone(f"conversation {conversation.pk} no longer exists")
    seal_hash, reason = row
    if not seal_hash:
        return
    offered = seal_key if isinstance(seal_key, str) else ""
    if not hmac.compare_digest(seal_digest(offered), seal_hash):
        raise ConversationSealed(f"{reason or 'this conversation is sealed'}; it cannot be continued")


def claim_expiry() -> datetime:
    # A turn runs inside one request at most; past that its claim is stale (the process died) and may be taken over.
    return timezone.now() + timedelta(seconds=settings.AGENTTEST_REQUEST_TIMEOUT)


def _claim_turn(conversation: Conversation) -> datetime:
    """Claim the conversation for one turn before anything runs, so a second send cannot run tools alongside it."""
    now = timezone.now()
    claim = claim_expiry()
    claimed = (
        Conversation.objects.filter(pk=conversation.pk)
        .filter(Q(turn_claimed_until__isnull=True) | Q(turn_claimed_until__lt=now))
        .update(turn_claimed_until=claim)
    )
    if claimed != 1:
        raise ConcurrentTurn("another turn is in progress in this conversation; wait for it to end and send again")
    return claim


def release_claim(conversation_id: int, claim: datetime) -> None:
    # Only our own claim: after it expired another turn may have taken the conversation over.
    Conversation.objects.filter(pk=conversation_id, turn_claimed_until=claim).update(turn_claimed_until=None)


def claim_lost(partial: TurnResult | None = None) -> TurnClaimLost:
    return TurnClaimLost(
        f"this turn ran longer than AGENTTEST_REQUEST_TIMEOUT ({settings.AGENTTEST_REQUEST_TIMEOUT} s) and "
        "another turn took the conversation over, so it stopped before its next step; what it did is kept "
        "in the conversation, after the other turn",
        partial=partial,
    )


@contextmanager
def claimed_session(conversation: Conversation) -> Iterator[ConversationSession]:
    """A session holding the conversation's turn claim; the claim is given back however the block ends."""
    claim = _claim_turn(conversation)
    session: ConversationSession | None = None
    try:
        # What an earlier turn wrote after the caller read the conversation counts: the next seq, turn and agent.
        conversation.refresh_from_db(fields=["message_count", "turn_count", "current_agent"])
        session = ConversationSession(conversation, claim=claim)
        yield session
    finally:
        # The session's claim, renewed as the turn went; a lost one matches nothing and is left to its holder.
        held = claim if session is None else session.claim
        if held is not None:
            release_claim(conversation.pk, held)


@dataclass(frozen=True)
class SessionCheckpoint:
    """What a session held in memory at one moment — see ConversationSession.checkpoint."""

    first_seq: int
    next_seq: int
    first_turn: int
    claim: datetime | None
    stored: int | None
    messages: tuple[tuple[Message, int, int], ...]
    changes: tuple[tuple[StateChange, int | None], ...]
    fields: dict[str, Any]
    conversation: dict[str, Any]


class ConversationSession:
    """One conversation while the service works on it: next seq, state, and the rows it will write.

    Messages and state changes are kept in memory and written together by `flush`, in one transaction, so a turn
    costs a few statements however many tool calls it makes. A session holding a turn claim renews it before each
    model and tool call (`renew_claim`), changes the conversation only while it still holds it, and gives it back with
    its last flush (`release=True`)."""

    def __init__(self, conversation: Conversation, *, claim: datetime | None = None, new: bool = False) -> None:
        """`new`: the conversation was created just now, so it has no stored messages or state to read."""
        self.conversation = conversation
        self.claim = claim
        self.entry_agent: Agent = conversation.agent
        self.first_seq = conversation.message_count
        self.first_turn = conversation.turn_count
        self.next_seq = self.first_seq
        self.state: dict[str, Any] = (
            {}
            if new
            else dict(StateChange.objects.filter(conversation=conversation).order_by("id").values_list("key", "value"))
        )
        self._agents: dict[str, Agent | None] = {}
        # The stored messages, read once when a turn first needs the history; then kept up to date by flush.
        self._stored: list[Message] | None = [] if new else None
        self._messages: list[Message] = []
        self._changes: list[StateChange] = []
        # Conversation fields changed since the last flush (the turn count, the current agent), written by the next.
        self._fields: dict[str, Any] = {}
        # A held conversation's seal (agenthost/seal.py), which its turns run inside; None in chat.
        self.case: Any = None

    def renew_claim(self) -> bool:
        """Extend the turn claim by another AGENTTEST_REQUEST_TIMEOUT, only while this session still holds it (a
        conditional update); False when another turn took the conversation over after it expired. A long turn of
        many steps so keeps its conversation, and one that lost it can stop before it runs anything more."""
        if self.claim is None:
            return True
        if self.claim - timezone.now() > timedelta(seconds=settings.AGENTTEST_REQUEST_TIMEOUT / 2):
            # Less than half of the claim is used up: it cannot have expired, so no other turn can have taken the
            # conversation over, and renewing now would be a durable write per step for nothing (as a run lease is
            # renewed every third of its period, not before every write).
            return True
        renewed = claim_expiry()
        with exempt():
            held = Conversation.objects.filter(pk=self.conversation.pk, turn_claimed_until=self.claim).update(
                turn_claimed_until=renewed
            )
        if held != 1:
            return False
        self.claim = renewed
        return True

    def hold_claim(self, partial: TurnResult | None = None) -> None:
        """renew_claim, raising TurnClaimLost (with what the turn did so far) when the claim is gone."""
        if not self.renew_claim():
            raise claim_lost(partial)

    def add_message(self, **fields: Any) -> Message:
        message = Message(conversation=self.conversation, seq=self.next_seq, **fields)
        self._messages.append(message)
        self.next_seq += 1
        return message

    def write_state(self, writes: dict[str, Any], message: Message | None) -> list[str]:
        changed = []
        for key, value in writes.items():
            value = redact(value)
            self._changes.append(StateChange(conversation=self.conversation, key=key, value=value, message=message))
            if self.state.get(key, _MISSING) != value:
                changed.append(key)
            self.state[key] = value
        return changed

    def set_fields(self, **conversation_fields: Any) -> None:
        """Change conversation fields (turn count, current agent) on the instance now and in the database with the
        next flush, so a session holding the conversation across turns writes them once."""
        self._fields.update(conversation_fields)
        for field_name, value in conversation_fields.items():
            setattr(self.conversation, field_name, value)

    def transcript(self) -> list[Message]:
        """Every message of the conversation in seq order: the stored ones and those this session has not written."""
        if self._stored is None:
            self._stored = list(self.conversation.messages.order_by("seq"))
        return [*self._stored, *self._messages]

    def flush(self, *, release: bool = False, **conversation_fields: Any) -> None:
        """Write what this session produced. The message count (and the turn claim, if held) is checked with a
        conditional update, so two turns written to one conversation at the same time cannot interleave.

        When that fails — another turn took the conversation over after this one's claim expired, and wrote — what
        this session did is written all the same, never dropped (tools may have run): see _append_after_others."""
        conversation = self.conversation
        held = {} if self.claim is None else {"turn_claimed_until": self.claim}
        conversation_fields = {**self._fields, **conversation_fields}
        if release:
            conversation_fields["turn_claimed_until"] = None
        # Inside a caller's transaction (a run stores a case's conversation with its result) no savepoint: a failure
        # here rolls the caller's transaction back whole.
        with transaction.atomic(savepoint=False):
            claimed = Conversation.objects.filter(pk=conversation.pk, message_count=self.first_seq, **held).update(
                message_count=self.next_seq, updated_at=timezone.now(), **conversation_fields
            )
            written = conversation_fields if claimed == 1 else self._append_after_others(held, conversation_fields)
            if written is not None:
                Message.objects.bulk_create(self._messages)
                StateChange.objects.bulk_create(self._changes)
        if written is None:
            # Raised once out of the atomic block, which an exception would mark for rollback: a caller's
            # transaction (a run storing the case's result) may go on without the conversation.
            raise ConversationGone(f"conversation {conversation.pk} no longer exists")
        conversation_fields = written
        if release:
            self.claim = None
        conversation.message_count = self.first_seq = self.next_seq
        self.first_turn = conversation_fields.get("turn_count", self.first_turn)
        for field_name, value in conversation_fields.items():
            setattr(conversation, field_name, value)
        if self._stored is not None:
            self._stored.extend(self._messages)
        self._messages, self._changes, self._fields = [], [], {}

    def _append_after_others(
        self, held: dict[str, Any], conversation_fields: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Write this session's messages after whatever another turn wrote in between: a fresh seq range claimed by
        an atomic increment of the message count (so it cannot collide with a third writer either) and, for the
        turns it ran, turn numbers of their own after the other's. The other conversation fields (agent, release)
        are written only while this session still holds its claim. Returns the fields as written, for the caller's
        instance; None when the conversation no longer exists (nothing was written)."""
        conversation = self.conversation
        count = len(self._messages)
        counters: dict[str, Any] = {"message_count": F("message_count") + count, "updated_at": timezone.now()}
        new_turns = conversation_fields.get("turn_count", self.first_turn) - self.first_turn
        new_turn = new_turns > 0
        if new_turn:
            counters["turn_count"] = F("turn_count") + new_turns
        if Conversation.objects.filter(pk=conversation.pk).update(**counters) != 1:
            return None
        others = {field: value for field, value in conversation_fields.items() if field != "turn_count"}
        if others and not Conversation.objects.filter(pk=conversation.pk, **held).update(**others):
            others = {}
        message_count, turn_count = (
            Conversation.objects.filter(pk=conversation.pk).values_list("message_count", "turn_count").get()
        )
        self.first_seq = message_count - count
        # This session's first turn becomes the first of the turns the increment made room for.
        turn_shift = turn_count - new_turns - self.first_turn
        for offset, message in enumerate(self._messages):
            message.seq = self.first_seq + offset
            if new_turn:
                message.turn += turn_shift
        self.next_seq = message_count
        return {**others, "turn_count": turn_count} if new_turn else others

    def checkpoint(self) -> SessionCheckpoint:
        """What this session holds in memory now, for `restore`: a flush inside a caller's transaction changes it
        before that transaction commits, and a rollback undoes the rows but not the memory."""
        conversation = self.conversation
        return SessionCheckpoint(
            first_seq=self.first_seq,
            next_seq=self.next_seq,
            first_turn=self.first_turn,
            claim=self.claim,
            stored=None if self._stored is None else len(self._stored),
            messages=tuple((message, message.seq, message.turn) for message in self._messages),
            changes=tuple((change, change.message_id) for change in self._changes),
            fields=dict(self._fields),
            conversation={f.attname: getattr(conversation, f.attname) for f in conversation._meta.concrete_fields},
        )

    def restore(self, checkpoint: SessionCheckpoint) -> None:
        """Back to `checkpoint`, as if no flush had happened since: its messages and state changes unwritten again
        (numbered as they were, without the ids of rows that were rolled back), the claim and the conversation's
        fields as they were."""
        self.first_seq, self.next_seq = checkpoint.first_seq, checkpoint.next_seq
        self.first_turn, self.claim = checkpoint.first_turn, checkpoint.claim
        if self._stored is not None:
            self._stored = None if checkpoint.stored is None else self._stored[: checkpoint.stored]
        self._messages = []
        for message, seq, turn in checkpoint.messages:
            message.seq, message.turn = seq, turn
            self._messages.append(_unwritten(message))
        self._changes = []
        for change, message_id in checkpoint.changes:
            # Set by the rolled-back insert to its message's id then; read from the message again when inserted.
            change.message_id = message_id
            self._changes.append(_unwritten(change))
        self._fields = dict(checkpoint.fields)
        for attname, value in checkpoint.conversation.items():
            setattr(self.conversation, attname, value)

    def known_agents(self) -> list[Agent]:
        """The agents this session has read: the entry agent and those it looked up by name."""
        return [self.entry_agent, *(agent for agent in self._agents.values() if agent is not None)]

    def agent_named(self, name: str) -> Agent | None:
        if name not in self._agents:
            self._agents[name] = Agent.objects.filter(name=name).first()
        return self._agents[name]


def _unwritten(row: Any) -> Any:
    """A model instance whose INSERT was rolled back: without the id it was given, so it is inserted anew."""
    row.pk = None
    row._state.adding = True
    row._state.db = None
    return row
