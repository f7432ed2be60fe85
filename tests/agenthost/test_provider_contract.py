"""One contract every provider kind keeps: the conversation loop relies on nothing else.

Each kind is arranged to give a text answer, a tool call or a failure in its own way (the stub's queue, the script),
and then asked the same questions. A plugin's kind keeps it too: the demo's simulated models are held to this class in
tests/demo/test_provider_contract.py.
"""

from __future__ import annotations

import json

import pytest

from agenthost.llm import registry
from agenthost.llm.base import ModelProvider, ModelRequest, ModelResponse, ProviderError, response_problem
from agenthost.llm.scripted import Answer, Call, Fail
from agenthost.testing.openai_stub import HttpError
from tests.workers import WAIT_SECONDS

LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up an order by its number: status and items.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
}
QUESTION = [{"role": "user", "content": "Where is my order 1042?"}]


class Arrangement:
    """How to make one provider kind answer in text, call a tool, or fail."""

    def __init__(self, provider: ModelProvider, model: str, text, tool_call, failure) -> None:
        self.provider, self.model = provider, model
        self.text, self.tool_call, self.failure = text, tool_call, failure

    def ask(self, messages, tools=(), model=None, **fields) -> ModelResponse:
        request = ModelRequest(model=model or self.model, messages=messages, tools=list(tools), **fields)
        return self.provider.complete(request)


@pytest.fixture(params=["openai", "scripted"])
def arranged(request, settings, monkeypatch):
    if request.param == "openai":
        stub = request.getfixturevalue("openai_stub")
        monkeypatch.setenv("CONTRACT_API_KEY", "sk-contract-0123456789")
        settings.AGENTTEST_PROVIDERS = {
            "stubbed": {
                "kind": "openai", "base_url": stub.base_url, "api_key_env": "CONTRACT_API_KEY", "timeout": WAIT_SECONDS,
                "max_retries": 1, "models": [{"name": "gpt-4o-mini"}],
            }
        }

        def text():
            stub.queue("Order 1042 has shipped.")
            return QUESTION, ()

        def tool_call():
            stub.queue(Answer(tool_calls=[Call("lookup_order", {"order_id": "1042"})]))
            return QUESTION, [LOOKUP_TOOL]

        def failure():
            stub.queue(HttpError(400, "bad request"))
            return "gpt-4o-mini"

        return Arrangement(registry.get_provider("stubbed"), "gpt-4o-mini", text, tool_call, failure)

    scripted = request.getfixturevalue("scripted_model")

    def text():
        scripted.play("Order 1042 has shipped.")
        return QUESTION, ()

    def tool_call():
        scripted.play(Answer(tool_calls=[Call("lookup_order", {"order_id": "1042"})]))
        return QUESTION, [LOOKUP_TOOL]

    def failure():
        scripted.play(Fail(code="rate_limited", message="slow down"))
        return scripted.model

    return Arrangement(registry.get_provider(scripted.provider_name), scripted.model, text, tool_call, failure)


class TestProviderContract:
    def test_it_answers_in_text(self, arranged):
        messages, tools = arranged.text()

        answer = arranged.ask(messages, tools)

        assert isinstance(answer, ModelResponse)
        assert answer.text.strip()
        assert answer.tool_calls == []
        assert answer.finish_reason == "stop"
        assert answer.usage.input_tokens >= 0 and answer.usage.output_tokens >= 0
        assert answer.latency_ms >= 0
        assert answer.model == arranged.model

    def test_it_parses_tool_calls_with_ids(self, arranged):
        messages, tools = arranged.tool_call()

        answer = arranged.ask(messages, tools)

        assert [(call.name, json.loads(call.arguments)) for call in answer.tool_calls] == [
            ("lookup_order", {"order_id": "1042"})
        ]
        assert answer.tool_calls[0].id
        assert answer.finish_reason == "tool_calls"
        assert answer.usage.total_tokens >= 0 and answer.latency_ms >= 0

    def test_it_surfaces_failures_as_provider_errors(self, arranged):
        model = arranged.failure()

        with pytest.raises(ProviderError) as caught:
            arranged.ask(QUESTION, model=model)

        assert caught.value.code
        assert caught.value.provider == arranged.provider.name
        assert caught.value.model == model
        assert str(caught.value)

    def test_it_reports_usage_details_as_parts_of_the_totals(self, arranged):
        messages, tools = arranged.text()

        answer = arranged.ask(messages, tools)

        assert response_problem(answer) == ""
        assert 0 <= answer.usage.cached_input_tokens <= answer.usage.input_tokens
        assert 0 <= answer.usage.reasoning_tokens <= answer.usage.output_tokens
        assert answer.refusal == ""

    def test_it_answers_a_request_that_leaves_temperature_to_the_model_and_asks_for_a_schema(self, arranged):
        messages, tools = arranged.text()
        schema = {"name": "reply", "schema": {"type": "object", "properties": {"text": {"type": "string"}},
                                              "required": ["text"], "additionalProperties": False}}

        answer = arranged.ask(messages, tools, temperature=None, response_schema=schema)

        assert isinstance(answer, ModelResponse) and answer.text.strip()
