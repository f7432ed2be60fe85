"""The conversation service: start a conversation, send a user message through the agent loop, invoke a function.

Loop per turn: load agent (hooks run) → model with tools → each tool call through the function-executor factory →
results back → until a final answer, a stop-completion or the step limit.

An agent calls only what it declares plus the control-flow functions: any other name the model (or a rule) names is
answered "not available" without asking the factory. A conversation may be sealed by whoever started it: then only
the holder of its seal key can send to it. One turn at a time: a send claims the conversation before it starts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.template import Context, Engine, TemplateSyntaxError
from django.utils import timezone

from agenthost import executor
from agenthost.functions import FunctionContext, FunctionResult
from agenthost.llm.base import ModelRequest, ModelResponse, ProviderError, Usage
from agenthost.llm.registry import UnknownModel, get_provider
from agenthost.loading import LoadedAgent, load_agent
from agenthost.models import Agent, Conversation, Message, StateChange
from agenthost.redaction import redact, redact_text

logger = logging.getLogger(__name__)

_instruction_engine = Engine(autoescape=False)
_MAX_RULE_DEPTH = 5
PRE_TURN = -1


class ConversationError(Exception):
    """A turn could not complete. `partial` holds what happened before it stopped."""

    code = "conversation_error"

    def __init__(self, message: str, *, partial: TurnResult | None = None) -> None:
        super().__init__(message)
        self.partial = partial


class StepLimitExceeded(ConversationError):
    code = "step_limit"


class ModelCallFailed(ConversationError):
    code = "model_error"

    def __init__(self, message: str, *, provider_code: str = "", partial: TurnResult | None = None) -> None:
        super().__init__(message, partial=partial)
        self.provider_code = provider_code


class InvalidInput(ConversationError):
    code = "invalid_input"


@dataclass
class ToolCallRecord:
    name: str
    arguments: Any
    result: str
    outcome: str
    agent: str
    tool_call_id: str = ""
    error: bool = False
    trigger: str = "model"
    stop: bool = False


@dataclass
class TurnResult:
    conversation_id: int
    turn: int
    output: str = ""
    finish: str = ""
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    agent_chain: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model_latency_ms: float = 0.0
    steps: int = 0
    models: list[str] = field(default_factory=list)
    # The conversation state when the turn ended.
    state: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["usage"] = {**asdict(self.usage), "total_tokens": self.usage.total_tokens}
        return data


class ConcurrentTurn(ConversationError):
    code = "concurrent_turn"


class ConversationSealed(ConversationError):
    """The conversation was sealed by whoever started it, and the caller does not hold its key."""

    code = "sealed"


def _seal_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _check_seal(conversation: Conversation, seal_key: str) -> None:
    """Raise ConversationSealed unless the conversation is unsealed or `seal_key` is its key. The seal is read from
    the database: a caller's instance could be stale or built by hand."""
    row = Conversation.objects.filter(pk=conversation.pk).values_list("seal_hash", "sealed_reason").first()
    if row is None:
        raise ConversationError(f"conversation {conversation.pk} no longer exists")
    seal_hash, reason = row
    if not seal_hash:
        return
    offered = seal_key if isinstance(seal_key, str) else ""
    if not hmac.compare_digest(_seal_digest(offered), seal_hash):
        raise ConversationSealed(f"{reason or 'this conversation is sealed'}; it cannot be continued")


def _claim_expiry() -> datetime:
    # A turn runs inside one request at most; past that its claim is stale (the process died) and may be taken over.
    return timezone.now() + timedelta(seconds=settings.AGENTTEST_REQUEST_TIMEOUT)


def _claim_turn(conversation: Conversation) -> datetime:
    """Claim the conversation for one turn before anything runs, so a second send cannot run tools alongside it."""
    now = timezone.now()
    claim = _claim_expiry()
    claimed = (
        Conversation.objects.filter(pk=conversation.pk)
        .filter(Q(turn_claimed_until__isnull=True) | Q(turn_claimed_until__lt=now))
        .update(turn_claimed_until=claim)
    )
    if claimed != 1:
        raise ConcurrentTurn("another turn is in progress in this conversation; wait for it to end and send again")
    return claim


