"""The settings a runtime's request carries reach the endpoint as given and key the recording: whatever the team's
code sets, the request sent holds exactly those values, and two requests differing only in a setting never share a
recording."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agenthost.llm.base import CHAT_SETTINGS, ModelRequest
from agenthost.llm.openai_provider import OpenAIProvider
from tests.runtimes.harness import normalise_request, request_hash

VALUES = {
    "max_tokens": st.integers(1, 4096), "max_completion_tokens": st.integers(1, 4096),
    "top_p": st.floats(0, 1), "frequency_penalty": st.floats(-2, 2), "presence_penalty": st.floats(-2, 2),
    "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "function": {"name": "f"}}]),
    "parallel_tool_calls": st.booleans(), "seed": st.integers(0, 2**31), "stop": st.lists(st.text(max_size=5),
                                                                                          max_size=3),
    "reasoning_effort": st.sampled_from(["low", "medium", "high"]), "verbosity": st.sampled_from(["low", "high"]),
    "logprobs": st.booleans(), "top_logprobs": st.integers(0, 20), "store": st.booleans(),
}
SETTINGS = st.fixed_dictionaries({}, optional=VALUES)
PROVIDER = OpenAIProvider("stub", {
    "kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "",
    "models": [{"name": "m", "reasoning_effort": "minimal", "max_completion_tokens": 77}],
})


def _request(settings: dict) -> ModelRequest:
    return ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}], settings=settings,
                        metadata={"conversation_id": 1, "runtime": "python"})


def test_every_carried_setting_has_a_strategy():
    assert sorted(VALUES) == sorted(CHAT_SETTINGS)


@given(SETTINGS)
def test_it_sends_the_settings_as_given_and_fills_only_unset_ones_from_the_providers_file(settings):
    params = PROVIDER.request_params(_request(settings))

    assert {name: params[name] for name in settings} == settings
    assert params.get("reasoning_effort") == settings.get("reasoning_effort", "minimal")
    if "max_tokens" in settings or "max_completion_tokens" in settings:
        assert params.get("max_completion_tokens") == settings.get("max_completion_tokens")
    else:
        assert params["max_completion_tokens"] == 77


@given(SETTINGS, SETTINGS)
def test_it_keys_a_recording_on_the_settings(first, second):
    keys = [request_hash(normalise_request(_request(settings), "stub:m")) for settings in (first, second)]

    # The same settings as sent (JSON: 0.0 and -0.0 are different requests) share a recording; any other never.
    assert (keys[0] == keys[1]) == (json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True))
    # A request without settings keeps the key it had before settings existed.
    assert "settings" not in normalise_request(_request({}), "stub:m")
