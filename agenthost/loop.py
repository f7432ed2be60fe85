"""The agent loop of one turn: load agent (hooks run) → model with tools → each tool call through the function-executor
factory → results back → until a final answer, a stop-completion or the step limit.

An agent calls only what it declares plus the control-flow functions: any other name the model names is answered
"not available" without asking the factory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agenthost import executor
from agenthost.calls import parse_arguments, record_call, refusal_for, storable_raw_arguments, stored_name
from agenthost.functions import FunctionContext, FunctionResult
from agenthost.history import history_as_model_messages
from agenthost.llm.base import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    api_problem,
    response_problem,
    unfinished_answer,
)
from agenthost.llm.registry import UnknownModel, get_provider
from agenthost.loading import LoadedAgent
from agenthost.models import Message
from agenthost.redaction import redact_text
from agenthost.routing import route
from agenthost.rules import fire_rules
from agenthost.runtimes.guard import ProviderRanTools, provider_call
from agenthost.seal import exempt
from agenthost.session import ConversationSession, claim_lost
from agenthost.templating import TemplateRefused, render_template
from agenthost.turns import InvalidInput, ModelCallFailed, StepLimitExceeded, ToolCallRecord, TurnResult

logger = logging.getLogger(__name__)


def _render_instruction(agent: LoadedAgent, state: dict[str, Any]) -> str:
    # Any failure (a forbidden tag in an instruction saved before they were refused, a filter raising on a state
    # value) is the agent's configuration at fault: a clear turn error, never a server error.
    try:
        return render_template(agent.instruction, state)
    except TemplateRefused as exc:
        raise InvalidInput(f"the instruction of agent {agent.name!r} is not a valid template: it {exc}") from None


def turn_run(
    session: ConversationSession, loaded: LoadedAgent, turn: int, text: str, result: TurnResult
) -> LoadedAgent:
    """The agent loop for one turn; returns the agent that ended it."""
    conversation = session.conversation
    entry_name = session.entry_agent.name
    session.add_message(turn=turn, role=Message.Role.USER, content=redact_text(text), agent_id=loaded.id)
    model_messages = history_as_model_messages(session.transcript())
    # Each step's calls (name and arguments), to tell a looping agent from one that needs more steps.
    step_calls: list[tuple[tuple[str, str], ...]] = []

    for step in range(loaded.max_steps):
        # Each step renews the turn's claim; a turn that lost it (it ran past AGENTTEST_REQUEST_TIMEOUT and another
        # turn took over) stops here, before asking the model anything more.
        session.hold_claim(partial=result)
        request = ModelRequest(
            model=loaded.model,
            messages=[{"role": "system", "content": _render_instruction(loaded, session.state)}, *model_messages],
            tools=loaded.tools(entry_agent_name=entry_name),
            temperature=loaded.temperature,
            metadata={"conversation_id": conversation.pk, "turn": turn, "step": step, "agent": loaded.name},
        )
        response = call_model(session, loaded, request, turn=turn, step=step, result=result)
        text_out = redact_text(response.text or "")
        if not response.tool_calls:
            model_messages.append({"role": "assistant", "content": text_out})
            result.output, result.finish = text_out, "answer"
            break
        # An empty content is sent as "", never null or left out (see history.py).
        model_messages.append(
            {"role": "assistant", "content": text_out, "tool_calls": [c.as_openai() for c in response.tool_calls]}
        )
        step_calls.append(tuple((call.name, call.arguments) for call in response.tool_calls))
        # The next step is the routed-to agent's, if a call routed; this response's calls were all its caller's.
        stop_result, loaded = _run_tool_calls(session, loaded, response, turn, result, model_messages)
        if stop_result is not None:
            result.output = stop_result.content
            result.finish = "missing_function" if stop_result.outcome == "missing" else "stop_completion"
            break
    else:
        repeated = repetition(step_calls)
        raise StepLimitExceeded(
            f"the agent did not finish turn {turn} within {loaded.max_steps} model steps"
            + (f": {repeated}" if repeated else "")
            + " (raise the agent's max_steps or AGENTTEST_MAX_STEPS if it needs more)",
            partial=result,
        )
    return loaded


def call_model(
    session: ConversationSession,
    loaded: LoadedAgent,
    request: ModelRequest,
    *,
    turn: int,
    step: int,
    result: TurnResult,
) -> ModelResponse:
    """One model call of a turn through the agent's provider (so the harness's model override, record/replay,
    throttles, budgets and deadlines apply), its answer checked, counted and written as an assistant message. Every
    runtime's model calls come here, agenttest's loop and a team's own alike."""
    if session.case is not None:
        # Checked before anything is sent, in live, record and replay mode alike.
        session.case.check_request(request, result, stored_name)
    try:
        with provider_call(loaded.provider), exempt():
            provider = get_provider(loaded.provider)
            if unsupported := api_problem(provider, request):
                raise ProviderError(unsupported, code="unsupported_api", provider=loaded.provider, model=request.model)
            response = provider.complete(request)
    except ProviderRanTools as exc:
        raise ModelCallFailed(
            f"the model {loaded.model_named} failed at turn {turn} step {step}: {exc}",
            provider_code="provider_ran_tools",
            partial=result,
        ) from None
    except ProviderError as exc:
        raise ModelCallFailed(
            f"the model {loaded.model_named} failed at turn {turn} step {step}: {redact_text(str(exc))}",
            provider_code=exc.code,
            partial=result,
        ) from exc
    except UnknownModel:
        raise ModelCallFailed(
            f"agent {loaded.name!r} uses provider {loaded.provider!r}, which is not configured", partial=result
        ) from None
    except Exception as exc:  # a plugin's provider kind may raise anything; the turn must still end cleanly
        logger.exception("provider %s raised", loaded.provider)
        raise ModelCallFailed(
            f"the model {loaded.model_named} failed at turn {turn} step {step}: the provider raised "
            f"{type(exc).__name__}: {redact_text(str(exc))[:500]}",
            provider_code="provider_crash",
            partial=result,
        ) from exc
    problem = response_problem(response)
    if problem:
        raise ModelCallFailed(
            f"the model {loaded.model_named} failed at turn {turn} step {step}: the provider answered something "
            f"that is not a model response ({problem})",
            provider_code="bad_response",
            partial=result,
        )
    result.steps = step + 1
    result.usage = result.usage + response.usage
    result.model_latency_ms += response.latency_ms
    # result.models keeps the provider that carried the call (a hook may have swapped one in, and a harness checks
    # it did); the message names the model as its user configured it, the one the run or the chat shows.
    if loaded.model_key not in result.models:
        result.models.append(loaded.model_key)
    session.add_message(
        turn=turn,
        role=Message.Role.ASSISTANT,
        content=redact_text(response.text or ""),
        agent_id=loaded.id,
        agent_name=stored_name(loaded.framework_agent),
        model=loaded.model_named,
        input_tokens=_storable_count(response.usage.input_tokens),
        output_tokens=_storable_count(response.usage.output_tokens),
        latency_ms=response.latency_ms,
    )
    unfinished = unfinished_answer(response)
    if unfinished:
        raise ModelCallFailed(
            f"the model {loaded.model_named} failed at turn {turn} step {step}: {redact_text(unfinished)}",
            provider_code="refusal" if response.refusal else str(response.finish_reason),
            partial=result,
        )
    return response