def _release_claim(conversation_id: int, claim: datetime) -> None:
    # Only our own claim: after it expired another turn may have taken the conversation over.
    Conversation.objects.filter(pk=conversation_id, turn_claimed_until=claim).update(turn_claimed_until=None)


@contextmanager
def _claimed_session(conversation: Conversation) -> Iterator[_Session]:
    """A session holding the conversation's turn claim; the claim is given back however the block ends."""
    claim = _claim_turn(conversation)
    session: _Session | None = None
    try:
        # What an earlier turn wrote after the caller read the conversation counts: the next seq, turn and agent.
        conversation.refresh_from_db(fields=["message_count", "turn_count", "current_agent"])
        session = _Session(conversation, claim=claim)
        yield session
    finally:
        if session is None or session.claim is not None:
            _release_claim(conversation.pk, claim)


class _Session:
    """One conversation while the service works on it: next seq, state, and the rows it will write.

    Messages and state changes are kept in memory and written together by `flush`, in one transaction, so a turn
    costs a few statements however many tool calls it makes. A session holding a turn claim writes only while it
    still holds it, and gives it back with its last flush (`release=True`)."""

    def __init__(self, conversation: Conversation, *, claim: datetime | None = None) -> None:
        self.conversation = conversation
        self.claim = claim
        self.entry_agent: Agent = conversation.agent
        self.first_seq = conversation.message_count
        self.next_seq = self.first_seq
        self.state: dict[str, Any] = dict(
            StateChange.objects.filter(conversation=conversation).order_by("id").values_list("key", "value")
        )
        self._agents: dict[str, Agent] = {}
        self._messages: list[Message] = []
        self._changes: list[StateChange] = []

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

    def flush(self, *, release: bool = False, **conversation_fields: Any) -> None:
        """Write what this session produced. The message count (and the turn claim, if held) is checked with a
        conditional update, so two turns written to one conversation at the same time cannot interleave."""
        conversation = self.conversation
        held = {} if self.claim is None else {"turn_claimed_until": self.claim}
        if release:
            conversation_fields["turn_claimed_until"] = None
        with transaction.atomic():
            claimed = Conversation.objects.filter(pk=conversation.pk, message_count=self.first_seq, **held).update(
                message_count=self.next_seq, updated_at=timezone.now(), **conversation_fields
            )
            if claimed != 1:
                raise ConcurrentTurn(
                    "another turn was written to this conversation at the same time; reload it and send again"
                )
            Message.objects.bulk_create(self._messages)
            StateChange.objects.bulk_create(self._changes)
        if release:
            self.claim = None
        conversation.message_count = self.first_seq = self.next_seq
        for field_name, value in conversation_fields.items():
            setattr(conversation, field_name, value)
        self._messages, self._changes = [], []

    def pending_messages(self) -> list[Message]:
        return list(self._messages)

    def agent_named(self, name: str) -> Agent | None:
        if name not in self._agents:
            self._agents[name] = Agent.objects.filter(name=name).first()
        return self._agents[name]


_MISSING = object()


def _render_instruction(agent: LoadedAgent, state: dict[str, Any]) -> str:
    try:
        return _instruction_engine.from_string(agent.instruction).render(Context(dict(state)))
    except TemplateSyntaxError as exc:
        raise InvalidInput(f"the instruction of agent {agent.name!r} is not a valid template: {exc}") from None


