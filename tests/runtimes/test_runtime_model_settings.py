"""Model settings the team's code sets (`max_tokens`, `top_p`, `tool_choice`, `parallel_tool_calls`, …) are carried
by agenttest's model layer: the request goes out as the framework built it, and record and replay key on them."""

from __future__ import annotations

import pytest
from agents import AsyncOpenAI, OpenAIResponsesModel, RunConfig, Runner

from agenthost.models import Agent
from agenthost.runtimes.base import AgentCodeFailed
from agenthost.services import conversation_send, conversation_start
from runs.models import Run
from tests.runtimes.conftest import execute_suite
from tests.runtimes.shop import without_stub_ids
from tests.runtimes.test_openai_agents_runtime import SHOP_AGENTS, _suite

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = (
    "model_settings=ModelSettings(temperature=0.3, top_p=0.9, max_tokens=300, parallel_tool_calls=False, "
    "frequency_penalty=0.1, presence_penalty=0.2)"
)
TUNED = SHOP_AGENTS.replace("model_settings=ModelSettings(temperature=0.3)", SETTINGS)
# As the SDK's default (Responses) model sends them.
SENT = {"top_p": 0.9, "max_output_tokens": 300, "parallel_tool_calls": False}


def test_it_sends_the_sdks_model_settings_as_the_sdk_sends_them_alone(stub, team_repo):
    package = team_repo(TUNED)
    agent = Agent.objects.create(name="shop", runtime="openai-agents", entry=f"{package}.bot:triage",
                                 provider="stub", model="gpt-4o-mini")

    under_agenttest = conversation_send(conversation=conversation_start(agent=agent), text="Where is order 1042?")
    through_agenttest = list(stub.requests)
    module = __import__(f"{package}.bot", fromlist=["triage"])
    model = OpenAIResponsesModel(model="gpt-4o-mini",
                                 openai_client=AsyncOpenAI(base_url=stub.base_url, api_key="unused"))
    Runner.run_sync(module.triage, "Where is order 1042?", run_config=RunConfig(model=model, tracing_disabled=True))

    assert under_agenttest.output.startswith("Your order:")
    on_its_own = stub.requests[len(through_agenttest):]
    assert len(through_agenttest) == len(on_its_own) == 2
    for mine, theirs in zip(without_stub_ids(through_agenttest), without_stub_ids(on_its_own), strict=True):
        assert mine == theirs
        assert {name: mine[name] for name in SENT} == SENT


def test_it_replays_keyed_on_the_settings_and_names_a_changed_one_stale(stub, team_repo):
    suite = _suite(team_repo(TUNED))
    recorded = execute_suite(suite, Run.Mode.RECORD)
    assert recorded.status == "passed", recorded.reason
    stub.stop()

    assert execute_suite(suite, Run.Mode.REPLAY).status == "passed"
    changed = team_repo(TUNED.replace("max_tokens=300", "max_tokens=50"))
    Agent.objects.filter(pk=suite.agent_id).update(entry=f"{changed}.bot:triage")
    stale = execute_suite(suite, Run.Mode.REPLAY)

    assert stale.status == "error"
    assert "First difference: settings.max_output_tokens: recorded 300 now 50" in stale.reason


PLAIN_BOT = '''
def respond(messages, client, tools):
    completion = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "system", "content": "Be brief."}, *messages],
        max_tokens=64, seed=7, tool_choice="none", tools=[{"type": "function", "function": {
            "name": "noop", "description": "Nothing.", "parameters": {"type": "object", "properties": {}}}}],
    )
    return completion.choices[0].message.content
'''


def test_it_sends_a_plain_loops_settings_and_still_refuses_one_it_does_not_carry_by_name(stub, team_repo):
    stub.respond_with(lambda body: "Hello.")
    agent = Agent.objects.create(name="bot", runtime="python", entry=f"{team_repo(PLAIN_BOT)}.bot:respond",
                                 provider="stub", model="gpt-4o-mini")

    assert conversation_send(conversation=conversation_start(agent=agent), text="Hi").output == "Hello."
    assert {name: stub.requests[0].get(name) for name in ("max_tokens", "seed", "tool_choice")} == {
        "max_tokens": 64, "seed": 7, "tool_choice": "none"}

    refused = Agent.objects.create(
        name="bot2", runtime="python", entry=f"{team_repo(PLAIN_BOT.replace('seed=7', 'n=2'))}.bot:respond",
        provider="stub", model="gpt-4o-mini",
    )
    with pytest.raises(AgentCodeFailed, match=r"does not carry n yet \(it carries model, messages, tools"):
        conversation_send(conversation=conversation_start(agent=refused), text="Hi")
    assert len(stub.requests) == 1
