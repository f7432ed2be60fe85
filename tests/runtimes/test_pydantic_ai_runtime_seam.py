"""The `pydantic-ai` runtime beyond one turn: the canary through its tool routing (and loudly dead without it), the
agent file's outside_effects, a conversation over several turns, structured output, and the case deadline."""

from __future__ import annotations

import contextlib
import json
import threading

import pytest
import yaml
from openai import AsyncOpenAI
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.runtimes.pydantic_ai import ModelRequestGate, PydanticAIRuntime
from agenthost.seams import get_model
from agenthost.services import conversation_send, conversation_start
from agenthost.transcripts import transcript_load
from agenttest.plugin import register_runtime, unregister_runtime
from cases.files import agent_file, files_apply
from cases.models import Suite
from recording.drafts import draft_document
from runs.models import Run
from tests.runtimes.conftest import execute_suite, markers, stub_provider, suite_finding_order
from tests.runtimes.harness import AssertionPlan, CasePlan, MockSpec, TurnPlan, execute_case, suite_plan
from tests.runtimes.shop import EMAIL, without_stub_ids
from tests.runtimes.test_pydantic_ai_runtime import SHOP_AGENT, _module

pytestmark = pytest.mark.django_db(transaction=True)


def _suite(package: str, *, runtime: str = "pydantic-ai", timeout: int = 20) -> Suite:
    agent = Agent.objects.create(name="shop", runtime=runtime, entry=f"{package}.bot:agent", provider="stub",
                                 model="gpt-4o-mini")
    return suite_finding_order(agent, timeout=timeout, expects_text=False)


class _UnwrappedRuntime(PydanticAIRuntime):
    """pydantic-ai as a version whose tool-execution point the runtime cannot reach would leave it: the agent's own
    toolsets, running the team's functions themselves."""

    name = "unrouted-pydantic-ai"

    def routed(self, turn, entry):
        return contextlib.nullcontext()


def test_it_errors_on_a_dead_canary_when_pydantic_ais_tool_routing_is_not_in_place(stub, team_repo, tmp_path):
    suite = _suite(team_repo(SHOP_AGENT), runtime="unrouted-pydantic-ai")
    register_runtime(_UnwrappedRuntime())
    try:
        result = execute_suite(suite)
    finally:
        unregister_runtime("unrouted-pydantic-ai")

    assert result.status == "error"
    assert "the mock seam is not live: the canary function answered" in result.reason
    assert "ran outside agenttest's seam" in result.reason
    assert stub.requests == [] and markers(tmp_path) == []


def test_it_passes_the_canary_through_pydantic_ais_routed_toolset_and_the_case_with_it(stub, team_repo):
    result = execute_suite(_suite(team_repo(SHOP_AGENT)))

    assert result.status == "passed", result.reason
    assert len(stub.requests) == 2


def test_it_lets_an_extra_allowed_tool_run_only_when_the_agent_file_declares_it_free_of_outside_effects(
    scripted_model, team_repo, tmp_path
):
    package = team_repo(SHOP_AGENT)
    agent = Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{package}.bot:agent",
                                 provider="scripted", model="scripted", outside_effects={"find_order": False})
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
        Answer(tool_calls=[Call("send_email", EMAIL)]),
        "never asked",
    )
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan("Where is order 1042? Email me.")], mocks=[],
        assertions=[AssertionPlan("toolCalled", {"function": "find_order"})],
    )
    suite = suite_plan(extra_allowed={"find_order", "send_email"})

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite)

    # find_order ran for real through pydantic-ai (declared effect-free); send_email, extra-allowed but undeclared,
    # stayed blocked and never ran.
    assert [(c["name"], c["outcome"]) for c in outcome.tool_calls] == [
        ("find_order", "allowed"), ("send_email", "blocked")
    ]
    assert json.loads(outcome.tool_calls[0]["result"]) == {"order_id": "1042", "status": "shipped"}
    assert outcome.tool_calls[1]["blocked_because"] == "outside-effects"
    assert markers(tmp_path) == []


