"""The five control-flow functions. They steer the conversation and touch nothing outside it, which is why they are
the only functions a test run lets through to their real implementation.

What they give back is bounded: four of them answer with a fixed text or with the model's own arguments, which are
refused beyond agenthost.calls.MAX_RAW_ARGUMENTS_CHARS; util-instruct-execute_template's render stops at
agenthost.templating.MAX_RENDERED_CHARS (and MAX_RENDER_STEPS) before it builds more, answering a tool error."""

from __future__ import annotations

from typing import Any

from agenthost.functions import FunctionContext, FunctionError, FunctionResult, register_function
from agenthost.templating import TemplateRefused, render_template

CONTROL_FLOW_FUNCTIONS = (
    "route_to_agent",
    "response_to_user",
    "human_intervention_needed",
    "util-routing-fallback_to_router",
    "util-instruct-execute_template",
)

@register_function(
    name="route_to_agent",
    outside_effects=False,
    description="Hand this conversation turn to the sub-agent best suited to the user's request.",
    parameters={
        "type": "object",
        "properties": {
            "agent_name": {"type": "string", "description": "Name of the sub-agent to hand over to."},
            "reason": {"type": "string", "description": "Why this agent fits."},
        },
        "required": ["agent_name"],
    },
)
def route_to_agent(context: FunctionContext, agent_name: str, reason: str = "") -> FunctionResult:
    # The conversation loop checks the target is a sub-agent of the entry agent before switching.
    return FunctionResult(content=f"Routed to {agent_name}.", route_to=agent_name, outcome="executed")


@register_function(
    name="util-routing-fallback_to_router",
    outside_effects=False,
    description="Give the conversation back to the entry (router) agent when the request is outside your scope.",
    parameters={"type": "object", "properties": {"reason": {"type": "string"}}},
)
def fallback_to_router(context: FunctionContext, reason: str = "") -> FunctionResult:
    return FunctionResult(content="Returned to the router.", route_to=context.entry_agent_name)


@register_function(
    name="response_to_user",
    outside_effects=False,
    description="Send this exact reply to the user and end the turn.",
    parameters={"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]},
)
def response_to_user(context: FunctionContext, content: str) -> FunctionResult:
    return FunctionResult(content=content, stop=True)


@register_function(
    name="human_intervention_needed",
    outside_effects=False,
    description="Ask a human operator to take over this conversation; ends the turn.",
    parameters={"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]},
)
def human_intervention_needed(context: FunctionContext, reason: str) -> FunctionResult:
    return FunctionResult(
        content="A person from our team will take over this conversation shortly.",
        stop=True,
        state_writes={"human_intervention_needed": reason},
    )


@register_function(
    name="util-instruct-execute_template",
    outside_effects=False,
    description="Render a Django template with the conversation state and return the text.",
    parameters={
        "type": "object",
        "properties": {
            "template": {"type": "string", "description": "Django template text, e.g. 'Hello {{ name }}'."},
            "variables": {"type": "object", "description": "Extra variables on top of the conversation state."},
        },
        "required": ["template"],
    },
)
def execute_template(context: FunctionContext, template: str, variables: dict[str, Any] | None = None) -> str:
    # The instructions' engine: the state and the variables only, nothing loaded or shown of the process; the
    # render is bounded, so a template asking for gigabytes is answered with why, before anything is built.
    try:
        return render_template(template, {**context.state, **(variables or {})})
    except TemplateRefused as exc:
        raise FunctionError(f"the template {exc}") from None
