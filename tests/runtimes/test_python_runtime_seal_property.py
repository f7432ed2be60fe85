"""A plain-Python agent composed from random parts — tools with side effects, with their own openai client (sync and
async, chat completions and the Responses API), opening sockets by hand; a loop calling each through `tools.call` or
`IMPLEMENTATIONS[name]` directly, on the client agenttest hands it or on its own `OpenAI()` — run under test with random
mocks and allow-lists: zero side effects at the listener and in marker files, zero model requests bypassing the model
layer, and every case that would have caused one an Error or a Failed naming it (issue 33, Done when)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agenthost.models import Agent
from agenthost.seams import get_model
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.runtimes.conftest import markers
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, TurnPlan, execute_case, suite_plan
from tests.runtimes.sealed_parts import (
    HELPERS,
    MOCKED,
    bodies,
    body_call,
    case_choice,
    check_case,
    choices,
    effect_free,
    every_tool_once,
)

pytestmark = pytest.mark.django_db(transaction=True)

LOOP = '''
FUNCTIONS = {%(functions)s}
DIRECT = {%(direct)s}
TOOLS = [{"type": "function", "function": {"name": name, "description": "A tool.", "parameters": {
    "type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]}}} for name in FUNCTIONS]


def _model_client(client):
    if %(own_client)r:
        return OpenAI(api_key="sk-own", base_url=LISTENER + "/v1", max_retries=0)
    return client


def _result(tools, name, arguments, call_id):
    if name in DIRECT:
        return FUNCTIONS[name](**json.loads(arguments))
    return tools.call(FUNCTIONS[name], arguments, call_id=call_id)


def respond_chat(messages, client, tools):
    model = _model_client(client)
    conversation = [{"role": "system", "content": "Help."}, *messages]
    for _ in range(12):
        completion = model.chat.completions.create(model="gpt-4o-mini", messages=conversation, tools=TOOLS)
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        conversation.append({"role": "assistant", "content": message.content or "",
                             "tool_calls": [call.model_dump() for call in message.tool_calls]})
        for call in message.tool_calls:
            result = _result(tools, call.function.name, call.function.arguments, call.id)
            conversation.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return "I could not finish."


def respond_responses(messages, client, tools):
    model = _model_client(client)
    items = [{"role": message["role"], "content": message["content"]} for message in messages]
    offered = [{"type": "function", **tool["function"]} for tool in TOOLS]
    for _ in range(12):
        response = model.responses.create(model="gpt-4o-mini", instructions="Help.", input=items, tools=offered)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response.output_text
        items.extend(item.model_dump(exclude_none=True) for item in response.output)
        for call in calls:
            result = _result(tools, call.name, call.arguments, call.call_id)
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": result})
    return "I could not finish."
'''


def source(parts: list[tuple[str, bool]], own_client: bool) -> str:
    lines = [HELPERS]
    for number, (body, _direct) in enumerate(parts):
        lines.extend([f"def t{number}(what):", f"    return {body_call(body, f't{number}', in_async=False)}", ""])
    lines.append(LOOP % {
        "functions": ", ".join(f'"t{number}": t{number}' for number in range(len(parts))),
        "direct": ", ".join(f'"t{number}"' for number, (_, direct) in enumerate(parts) if direct) or "",
        "own_client": own_client,
    })
    return "\n".join(lines).replace("DIRECT = {}", "DIRECT = set()")


@settings(max_examples=20, deadline=None,
          suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(
    parts=st.lists(st.tuples(bodies(), st.booleans()), min_size=1, max_size=4),
    picks=st.lists(choices(), min_size=4, max_size=4),
    api=st.sampled_from(("chat", "responses")),
    own_client=st.booleans(),
)
# Reproduction 2 of the issue: a loop calling its own (mocked) refund.
@example(parts=[("effect", True)], picks=["mocked"] * 4, api="chat", own_client=False)
def test_it_lets_nothing_of_a_plain_loop_reach_beyond_agenttest_under_test(
    parts, picks, api, own_client, scripted_model, team_repo, tmp_path, listener
):
    module = source(parts, own_client)
    tools = {f"t{number}": (body, case_choice(body, pick))
             for number, ((body, _), pick) in enumerate(zip(parts, picks, strict=False))}
    agent = Agent.objects.create(
        name=f"desk-{uuid.uuid4().hex[:8]}", runtime="python", entry=f"{team_repo(module)}.bot:respond_{api}",
        provider="scripted", model="scripted",
        outside_effects={name: False for name, (body, _) in tools.items() if effect_free(body)},
    )
    issued: list[str] = []
    # Installing the rule forgets the requests of the examples before.
    scripted_model.respond_with(every_tool_once(issued))
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={}, turns=[TurnPlan("Go.")],
        assertions=[AssertionPlan("outputContains", {"text": "done"})],
        mocks=[MockSpec(name, MOCKED) for name, (_, choice) in tools.items() if choice == "mocked"],
    )
    suite = suite_plan(extra_allowed=(name for name, (_, choice) in tools.items() if choice == "allowed"))

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite)

    context = f"{module}\n{tools}\n{outcome.status}: {outcome.reason}"
    assert listener.received == [] and markers(tmp_path) == [], context
    check_case(
        status=outcome.status, reason=outcome.reason,
        answered=[(call["name"], call["outcome"], call["result"]) for call in outcome.tool_calls],
        tools=tools, issued=issued, outside={f"t{number}" for number, (_, direct) in enumerate(parts) if direct},
        host_port=listener.url.removeprefix("http://"), model_requests=scripted_model.requests, context=context,
    )