def repetition(steps: list[tuple[tuple[str, str], ...]]) -> str:
    """How a looping agent repeated itself: the shortest cycle of identical steps (same calls, same arguments) that
    the last steps repeat, e.g. "the agent repeated route_to_agent → fallback_to_router 5 times"; "" when the steps
    do not repeat."""
    best: tuple[int, int] | None = None
    for period in range(1, len(steps) // 2 + 1):
        cycle = steps[-period:]
        times = 1
        while (times + 1) * period <= len(steps):
            end = len(steps) - times * period
            if steps[end - period : end] != cycle:
                break
            times += 1
        if times >= 2 and (best is None or times * period > best[0] * best[1]):
            best = (times, period)
    if best is None:
        return ""
    times, period = best
    names = " → ".join(", ".join(name for name, _ in step) for step in steps[-period:])
    return f"the agent repeated {names} {times} times"


def _storable_count(value: object) -> int:
    # A provider's token count goes into a PositiveIntegerField: one out of its range must not fail the flush.
    return min(max(value, 0), 2**31 - 1) if isinstance(value, int) and not isinstance(value, bool) else 0


def _run_tool_calls(
    session: ConversationSession,
    loaded: LoadedAgent,
    response: ModelResponse,
    turn: int,
    result: TurnResult,
    model_messages: list[dict[str, Any]],
) -> tuple[FunctionResult | None, LoadedAgent]:
    """Answer every call of one model response; returns the stop result (if a call ended the turn) and the agent
    for the next step.

    Every call of the response is the call of the agent that produced it (`caller`): checked against what that agent
    declares and run as it, whatever an earlier call of the same response did. A route takes effect for the next
    model step only — a router that routes and, in the same response, calls its sub-agent's side-effecting tool
    gets that call answered "not available"."""
    caller = loaded
    next_agent = loaded
    stop_result: FunctionResult | None = None
    skipped = ""
    lost = False
    for call in response.tool_calls:
        if not skipped and stop_result is not None:
            skipped = "[not executed: the turn stopped before this call]"
        if not skipped and not session.renew_claim():
            # The claim was lost (see turn_run): nothing more runs, and the turn stops after this response.
            lost = True
            skipped = "[not executed: this turn lost its claim on the conversation to another turn]"
        if skipped:
            # Every tool call needs an answer for the next request to be valid; nothing more runs.
            record_call(session, caller, turn, call.id, call.name, None, call.arguments, "model")
            session.add_message(
                turn=turn,
                role=Message.Role.TOOL_RESULT,
                content=skipped,
                function_name=stored_name(call.name),
                tool_call_id=stored_name(call.id),
                agent_id=caller.id,
                outcome="skipped",
            )
            model_messages.append({"role": "tool", "tool_call_id": call.id, "content": skipped})
            continue
        outcome, arguments, problem = answer_call(
            session, caller, turn, call_id=call.id, name=call.name, raw_arguments=call.arguments
        )
        if outcome.route_to:
            if next_agent is not caller:
                outcome = FunctionResult(
                    content=f"Not routed to {outcome.route_to!r}: this response already handed the turn to "
                    f"{next_agent.name}.",
                    error=True,
                    outcome=outcome.outcome,
                )
            else:
                next_agent, outcome = route(session, caller, outcome, result)
        content = record_result(
            session, caller, turn, call_id=call.id, name=call.name, raw_arguments=call.arguments,
            arguments=arguments, problem=problem, outcome=outcome, result=result,
        )
        model_messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        if outcome.stop:
            stop_result = outcome
    if lost:
        raise claim_lost(partial=result)
    return stop_result, next_agent


def answer_call(
    session: ConversationSession,
    caller: LoadedAgent,
    turn: int,
    *,
    call_id: str,
    name: str,
    raw_arguments: Any,
    declared_only: bool = True,
    declaration: dict[str, Any] | None = None,
    implementation: Callable[..., Any] | None = None,
) -> tuple[FunctionResult, dict[str, Any], str | None]:
    """One tool call the agent's model asked for, through the function-executor factory: its call message recorded,
    the call answered (refused when the agent does not declare the name and `declared_only`, "invalid" when its
    arguments cannot be used). Returns the outcome, the parsed arguments and their problem, if any.

    A runtime running the team's own loop passes the tool's declaration as its framework describes it and the team's
    `implementation`, which the factory runs only when no executor provider (the harness's mocks) took the call."""
    # Checked before anything runs or is recorded: arguments no tool may see and no database can store make the call
    # "invalid"; the raw text is stored made storable.
    arguments, problem = parse_arguments(raw_arguments)
    record_call(session, caller, turn, call_id, name, arguments, raw_arguments, "model")
    refusal = refusal_for(name, caller) if declared_only else None
    if refusal is not None:
        # The model may correct itself, so the turn goes on; the step limit bounds a model that keeps trying.
        return refusal, arguments, problem
    if problem:
        outcome = FunctionResult(
            content=f"Invalid arguments for {name}: {problem}. Send the arguments as a JSON object.",
            error=True,
            outcome="invalid",
        )
        return outcome, arguments, problem
    context = FunctionContext(
        name=name,
        arguments=arguments,
        conversation_id=session.conversation.pk,
        agent_name=caller.name,
        entry_agent_name=session.entry_agent.name,
        turn=turn,
        tool_call_id=call_id,
        state=dict(session.state),
        trigger="model",
        declaration=declaration if declaration is not None else caller.declaration(name),
        implementation=implementation,
    )
    return executor.execute(name, context), arguments, problem


def record_result(
    session: ConversationSession,
    caller: LoadedAgent,
    turn: int,
    *,
    call_id: str,
    name: str,
    raw_arguments: Any,
    arguments: dict[str, Any],
    problem: str | None,
    outcome: FunctionResult,
    result: TurnResult,
) -> str:
    """Write a tool call's result (message, the turn's call record, its state writes and the rules they fire);
    returns the content as the model is to read it."""
    content = redact_text(outcome.content)
    message = session.add_message(
        turn=turn,
        role=Message.Role.TOOL_RESULT,
        content=content,
        function_name=stored_name(name),
        tool_call_id=stored_name(call_id),
        agent_id=caller.id,
        agent_name=stored_name(caller.framework_agent),
        outcome=outcome.outcome,
    )
    result.tool_calls.append(
        ToolCallRecord(
            # What the API answers and a run stores: made storable like the messages.
            name=redact_text(name or ""),
            arguments=arguments if not problem else storable_raw_arguments(raw_arguments),
            result=content,
            outcome=outcome.outcome,
            agent=caller.name,
            tool_call_id=stored_name(call_id),
            error=outcome.error,
            stop=outcome.stop,
        )
    )
    if outcome.state_writes:
        changed = session.write_state(outcome.state_writes, message)
        fire_rules(session, caller, trigger="state_changed", turn=turn, changed=changed)
    return content