def history_as_model_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Stored messages → OpenAI chat messages. An assistant row and the tool calls/results after it form one block."""
    result: list[dict[str, Any]] = []
    block_calls: list[dict[str, Any]] = []
    block_results: list[dict[str, Any]] = []
    block_text: str | None = None
    in_block = False

    def flush() -> None:
        nonlocal block_calls, block_results, block_text, in_block
        if in_block:
            entry: dict[str, Any] = {"role": "assistant", "content": block_text or None}
            if block_calls:
                entry["tool_calls"] = block_calls
            if entry["content"] is not None or block_calls:
                result.append(entry)
            result.extend(block_results)
        block_calls, block_results, block_text, in_block = [], [], None, False

    for message in messages:
        if message.role == Message.Role.USER:
            flush()
            result.append({"role": "user", "content": message.content})
        elif message.role == Message.Role.ASSISTANT:
            flush()
            in_block, block_text = True, message.content
        elif message.role == Message.Role.TOOL_CALL:
            if block_results:
                flush()
            in_block = True
            block_calls.append(
                {
                    "id": message.tool_call_id,
                    "type": "function",
                    "function": {"name": message.function_name, "arguments": message.raw_arguments or "{}"},
                }
            )
        elif message.role == Message.Role.TOOL_RESULT:
            in_block = True
            block_results.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
    flush()
    return result


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
    claim = _claim_expiry()
    with transaction.atomic():
        conversation = Conversation.objects.create(
            agent=agent,
            owner=owner,
            tags=list(tags),
            title=title[:200],
            sealed_reason=seal[:200],
            seal_hash=_seal_digest(seal_key) if seal else "",
            turn_claimed_until=claim,
        )
        if on_created is not None:
            on_created(conversation)
        session = _Session(conversation, claim=claim)
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
            _fire_rules(session, loaded, trigger="conversation_started", turn=PRE_TURN)
            session.flush(release=True)
        finally:
            if session.claim is not None:
                _release_claim(conversation.pk, claim)
    if seal:
        conversation.seal_key = seal_key
    return conversation


def conversation_send(*, conversation: Conversation, text: str, seal_key: str = "") -> TurnResult:
    """Run one user turn to its end and return what happened. Raises ConversationError (with `.partial`):
    ConversationSealed without the conversation's seal key and ConcurrentTurn while another turn runs, both before
    anything is written or run."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the message text must not be empty")
    _check_seal(conversation, seal_key)
    with _claimed_session(conversation) as session:
        turn = conversation.turn_count
        result = TurnResult(conversation_id=conversation.pk, turn=turn)
        current = conversation.current_agent or session.entry_agent
        loaded = load_agent(current, conversation)
        result.agent_chain.append(loaded.name)
        try:
            loaded = _turn(session, loaded, turn, text, result)
        finally:
            # What happened is written even when the turn failed: the transcript must show how far it got.
            current_agent_id = None if loaded.id == session.entry_agent.pk else loaded.id
            session.flush(release=True, turn_count=turn + 1, current_agent_id=current_agent_id)
            result.state = dict(session.state)
    return result


def _turn(session: _Session, loaded: LoadedAgent, turn: int, text: str, result: TurnResult) -> LoadedAgent:
    """The agent loop for one turn; returns the agent that ended it."""
    conversation = session.conversation
    entry_name = session.entry_agent.name
    session.add_message(turn=turn, role=Message.Role.USER, content=redact_text(text), agent_id=loaded.id)
    model_messages = history_as_model_messages([*conversation.messages.all(), *session.pending_messages()])

    for step in range(loaded.max_steps):
        request = ModelRequest(
            model=loaded.model,
            messages=[{"role": "system", "content": _render_instruction(loaded, session.state)}, *model_messages],
            tools=loaded.tools(entry_agent_name=entry_name),
            temperature=loaded.temperature,
            metadata={"conversation_id": conversation.pk, "turn": turn, "step": step, "agent": loaded.name},
        )
        try:
            response = get_provider(loaded.provider).complete(request)
        except ProviderError as exc:
            raise ModelCallFailed(
                f"the model {loaded.model_key} failed at turn {turn} step {step}: {redact_text(str(exc))}",
                provider_code=exc.code,
                partial=result,
            ) from exc
        except UnknownModel:
            raise ModelCallFailed(
                f"agent {loaded.name!r} uses provider {loaded.provider!r}, which is not configured", partial=result
            ) from None
        result.steps = step + 1
        result.usage = result.usage + response.usage
        result.model_latency_ms += response.latency_ms
        if loaded.model_key not in result.models:
            result.models.append(loaded.model_key)
        text_out = redact_text(response.text or "")
        session.add_message(
            turn=turn,
            role=Message.Role.ASSISTANT,
            content=text_out,
            agent_id=loaded.id,
            model=loaded.model_key,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            latency_ms=response.latency_ms,
        )
        if not response.tool_calls:
            model_messages.append({"role": "assistant", "content": text_out})
            result.output, result.finish = text_out, "answer"
            break
        model_messages.append(
            {
                "role": "assistant",
                "content": text_out or None,
                "tool_calls": [c.as_openai() for c in response.tool_calls],
            }
        )
        stop_result, loaded = _run_tool_calls(session, loaded, response, turn, result, model_messages)
        if stop_result is not None:
            result.output = stop_result.content
            result.finish = "missing_function" if stop_result.outcome == "missing" else "stop_completion"
            break
    else:
        raise StepLimitExceeded(
            f"the agent did not finish turn {turn} within {loaded.max_steps} model steps "
            f"(raise the agent's max_steps or AGENTTEST_MAX_STEPS if it needs more)",
            partial=result,
        )
    return loaded


