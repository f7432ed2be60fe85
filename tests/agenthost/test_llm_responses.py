"""The model layer's Responses API (agenthost/llm/responses.py): the openai provider POSTs `/responses` over real HTTP
to the local stub, the answer keeps its output items; the scripted provider answers it; a provider kind that does
not speak it is never handed one."""

from __future__ import annotations

import pytest

from agenthost.llm import registry
from agenthost.llm.base import ModelRequest, ProviderError, api_problem
from agenthost.llm.scripted import Answer, Call, ScriptedProvider
from agenthost.testing.openai_stub import OpenAIStub
from tests.workers import WAIT_SECONDS

TOOL = {"type": "function", "name": "lookup_order", "description": "Look up an order.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}
ASKED = [{"role": "user", "content": "Where is order 1042?"}]


def _provider(settings, base_url: str, **model_options):
    settings.AGENTTEST_PROVIDERS = {"local": {
        "kind": "openai", "base_url": base_url, "api_key_env": "", "timeout": WAIT_SECONDS, "max_retries": 0,
        "models": [{"name": name, "input_price": 0.15, "output_price": 0.6, "label": "", **model_options}
                   for name in ("gpt-4o-mini", "o4-mini")],
    }}
    return registry.get_provider("local")


def _request(model: str = "gpt-4o-mini", **settings) -> ModelRequest:
    return ModelRequest(model=model, messages=list(ASKED), tools=[TOOL], api="responses",
                        settings={"instructions": "Look orders up.", **settings})


def test_it_posts_a_responses_request_as_built_and_reads_its_call_and_usage(settings):
    with OpenAIStub(strict_content=False) as stub:
        stub.queue(Answer(tool_calls=[Call("lookup_order", {"order_id": "1042"})]))
        response = _provider(settings, stub.base_url).complete(_request(tool_choice="auto"))

        assert stub.paths == ["/v1/responses"]
        assert stub.requests == [{"model": "gpt-4o-mini", "input": ASKED, "tools": [TOOL],
                                  "instructions": "Look orders up.", "tool_choice": "auto"}]
    assert [(call.id, call.name, call.arguments) for call in response.tool_calls] == [
        ("call_1", "lookup_order", '{"order_id": "1042"}')
    ]
    assert response.finish_reason == "tool_calls"
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert [item["type"] for item in response.output] == ["function_call"]


def test_it_keeps_a_reasoning_models_reasoning_item_and_tokens(settings):
    with OpenAIStub(strict_content=False) as stub:
        stub.queue("It has shipped.")
        response = _provider(settings, stub.base_url, reasoning_effort="low").complete(_request("o4-mini"))

        # The providers file's reasoning effort, as the Responses API spells it.
        assert stub.requests[0]["reasoning"] == {"effort": "low"}
    assert response.text == "It has shipped."
    assert [item["type"] for item in response.output] == ["reasoning", "message"]
    assert response.usage.reasoning_tokens > 0


def test_it_says_which_limit_cut_a_responses_answer_off(settings):
    with OpenAIStub(strict_content=False) as stub:
        stub.queue(Answer(text="It has", finish_reason="length"))
        response = _provider(settings, stub.base_url, max_completion_tokens=5).complete(_request())

        assert stub.requests[0]["max_output_tokens"] == 5
    assert response.finish_reason == "length"
    assert "max_completion_tokens (set to 5)" in response.length_limit


def test_it_names_the_parameter_a_model_refuses_on_the_responses_api(settings):
    with OpenAIStub(strict_content=False) as stub:
        provider = _provider(settings, stub.base_url)
        with pytest.raises(ProviderError, match=r"HTTP 400 .*'temperature' is not supported") as refused:
            provider.complete(ModelRequest(model="o4-mini", messages=list(ASKED), temperature=0.2, api="responses"))
    assert refused.value.code == "http_400"


def test_it_answers_a_responses_request_from_a_script_by_its_last_message_in_the_chat_format():
    ScriptedProvider.install("responses-script", lambda request: (
        "Done: " + request.chat_messages()[-1]["content"] if request.chat_messages()[-1]["role"] == "tool"
        else Answer(tool_calls=[Call("lookup_order", {"order_id": "1042"})])
    ))
    provider = ScriptedProvider("responses-script", {})
    answered = [*ASKED, {"type": "function_call", "call_id": "call_1", "name": "lookup_order", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "shipped"}]
    try:
        response = provider.complete(ModelRequest(model="m", messages=answered, api="responses"))
    finally:
        ScriptedProvider.reset("responses-script")

    assert response.text == "Done: shipped"


def test_it_hands_a_responses_request_to_no_provider_kind_that_does_not_speak_it():
    class ChatOnly(ScriptedProvider):
        kind = "chat-only"
        speaks_responses = False

    assert "answers chat completions only" in api_problem(ChatOnly("plain", {}), _request())
    assert api_problem(ChatOnly("plain", {}), ModelRequest(model="m", messages=list(ASKED))) == ""
    assert api_problem(ScriptedProvider("scripted", {}), _request()) == ""
