"""The second red-team pass: what a team's own code (a plugin's tool or provider kind) can do wrong must end as a
clear error of that call, never as a 500, a dead web worker or a conversation left claimed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agenthost.executor import register_executor_provider
from agenthost.functions import FunctionResult, register_function
from agenthost.llm.base import ModelProvider, ModelRequest, ModelResponse, ToolCall, Usage
from agenthost.llm.registry import register_provider_kind
from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start
from agenthost.testing.fixtures import scripted_provider_config
from agenthost.transcripts import transcript_load
from agenthost.turns import ModelCallFailed
from recording.segmenter import ModelUnavailable, segments_ask
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db

BASE_DIR = Path(__file__).resolve().parent.parent


@register_function(name="redteam-exits", description="Exits the process.", outside_effects=False)
def _exits(context: Any) -> str:
    raise SystemExit(3)


@register_function(name="redteam-bad-state", description="Writes a set into the state.", outside_effects=False)
def _bad_state(context: Any) -> FunctionResult:
    return FunctionResult(content="ok", state_writes={"tags": {1, 2}})


def _agent(name: str, functions: list[str], provider: str = "scripted", model: str = "scripted") -> Agent:
    return Agent.objects.create(
        name=name, instruction="Help.", provider=provider, model=model, functions=[{"name": n} for n in functions]
    )


@pytest.mark.parametrize("tool", ["redteam-exits", "redteam-bad-state"])
def test_it_answers_a_tool_that_exits_or_returns_unstorable_state_with_an_error_of_that_call(scripted_model, tool):
    agent = _agent("desk", [tool])
    scripted_model.play(Answer(tool_calls=[Call(tool, {})]), "done")
    conversation = conversation_start(agent=agent)

    turn = conversation_send(conversation=conversation, text="go")

    [call] = turn.tool_calls
    assert call.error and call.outcome == "executed" and f"{tool} failed" in call.result
    assert turn.output == "done"
    assert not conversation.state_changes.exists()


class _Broken(ModelProvider):
    """A plugin's provider kind that answers `answer` (or raises it)."""

    answer: Any = None

    def complete(self, request: ModelRequest) -> ModelResponse:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def broken_model(settings) -> Iterator[Callable[[Any], None]]:
    """Provider "brk" of a plugin kind whose answers the test sets; its model is brk:scripted."""
    register_provider_kind("broken-test-kind", _Broken)
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "brk": {**scripted_provider_config(), "kind": "broken-test-kind"},
    }

    def answer(value: Any) -> None:
        _Broken.answer = value

    yield answer
    _Broken.answer = None


BROKEN_ANSWERS = [
    None,
    KeyError("choices"),
    ModelResponse(text=123),  # type: ignore[arg-type]
    ModelResponse(text="hi", usage=None),  # type: ignore[arg-type]
    ModelResponse(text="hi", latency_ms=None),  # type: ignore[arg-type]
    ModelResponse(tool_calls=[{"name": "x"}]),  # type: ignore[list-item]
    ModelResponse(tool_calls=[ToolCall(id="1", name=5, arguments="{}")]),  # type: ignore[arg-type]
    ModelResponse(text="hi", usage=Usage(input_tokens=-1, output_tokens=0)),
]


@pytest.mark.parametrize("answer", BROKEN_ANSWERS, ids=repr)
def test_it_makes_a_broken_provider_answer_a_failed_model_call_and_frees_the_conversation(broken_model, answer):
    agent = _agent("broken", [], provider="brk", model="scripted")
    conversation = conversation_start(agent=agent)
    broken_model(answer)

    with pytest.raises(ModelCallFailed) as failed:
        conversation_send(conversation=conversation, text="hello")

    assert "brk:scripted failed at turn 0" in str(failed.value)
    broken_model(ModelResponse(text="fine now", usage=Usage(1, 1)))
    assert conversation_send(conversation=conversation, text="again").output == "fine now"


def test_it_answers_the_api_with_a_502_not_a_500_for_a_broken_provider(broken_model, admin_client_api):
    agent = _agent("broken", [], provider="brk", model="scripted")
    conversation = conversation_start(agent=agent, owner=None)
    broken_model(None)

    response = admin_client_api.post(f"/api/conversations/{conversation.pk}/messages/", {"text": "hi"}, format="json")

    assert response.status_code == 502, response.content


@pytest.mark.parametrize("answer", [None, KeyError("choices"), ModelResponse(text=123)], ids=repr)  # type: ignore[arg-type]
def test_it_makes_a_broken_extraction_provider_a_clear_failure(broken_model, scripted_model, answer):
    agent = _agent("desk", [])
    scripted_model.play("one", "two")
    conversation = conversation_start(agent=agent)
    conversation_send(conversation=conversation, text="first")
    conversation_send(conversation=conversation, text="second")
    broken_model(answer)

    with pytest.raises(ModelUnavailable, match="extraction model brk:scripted"):
        segments_ask(transcript=transcript_load(conversation=conversation), model_key="brk:scripted")


@pytest.mark.parametrize("entry", [{}, ["x"], 5, None])
def test_it_refuses_a_suite_allowing_something_that_is_no_name(admin_client_api, entry):
    agent = _agent("desk", ["lookup_order"])

    response = admin_client_api.post(
        "/api/suites/", {"name": "q", "agent": agent.name, "extra_allowed_functions": [entry]}, format="json"
    )

    assert response.status_code == 400, response.content
    assert "extra_allowed_functions" in response.content.decode()


@pytest.mark.parametrize(
    "path", ["/admin/cases/case/?suite={n}", "/admin/runs/run/?suite={n}", "/admin/agenthost/conversation/?agent={n}"]
)
@pytest.mark.parametrize("bad", ["99999999999999999999", "-99999999999999999999", "³"])
def test_it_answers_a_bad_relation_filter_in_the_admin_without_a_500(client, admin_user, path, bad):
    client.force_login(admin_user)

    response = client.get(path.format(n=bad))

    assert response.status_code in (200, 302)


def test_it_refuses_an_executor_provider_whose_name_is_not_text():
    class Provider:
        name, order = 5, 0

        def resolve(self, name, context):
            return None

    with pytest.raises(ValueError, match="name"):
        register_executor_provider(Provider())


def test_it_lets_no_folder_of_the_current_directory_shadow_agenttests_packages(tmp_path):
    # A team's repository may well have a `recording/` or `cases/` folder; the console script must still find
    # agenttest's own. (-I: no implicit current directory, as for an installed console script.)
    for name in ("recording", "cases"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    script = f"import sys; sys.path.append({str(BASE_DIR)!r}); from agenttest.cli import main; main(['check'])"
    done = subprocess.run(
        [sys.executable, "-I", "-c", script],
        cwd=tmp_path,
        env={"AGENTTEST_DEBUG": "1", "AGENTTEST_VAR_DIR": str(tmp_path / "var"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "System check identified no issues" in done.stdout