def _run_tool_calls(
    session: _Session,
    loaded: LoadedAgent,
    response: ModelResponse,
    turn: int,
    result: TurnResult,
    model_messages: list[dict[str, Any]],
) -> tuple[FunctionResult | None, LoadedAgent]:
    stop_result: FunctionResult | None = None
    for call in response.tool_calls:
        if stop_result is not None:
            # Every tool call needs an answer for the next request to be valid; after a stop nothing more runs.
            skipped = "[not executed: the turn stopped before this call]"
            _record_call(session, loaded, turn, call.id, call.name, None, call.arguments, "model")
            session.add_message(
                turn=turn,
                role=Message.Role.TOOL_RESULT,
                content=skipped,
                function_name=call.name,
                tool_call_id=call.id,
                agent_id=loaded.id,
                outcome="skipped",
            )
            model_messages.append({"role": "tool", "tool_call_id": call.id, "content": skipped})
            continue
        arguments, problem = _parse_arguments(call.arguments)
        _record_call(session, loaded, turn, call.id, call.name, arguments, call.arguments, "model")
        refusal = _refusal(call.name, loaded)
        if refusal is not None:
            # The model may correct itself, so the turn goes on; the step limit bounds a model that keeps trying.
            outcome = refusal
        elif problem:
            outcome = FunctionResult(
                content=f"Invalid arguments for {call.name}: {problem}. Send the arguments as a JSON object.",
                error=True,
                outcome="invalid",
            )
        else:
            context = FunctionContext(
                name=call.name,
                arguments=arguments,
                conversation_id=session.conversation.pk,
                agent_name=loaded.name,
                entry_agent_name=session.entry_agent.name,
                turn=turn,
                tool_call_id=call.id,
                state=dict(session.state),
                trigger="model",
                declaration=loaded.declaration(call.name),
            )
            outcome = executor.execute(call.name, context)
        if outcome.route_to:
            loaded, outcome = _route(session, loaded, outcome, result)
        content = redact_text(outcome.content)
        message = session.add_message(
            turn=turn,
            role=Message.Role.TOOL_RESULT,
            content=content,
            function_name=call.name,
            tool_call_id=call.id,
            agent_id=loaded.id,
            outcome=outcome.outcome,
        )
        model_messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        result.tool_calls.append(
            ToolCallRecord(
                name=call.name,
                arguments=arguments if not problem else call.arguments,
                result=content,
                outcome=outcome.outcome,
                agent=loaded.name,
                tool_call_id=call.id,
                error=outcome.error,
                stop=outcome.stop,
            )
        )
        if outcome.state_writes:
            changed = session.write_state(outcome.state_writes, message)
            _fire_rules(session, loaded, trigger="state_changed", turn=turn, changed=changed)
        if outcome.stop:
            stop_result = outcome
    return stop_result, loaded