def test_it_carries_the_conversation_into_pydantic_ais_next_turn(scripted_model, team_repo):
    agent = Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{team_repo(SHOP_AGENT)}.bot:agent",
                                 provider="scripted", model="scripted")
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]), "It has shipped.", "You are welcome.",
    )
    conversation = conversation_start(agent=agent)
    conversation_send(conversation=conversation, text="Where is order 1042?")

    second = conversation_send(conversation=conversation, text="Thanks!")

    assert second.output == "You are welcome."
    sent = scripted_model.requests[2].messages
    assert [message["role"] for message in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[2]["tool_calls"][0]["function"]["name"] == "find_order"
    assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == {"order_id": "1042"}
    assert json.loads(sent[3]["content"]) == {"order_id": "1042", "status": "shipped"}
    assert sent[3]["tool_call_id"] == sent[2]["tool_calls"][0]["id"]
    assert sent[4]["content"] == "It has shipped." and sent[5]["content"] == "Thanks!"


STRUCTURED_AGENT = '''
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput


class Verdict(BaseModel):
    order_id: str
    late: bool


agent = Agent(instructions="Say whether the order is late.", output_type=NativeOutput(Verdict))
tool_output = Agent(instructions="Say whether the order is late.", output_type=Verdict)
'''


def test_it_runs_an_agent_with_native_structured_output_and_answers_its_json(scripted_model, team_repo):
    agent = Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{team_repo(STRUCTURED_AGENT)}.bot:agent",
                                 provider="scripted", model="scripted")
    scripted_model.play('{"order_id": "1042", "late": true}')

    result = conversation_send(conversation=conversation_start(agent=agent), text="Is 1042 late?")

    assert json.loads(result.output) == {"order_id": "1042", "late": True}
    # pydantic-ai's own JSON schema for the output type, carried by the model layer.
    schema = scripted_model.requests[0].response_schema
    assert schema["name"] == "Verdict"
    assert sorted(schema["schema"]["properties"]) == ["late", "order_id"]


VERDICT_AGENT = '''
from pydantic import BaseModel
from pydantic_ai import Agent


class Verdict(BaseModel):
    order_id: str
    late: bool


agent = Agent(instructions="Look the order up, then say whether it is late.", output_type=Verdict)


@agent.tool_plain
def find_order(order_id: str) -> dict:
    """Find an order by its number."""
    return {"order_id": order_id, "status": "shipped"}
'''


def _verdict_answer(body: dict) -> Answer:
    """Look the order up; then answer through pydantic-ai's output tool, as a model forced to call a tool does — the
    first time in a turn leaving a field out, which pydantic-ai has the model retry."""
    messages = body["messages"]
    if messages[-1]["role"] == "user":
        return Answer(tool_calls=[Call("find_order", {"order_id": "1042"})])
    turn = messages[max(index for index, message in enumerate(messages) if message["role"] == "user"):]
    if "final_result" not in json.dumps(turn):
        return Answer(tool_calls=[Call("final_result", {"order_id": "1042"})])
    return Answer(tool_calls=[Call("final_result", {"order_id": "1042", "late": "transit" in json.dumps(messages)})])


