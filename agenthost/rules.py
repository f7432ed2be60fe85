"""Calls without the model: rule-triggered ones (conversation_started, state_changed) and direct invokes. Each goes
through the same function-executor factory as the model's calls, and its state writes fire state_changed rules in
turn, to a bounded depth. A rule names its function by hand, so the name is resolved case-insensitively among the
functions the agent can call."""

from __future__ import annotations

import json
import logging
from typing import Any

from agenthost import executor
from agenthost.calls import record_call, refusal_for, stored_name
from agenthost.functions import FunctionContext, FunctionResult
from agenthost.loading import LoadedAgent
from agenthost.models import Message
from agenthost.redaction import redact_text
from agenthost.session import ConversationSession

logger = logging.getLogger(__name__)

_MAX_RULE_DEPTH = 5


def invoke(
    session: ConversationSession,
    loaded: LoadedAgent,
    name: str,
    arguments: dict[str, Any],
    *,
    turn: int,
    trigger: str,
    record: bool,
    depth: int = 0,
) -> FunctionResult:
    call_id = f"{trigger}_{session.conversation.pk}_{session.next_seq}"
    context = FunctionContext(
        name=name,
        arguments=arguments,
        conversation_id=session.conversation.pk,
        agent_name=loaded.name,
        entry_agent_name=session.entry_agent.name,
        turn=turn,
        tool_call_id=call_id,
        state=dict(session.state),
        trigger=trigger,
        declaration=loaded.declaration(name),
    )
    refusal = None if trigger == "direct" else refusal_for(name, loaded)
    if refusal is None:
        # A rule's call runs a tool like the model's: only while this turn still holds the conversation.
        session.hold_claim()
    outcome = refusal or executor.execute(name, context)
    if not record:
        return outcome
    record_call(session, loaded, turn, call_id, name, arguments, json.dumps(arguments), trigger)
    message = session.add_message(
        turn=turn,
        role=Message.Role.TOOL_RESULT,
        content=redact_text(outcome.content),
        function_name=stored_name(name),
        tool_call_id=call_id,
        agent_id=loaded.id,
        outcome=outcome.outcome,
    )
    if outcome.state_writes:
        changed = session.write_state(outcome.state_writes, message)
        fire_rules(session, loaded, trigger="state_changed", turn=turn, changed=changed, depth=depth + 1)
    return outcome


def fire_rules(
    session: ConversationSession,
    loaded: LoadedAgent,
    *,
    trigger: str,
    turn: int,
    changed: list[str] | None = None,
    depth: int = 0,
) -> None:
    if depth >= _MAX_RULE_DEPTH or not loaded.rules:
        return
    callable_names = loaded.callable_names()
    for rule in loaded.rules:
        if rule.get("trigger") != trigger:
            continue
        if trigger == "state_changed" and rule.get("key") not in (changed or []):
            continue
        wanted = str(rule.get("function") or "")
        name = rule_function_name(wanted, callable_names)
        if name is None:
            logger.warning("rule on agent %s names a function it cannot call: %r", loaded.name, wanted)
            name = wanted
        invoke(
            session,
            loaded,
            name,
            dict(rule.get("arguments") or {}),
            turn=turn,
            trigger="rule",
            record=True,
            depth=depth,
        )


def rule_function_name(wanted: str, callable_names: frozenset[str]) -> str | None:
    """A rule's function resolved ignoring case and surrounding space, among the names the agent can call only:
    a rule is written by hand, the model's calls are not resolved at all."""
    if wanted in callable_names:
        return wanted
    folded = wanted.strip().casefold()
    if not folded:
        return None
    return next((name for name in sorted(callable_names) if name.casefold() == folded), None)
