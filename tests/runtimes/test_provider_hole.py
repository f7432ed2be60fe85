"""The hole the issue found: an OpenAI Agents SDK run wrapped as a plugin model provider executed its own tool (a
real email) during a test run that Passed. A model provider is only a model: such a run is now refused before the
framework runs anything, in tests and in chat alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from agents import Agent as SdkAgent
from agents import RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agenthost.models import Agent
from agenthost.seams import ConversationError, get_model
from agenthost.services import conversation_send, conversation_start
from agenttest.plugin import ModelProvider, ModelRequest, ModelResponse, register_provider_kind
from tests.runtimes.harness import AssertionPlan, CasePlan, TurnPlan, execute_case, suite_plan

# The last test runs agenttest in a process of its own with no DATABASE_URL: the same on either pass, run once.
in_the_database = pytest.mark.django_db(transaction=True)


@function_tool
def send_email(to: str, body: str) -> str:
    """Email the customer."""
    folder = Path(os.environ["SHOP_MARKERS"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "email").write_text(f"{to}: {body}")
    return "sent"


class AgentsSdkAsProvider(ModelProvider):
    """What the issue's user wrote: the team's Agents SDK agent run inside a provider's complete()."""

    kind = "agents-sdk-wrapper"

    def complete(self, request: ModelRequest) -> ModelResponse:
        model = ScriptedModel([
            [function_call("send_email", {"to": "ana@example.com", "body": "Refunded."}, call_id="call_1")],
            [assistant_message("I emailed you: your refund is on its way.")],
        ])
        agent = SdkAgent(name="support", instructions="Help the customer.", tools=[send_email])
        result = Runner.run_sync(agent, request.messages[-1]["content"], run_config=RunConfig(model=model))
        return ModelResponse(text=result.final_output)


@pytest.fixture
def wrapped(settings, tmp_path, monkeypatch) -> Agent:
    monkeypatch.setenv("SHOP_MARKERS", str(tmp_path / "markers"))
    register_provider_kind(AgentsSdkAsProvider.kind, AgentsSdkAsProvider)
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "wrapped": {"kind": AgentsSdkAsProvider.kind, "base_url": "", "api_key_env": "", "timeout": 10.0,
                    "max_retries": 0, "models": [{"name": "support", "input_price": 0.0, "output_price": 0.0}]},
    }
    return Agent.objects.create(name="support", instruction="Help.", provider="wrapped", model="support")


@in_the_database
def test_it_refuses_a_test_run_whose_provider_runs_a_framework_that_executes_tools(wrapped, tmp_path):
    plan = CasePlan(
        id=1, name="refund", type="agent", entry_agent=wrapped, history=[], initial_state={},
        turns=[TurnPlan("Please refund order 1042")], mocks=[],
        assertions=[AssertionPlan("outputContains", {"text": "refund"})],
    )

    execution = execute_case(
        plan=plan, model=get_model("wrapped:support"),
        suite=suite_plan(),
    )

    assert not (tmp_path / "markers").exists(), "the framework sent the email for real"
    assert execution.status == "error"
    assert ("the model wrapped:support failed at turn 0 step 0: its provider is only a model provider, yet it started "
            "an OpenAI Agents SDK run") in execution.reason
    assert "bring a framework's agent in as a runtime" in execution.reason


@in_the_database
def test_it_refuses_the_same_provider_in_chat_before_the_framework_runs_anything(wrapped, tmp_path):
    with pytest.raises(ConversationError, match="outside agenttest's seam: refused before it ran anything"):
        conversation_send(conversation=conversation_start(agent=wrapped), text="Please refund order 1042")

    assert not (tmp_path / "markers").exists()


def test_it_guards_the_sdk_from_its_first_import_without_importing_it_at_start_up(tmp_path):
    # A process that never touches the SDK does not pay its import; one that imports it gets the guard before any
    # of its code can run a workflow.
    program = (
        "import sys, django; django.setup(); print('agents' in sys.modules)\n"
        "from agents.tracing import get_trace_provider\n"
        "print([type(p).__name__ for p in get_trace_provider()._multi_processor._processors])\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agenttest.settings", "AGENTTEST_DEBUG": "1",
           "AGENTTEST_VAR_DIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("DATABASE_URL", None)

    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=240)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False", "['BatchTraceProcessor', 'AgentsSdkGuard']"]