def test_it_runs_pydantic_ais_output_tool_under_test_as_its_own_never_mocked_and_replays_it(stub, team_repo):
    stub.respond_with(_verdict_answer)
    suite = _suite(team_repo(VERDICT_AGENT))

    recorded = execute_suite(suite, Run.Mode.RECORD)

    assert recorded.status == "passed", recorded.reason
    assert json.loads(recorded.transcript[-1]["content"]) == {"order_id": "1042", "late": True}
    # The output tool is pydantic-ai's, not the team's: the harness saw only find_order (mocked), nothing blocked.
    assert [(call["name"], call["outcome"]) for call in recorded.tool_calls] == [("find_order", "mocked")]
    # The transcript holds the framework's run: each forced call with pydantic-ai's answer to it (a retry first).
    assert [(entry["role"], entry["function_name"], entry["outcome"]) for entry in recorded.transcript[-6:]] == [
        ("tool_call", "final_result", ""), ("tool_result", "final_result", "output"), ("assistant", "", ""),
        ("tool_call", "final_result", ""), ("tool_result", "final_result", "output"), ("assistant", "", ""),
    ]
    assert "late" in recorded.transcript[-5]["content"] and "Field required" in recorded.transcript[-5]["content"]
    assert recorded.transcript[-2]["content"] == "Final result processed."
    # tool_choice as pydantic-ai sets it, sent over HTTP: a tool call forced, since text is no output of this agent.
    assert [request["tool_choice"] for request in stub.requests] == ["required"] * 3
    stub.stop()

    replayed = execute_suite(suite, Run.Mode.REPLAY)

    assert replayed.status == "passed", replayed.reason
    shown = ("role", "function_name", "content", "outcome")
    assert [[entry[key] for key in shown] for entry in replayed.transcript] == [
        [entry[key] for key in shown] for entry in recorded.transcript
    ]


def test_it_sends_the_requests_pydantic_ai_sends_on_its_own_across_turns_ending_on_its_output_tool(stub, team_repo):
    stub.respond_with(_verdict_answer)
    package = team_repo(VERDICT_AGENT)
    agent = Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{package}.bot:agent", provider="stub",
                                 model="gpt-4o-mini")
    conversation = conversation_start(agent=agent)
    first = conversation_send(conversation=conversation, text="Is order 1042 late?")
    second = conversation_send(conversation=conversation, text="And now?")
    through_agenttest = list(stub.requests)

    module = _module(package)
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(
        openai_client=AsyncOpenAI(base_url=stub.base_url, api_key="unused")
    ))
    alone = module.agent.run_sync("Is order 1042 late?", model=model)
    alone_again = module.agent.run_sync("And now?", model=model, message_history=alone.all_messages())

    assert json.loads(first.output) == alone.output.model_dump()
    assert json.loads(second.output) == alone_again.output.model_dump()
    on_its_own = stub.requests[len(through_agenttest):]
    assert len(through_agenttest) == len(on_its_own) == 6
    # The second turn's history holds the first's output tool calls and pydantic-ai's answers to them (its retry, then
    # its acceptance), as its own does.
    assert [message["role"] for message in through_agenttest[3]["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "user",
    ]
    for mine, theirs in zip(without_stub_ids(through_agenttest), without_stub_ids(on_its_own), strict=True):
        assert theirs.pop("stream") is False
        assert sorted(mine) == sorted(theirs)
        for field in theirs:
            assert mine[field] == theirs[field], field
    # Recorded into a draft, the output tool gets no mock: a replay's pydantic-ai takes its call again itself.
    draft = draft_document(transcript_load(conversation=conversation), name="draft", source="recorded",
                           suite_agent="shop")
    assert [mock["function_name"] for mock in draft["mocks"]] == ["find_order", "find_order"]


DELEGATING_AGENT = '''
import os

from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

# pydantic-ai's agent delegation: a tool runs another agent, on a model of its own.
expert = Agent(OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=os.environ["EXPERT_URL"],
                                                                      api_key="unused")))
agent = Agent(instructions="Ask the expert when unsure.")


@agent.tool
async def ask_expert(ctx: RunContext[None], question: str) -> str:
    """Ask the delivery expert."""
    return (await expert.run(question, usage=ctx.usage)).output
'''


def test_it_answers_a_delegated_agents_model_through_agenttests_layer_under_test_but_not_in_chat(
    scripted_model, openai_stub, team_repo, monkeypatch
):
    monkeypatch.setenv("EXPERT_URL", openai_stub.base_url)
    openai_stub.respond_with(lambda body: "Strikes delay parcels by a day.")
    agent = Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{team_repo(DELEGATING_AGENT)}.bot:agent",
                                 provider="scripted", model="scripted", outside_effects={"ask_expert": False})
    question = Answer(tool_calls=[Call("ask_expert", {"question": "Do strikes delay parcels?"})])
    scripted_model.play(question, "Strikes may delay it (scripted).", "A day late.", question, "A day late.")
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan("Is my parcel late?")], mocks=[],
        assertions=[AssertionPlan("toolCalled", {"function": "ask_expert"})],
    )
    suite = suite_plan(extra_allowed={"ask_expert"})

    outcome = execute_case(plan=plan, model=get_model(scripted_model.key), suite=suite)

    # The tool ran (allowed, effect-free); the agent it delegates to was given agenttest's model, so its request went
    # through the layer (recorded, replayed, budgeted) and never reached its own server.
    assert outcome.status == "passed", outcome.reason
    assert [(c["name"], c["outcome"]) for c in outcome.tool_calls] == [("ask_expert", "allowed")]
    assert outcome.tool_calls[0]["result"] == "Strikes may delay it (scripted)."
    assert openai_stub.requests == []
    assert len(scripted_model.requests) == 3
    assert scripted_model.requests[1].messages[-1] == {"role": "user", "content": "Do strikes delay parcels?"}

    # In chat the team's code reaches its own model as it does in production.
    result = conversation_send(conversation=conversation_start(agent=agent), text="Is my parcel late?")
    assert result.output == "A day late."
    assert result.tool_calls[0].result == "Strikes delay parcels by a day."
    assert len(openai_stub.requests) == 1


