"""The agent loop of one turn: load agent (hooks run) → model with tools → each tool call through the function-executor
factory → results back → until a final answer, a stop-completion or the step limit.

An agent calls only what it declares plus the control-flow functions: any other name the model names is answered
"not available" without asking the factory.
"""

from __future__ import annotations

from typing import Any

from agenthost import executor
from agenthost.calls import parse_arguments, record_call, refusal_for
from agenthost.functions import FunctionContext, FunctionResult
from agenthost.history import history_as_model_messages
from agenthost.llm.base import ModelRequest, ModelResponse, ProviderError
from agenthost.llm.registry import UnknownModel, get_provider
from agenthost.loading import LoadedAgent
from agenthost.models import Message
from agenthost.redaction import redact_text
from agenthost.routing import route
from agenthost.rules import fire_rules
from agenthost.session import ConversationSession
from agenthost.templating import TemplateRefused, render_template
from agenthost.turns import InvalidInput, ModelCallFailed, StepLimitExceeded, ToolCallRecord, TurnResult


def _render_instruction(agent: LoadedAgent, state: dict[str, Any]) -> str:
    # Any failure (a forbidden tag in an instruction saved before they were refused, a filter raising on a state
    # value) is the agent's configuration at fault: a clear turn error, never a server error.
    try:
        return render_template(agent.instruction, state)
    except TemplateRefused as exc:
        raise InvalidInput(f"the instruction of agent {agent.name!r} cannot be used: it {exc}") from None


def turn_run(
    session: ConversationSession, loaded: LoadedAgent, turn: int, text: str, result: TurnResult
) -> LoadedAgent:
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
    session: ConversationSession,
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
            record_call(session, loaded, turn, call.id, call.name, None, call.arguments, "model")
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
        arguments, problem = parse_arguments(call.arguments)
        record_call(session, loaded, turn, call.id, call.name, arguments, call.arguments, "model")
        refusal = refusal_for(call.name, loaded)
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
            loaded, outcome = route(session, loaded, outcome, result)
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
            fire_rules(session, loaded, trigger="state_changed", turn=turn, changed=changed)
        if outcome.stop:
            stop_result = outcome
    return stop_result, loaded
