"""A chat with a runtime agent records into a draft case whose mocks are the real tool results, as for a native
agent (recording/drafts.py); enabled, the draft runs green against the same team code, and nothing outside is
touched again. Extraction cuts such a chat into drafts the same way."""

from __future__ import annotations

import pytest

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message
from agenthost.services import conversation_send, conversation_start
from cases.models import Case, Suite
from cases.services import case_create
from cases.validation.problems import CaseValidationError
from recording.services import extraction_create, recording_create
from runs.models import CaseResult
from runs.services import run_create, run_execute
from tests.recording.test_segmenter import segments_answer
from tests.runtimes.conftest import markers
from tests.runtimes.shop import EMAIL, QUESTION
from tests.runtimes.test_langgraph_runtime import SHOP_GRAPH
from tests.runtimes.test_openai_agents_runtime import SHOP_AGENTS

pytestmark = pytest.mark.django_db(transaction=True)


def _python_script(scripted_model) -> None:
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
        Answer(tool_calls=[Call("send_email", EMAIL)]),
        "Order 1042 has shipped; I emailed you.",
    )


def _sdk_script(scripted_model) -> None:
    scripted_model.play(
        Answer(tool_calls=[Call("find_order", {"order_id": "1042"})]),
        Answer(tool_calls=[Call("transfer_to_billing", {})]),
        Answer(tool_calls=[Call("send_email", EMAIL)]),
        "Order 1042 has shipped; I emailed you.",
    )


def _record_and_run(agent: Agent, script, scripted_model, root) -> tuple[Case, CaseResult, dict[str, str]]:
    script(scripted_model)
    conversation = conversation_start(agent=agent)
    assert conversation_send(conversation=conversation, text=QUESTION).output.startswith("Order 1042 has shipped")
    assert len(markers(root)) == 1, "in chat the team's real tool ran"
    real = {message.function_name: message.content
            for message in conversation.messages.filter(role=Message.Role.TOOL_RESULT)
            if message.function_name != "transfer_to_billing"}

    (case,) = recording_create(conversation=conversation).cases
    case.enabled = True
    case.save(update_fields=["enabled"])
    script(scripted_model)
    run = run_execute(run_id=run_create(suite=case.suite, model_keys=[scripted_model.key]).pk)
    return case, CaseResult.objects.get(run=run, case=case), real


@pytest.mark.parametrize("runtime", ["python", "openai-agents", "langgraph"])
def test_it_records_a_runtime_chat_into_a_draft_of_real_results_that_runs_green(
    runtime, scripted_model, team_repo, tmp_path
):
    if runtime == "python":
        agent = Agent.objects.create(name="shop", runtime="python", entry=f"{team_repo()}.bot:respond",
                                     provider="scripted", model="scripted")
        script = _python_script
    elif runtime == "langgraph":
        agent = Agent.objects.create(name="shop", runtime="langgraph", entry=f"{team_repo(SHOP_GRAPH)}.bot:graph",
                                     provider="scripted", model="scripted")
        script = _python_script
    else:
        agent = Agent.objects.create(name="shop", runtime="openai-agents", entry=f"{team_repo(SHOP_AGENTS)}.bot:triage",
                                     provider="scripted", model="scripted")
        script = _sdk_script

    case, result, real = _record_and_run(agent, script, scripted_model, tmp_path)

    # The mocks are the real results, verbatim (the team's own rendering of a dict: JSON, or the SDK's str()).
    assert {mock.function_name: mock.result for mock in case.mocks.all()} == real
    assert real["send_email"] == "sent" and "shipped" in real["find_order"]
    assert result.status == "passed", result.reason
    assert [(call["name"], call["outcome"]) for call in result.tool_calls if call["name"] != "transfer_to_billing"] \
        == [("find_order", "mocked"), ("send_email", "mocked")]
    assert len(markers(tmp_path)) == 1, "the draft's run answered send_email with its recorded result"


def test_it_extracts_drafts_from_a_runtime_chat(scripted_model, team_repo, tmp_path):
    agent = Agent.objects.create(name="shop", runtime="openai-agents", entry=f"{team_repo(SHOP_AGENTS)}.bot:triage",
                                 provider="scripted", model="scripted")
    _sdk_script(scripted_model)
    conversation = conversation_start(agent=agent)
    conversation_send(conversation=conversation, text=QUESTION)
    scripted_model.play("Thanks!")
    conversation_send(conversation=conversation, text="Thank you.")
    scripted_model.play(segments_answer(("Order status and email", 0, 0), ("Thanks", 1, 1)))

    drafts = extraction_create(conversation=conversation, model_key=scripted_model.key)

    assert [case.name for case in drafts.cases] == ["Order status and email", "Thanks"]
    first = drafts.cases[0]
    assert sorted(first.mocks.values_list("function_name", flat=True)) == ["find_order", "send_email"]
    assert list(drafts.cases[1].mocks.values_list("function_name", flat=True)) == []


def test_it_accepts_a_case_mocking_the_team_codes_tools_by_name_and_refuses_an_unknown_one(team_repo):
    searcher = SHOP_AGENTS + "\nfrom agents import WebSearchTool\n\nsearcher = triage.clone(tools=[find_order, " \
        "WebSearchTool()])\n"
    agent = Agent.objects.create(name="shop", runtime="openai-agents", entry=f"{team_repo(searcher)}.bot:searcher",
                                 provider="scripted", model="scripted")
    suite = Suite.objects.create(name="shop", agent=agent)

    def document(*names: str) -> dict:
        return {"name": "-".join(names), "turns": [{"user_message": QUESTION}],
                "mocks": [{"function_name": name, "result": "ok"} for name in names],
                "assertions": [{"type": "toolCalled", "params": {"function": names[0]}}]}

    # The SDK agent's function tool, its hosted tool, and a hand-off agent's tool (send_email, of billing).
    case = case_create(suite=suite, document=document("find_order", "web_search", "send_email"))
    assert sorted(case.mocks.values_list("function_name", flat=True)) == ["find_order", "send_email", "web_search"]
    with pytest.raises(CaseValidationError, match="'find_ordr' is not a function the agent under test can call.*"
                                                  "did you mean 'find_order'"):
        case_create(suite=suite, document=document("find_ordr"))