def test_it_keeps_model_requests_refused_until_the_last_of_overlapping_cases_ends():
    gate = ModelRequestGate(True)
    first, second = gate.closed(), gate.closed()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    # Read from another thread (a case's own, or the team's), which none of this context reaches.
    seen: list[bool] = []
    thread = threading.Thread(target=lambda: seen.append(bool(gate)))
    thread.start()
    thread.join()
    assert seen == [False]
    second.__exit__(None, None, None)
    assert bool(gate) is True
    assert bool(ModelRequestGate(False)) is False, "what the team set stays set when no case runs"


def test_it_ends_pydantic_ais_loop_at_the_case_deadline_with_the_usage_of_the_calls_that_answered(
    openai_stub, settings, team_repo
):
    # The late answer comes only once the case has ended (or, if the case waited for it, after 30 s): whether the
    # case waited is what the model saw, not how long the case took.
    case_ended, answered = threading.Event(), threading.Event()

    def answer(body: dict) -> Answer | str:
        if body["messages"][-1]["role"] == "tool":
            case_ended.wait(30)
            answered.set()
            return "too late"
        return Answer(tool_calls=[Call("find_order", {"order_id": "1042"})])

    openai_stub.respond_with(answer)
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS,
                                    "stub": stub_provider(openai_stub.base_url, timeout=60.0)}
    # Long enough for a slow machine to import the team's agent and send both requests before the deadline.
    suite = _suite(team_repo(SHOP_AGENT), timeout=5)

    try:
        result = execute_suite(suite)
        assert not answered.is_set(), "the case waited for the model's late answer"
    finally:
        case_ended.set()

    assert (result.status, result.reason) == ("error", "the case timed out after 5 s")
    assert result.input_tokens > 0 and result.output_tokens > 0
    assert len(openai_stub.requests) == 2


def test_it_creates_a_pydantic_ai_agent_through_the_api_naming_the_teams_agent(
    admin_client_api, scripted_model, team_repo
):
    package = team_repo(SHOP_AGENT)

    response = admin_client_api.post("/api/agents/", {
        "name": "shop", "provider": "scripted", "model": "scripted", "runtime": "pydantic-ai",
        "entry": f"{package}.bot:agent", "outside_effects": {"find_order": False},
    }, format="json")

    assert response.status_code == 201, response.data
    assert (response.data["runtime"], response.data["entry"]) == ("pydantic-ai", f"{package}.bot:agent")