def _route(
    session: _Session, loaded: LoadedAgent, outcome: FunctionResult, result: TurnResult
) -> tuple[LoadedAgent, FunctionResult]:
    target_name = outcome.route_to or ""
    entry = session.entry_agent
    allowed = {name for name, _ in loaded.sub_agents} | {entry.name}
    if entry.name == loaded.name:
        allowed |= {sub.name for sub in entry.sub_agents.all()}
    target = session.agent_named(target_name) if target_name in allowed else None
    if target is None:
        choices = ", ".join(sorted(allowed - {loaded.name})) or "none"
        return loaded, FunctionResult(
            content=f"Cannot route to {target_name!r}: not a sub-agent of {loaded.name}. Choose one of: {choices}.",
            error=True,
            outcome=outcome.outcome,
        )
    new_loaded = load_agent(target, session.conversation)
    result.agent_chain.append(new_loaded.name)
    return new_loaded, outcome


def _parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    if raw is None or raw.strip() == "":
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"the arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(value, dict):
        return {}, f"the arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def _record_call(
    session: _Session, loaded: LoadedAgent, turn: int, call_id: str, name: str, arguments: Any, raw: str, trigger: str
) -> Message:
    return session.add_message(
        turn=turn,
        role=Message.Role.TOOL_CALL,
        function_name=name or "",
        arguments=redact(arguments),
        raw_arguments=redact_text(raw or ""),
        tool_call_id=call_id,
        agent_id=loaded.id,
        trigger=trigger,
    )


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
    _check_seal(conversation, seal_key)
    with _claimed_session(conversation) as session:
        loaded = load_agent(conversation.current_agent or session.entry_agent, conversation)
        outcome = _invoke(
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


def _invoke(
    session: _Session,
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
    refusal = None if trigger == "direct" else _refusal(name, loaded)
    outcome = refusal or executor.execute(name, context)
    if not record:
        return outcome
    _record_call(session, loaded, turn, call_id, name, arguments, json.dumps(arguments), trigger)
    message = session.add_message(
        turn=turn,
        role=Message.Role.TOOL_RESULT,
        content=redact_text(outcome.content),
        function_name=name,
        tool_call_id=call_id,
        agent_id=loaded.id,
        outcome=outcome.outcome,
    )
    if outcome.state_writes:
        changed = session.write_state(outcome.state_writes, message)
        _fire_rules(session, loaded, trigger="state_changed", turn=turn, changed=changed, depth=depth + 1)
    return outcome


def _fire_rules(
    session: _Session,
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
        name = _rule_function_name(wanted, callable_names)
        if name is None:
            logger.warning("rule on agent %s names a function it cannot call: %r", loaded.name, wanted)
            name = wanted
        _invoke(
            session,
            loaded,
            name,
            dict(rule.get("arguments") or {}),
            turn=turn,
            trigger="rule",
            record=True,
            depth=depth,
        )


def _rule_function_name(wanted: str, callable_names: frozenset[str]) -> str | None:
    """A rule's function resolved ignoring case and surrounding space, among the names the agent can call only:
    a rule is written by hand, the model's calls are not resolved at all."""
    if wanted in callable_names:
        return wanted
    folded = wanted.strip().casefold()
    if not folded:
        return None
    return next((name for name in sorted(callable_names) if name.casefold() == folded), None)


def _refusal(name: str | None, loaded: LoadedAgent) -> FunctionResult | None:
    """The answer to a call of a function the agent does not declare (nothing runs), or None when it may call it.
    A blank name is the factory's to reject."""
    if not name or not str(name).strip() or name in loaded.callable_names():
        return None
    declared = [item["name"] for item in loaded.functions if isinstance(item.get("name"), str) and item["name"]]
    listed = f"it declares: {', '.join(declared)}" if declared else "it declares no functions"
    return FunctionResult(
        content=f"{name} is not available to this agent ({listed})", error=True, outcome="unavailable"
    )