def test_it_refuses_through_the_api_an_entry_that_is_no_pydantic_ai_agent(admin_client_api, scripted_model, team_repo):
    package = team_repo(SHOP_AGENT + "\n\nclass NotAnAgent:\n    pass\n")

    response = admin_client_api.post("/api/agents/", {
        "name": "shop", "provider": "scripted", "model": "scripted", "runtime": "pydantic-ai",
        "entry": f"{package}.bot:NotAnAgent",
    }, format="json")

    assert response.status_code == 400
    assert "must be a pydantic_ai.Agent or a zero-argument function returning one" in str(response.data["entry"])
    assert not Agent.objects.filter(name="shop").exists()


def test_it_stops_the_turn_when_one_of_pydantic_ais_concurrent_tool_calls_is_blocked(
    scripted_model, team_repo, tmp_path
):
    agent = Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{team_repo(SHOP_AGENT)}.bot:agent",
                                 provider="scripted", model="scripted")
    # One answer, two calls: pydantic-ai runs them concurrently.
    scripted_model.play(
        Answer(tool_calls=[Call("send_email", EMAIL), Call("find_order", {"order_id": "1042"})]), "never asked",
    )
    plan = CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan("Where is order 1042? Email me.")], mocks=[MockSpec("find_order", '{"status": "lost"}')],
        assertions=[AssertionPlan("toolCalled", {"function": "find_order"})],
    )

    outcome = execute_case(
        plan=plan, model=get_model(scripted_model.key),
        suite=suite_plan(),
    )

    assert outcome.status == "failed", outcome.reason
    assert ("send_email", "blocked") in [(c["name"], c["outcome"]) for c in outcome.tool_calls]
    assert "send_email" in outcome.reason
    assert markers(tmp_path) == []
    assert len(scripted_model.requests) == 1


RETRYING_AGENT = '''
from pydantic_ai import Agent, ModelRetry

agent = Agent(instructions="Look orders up.")


@agent.tool_plain
def find_order(order_id: str) -> str:
    """Find an order by its number."""
    if not order_id.isdigit():
        raise ModelRetry("an order number is digits only")
    return "shipped"
'''


def test_it_hands_a_tools_model_retry_back_to_pydantic_ai_in_chat(scripted_model, team_repo):
    agent = Agent.objects.create(name="shop", runtime="pydantic-ai", entry=f"{team_repo(RETRYING_AGENT)}.bot:agent",
                                 provider="scripted", model="scripted")
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "#1042"})]),
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
        "It has shipped.",
    )

    result = conversation_send(conversation=conversation_start(agent=agent), text="Where is order #1042?")

    assert result.output == "It has shipped."
    assert [(call.name, call.outcome) for call in result.tool_calls] == [
        ("find_order", "executed"), ("find_order", "executed"),
    ]
    # pydantic-ai's own retry prompt (its chat model sends a tool's retry as {"error": …}), not a failed call's text.
    retried = scripted_model.requests[1].messages[-1]
    assert retried["role"] == "tool"
    assert json.loads(retried["content"]) == {"error": "an order number is digits only"}
    assert scripted_model.requests[2].messages[-1]["content"] == "shipped"


def test_it_applies_an_agent_file_naming_a_pydantic_ai_agent_and_runs_it(scripted_model, team_repo, tmp_path):
    package = team_repo(SHOP_AGENT)
    (tmp_path / "files" / "agents").mkdir(parents=True)
    document = {"name": "shop", "runtime": "pydantic-ai", "entry": f"{package}.bot:shop_agent",
                "model": "scripted:scripted", "outside_effects": {"find_order": False}}
    (tmp_path / "files" / "agents" / "shop.yaml").write_text(yaml.safe_dump(document))

    files_apply(directory=tmp_path / "files")

    agent = Agent.objects.get(name="shop")
    assert agent_file(agent, "") == document
    scripted_model.play("Hello from the shop.")
    result = conversation_send(conversation=conversation_start(agent=agent), text="Hi")
    assert result.output == "Hello from the shop."
    assert scripted_model.requests[0].messages[0]["content"].startswith("You are the shop's assistant.")
