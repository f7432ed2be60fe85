"""The providers file's per-model request options, Azure OpenAI, script files and server errors: what `check` says
about each, and what reaches the endpoint."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agenthost.llm import registry
from agenthost.llm.base import ModelRequest, ProviderError
from agenthost.llm.openai_provider import readable_server_message
from agenthost.llm.scripted import ScriptedProvider
from agenttest.checks import check_agenttest_settings
from common.provider_config import load_providers
from tests.workers import WAIT_SECONDS


def write(tmp_path, text, name="providers.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture
def built_in_kinds(monkeypatch):
    # Only the host's own kinds, whatever plugins (the demo's included) this process loaded.
    kinds = {kind: registry.PROVIDER_KINDS[kind] for kind in ("openai", "scripted")}
    monkeypatch.setattr(registry, "PROVIDER_KINDS", kinds)


def check_errors(settings, path) -> list[str]:
    settings.AGENTTEST_PROVIDERS = load_providers(path)
    return [message.msg for message in check_agenttest_settings() if message.id == "agenttest.E001"]


MODEL = (
    '[providers.local]\nkind = "openai"\nbase_url = "http://x/v1"\n[[providers.local.models]]\nname = "gpt-5-mini"\n'
)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("reasoning = 'high'\n",
         "provider 'local': models[0] (model 'gpt-5-mini'): unknown field 'reasoning' (allowed: accepts_temperature, "),
        ("reasoning_effort = 'extreme'\n",
         "models[0] (model 'gpt-5-mini'): field 'reasoning_effort' must be one of none, minimal, low"),
        ("max_completion_tokens = 0\n",
         "models[0] (model 'gpt-5-mini'): field 'max_completion_tokens' must be a whole number ≥ 1, got 0"),
        ("accepts_temperature = 'no'\n",
         "models[0] (model 'gpt-5-mini'): field 'accepts_temperature' must be true or false, got 'no'"),
        ("structured_output = 1\n", "field 'structured_output' must be true or false, got 1"),
        ("extra_body = 'x'\n", "models[0] (model 'gpt-5-mini'): field 'extra_body' must be a table"),
        ("headers_env = { X-Org = 'sk-not-a-name' }\n",
         "field 'headers_env': header 'X-Org' must name the environment variable that holds its value"),
        ("headers_env = { X-Org = \"ORG_ID\\n\" }\n",
         "field 'headers_env': header 'X-Org' must name the environment variable that holds its value"),
    ],
)
def test_it_reports_a_bad_model_option_naming_the_provider_and_the_model(
    tmp_path, settings, built_in_kinds, extra, expected
):
    errors = check_errors(settings, write(tmp_path, MODEL + extra))

    assert any(expected in error for error in errors), errors


def test_it_refuses_a_negative_cached_input_price_when_reading_the_file(tmp_path):
    with pytest.raises(ImproperlyConfigured) as caught:
        load_providers(write(tmp_path, MODEL + "cached_input_price = -1\n"))

    assert "models[0] (model 'gpt-5-mini'): field 'cached_input_price' must be a number ≥ 0" in str(caught.value)


def test_it_accepts_every_documented_option(tmp_path, settings, built_in_kinds):
    text = (
        '[providers.azure]\nkind = "openai"\nbase_url = "https://res.openai.azure.com"\napi_key_env = "AZ_KEY"\n'
        'api_version = "2024-10-21"\nheaders_env = { X-Team = "TEAM_HEADER" }\n'
        '[[providers.azure.models]]\nname = "gpt-5-mini"\naccepts_temperature = false\nreasoning_effort = "low"\n'
        'max_completion_tokens = 4096\nstructured_output = true\nextra_body = { service_tier = "flex" }\n'
        'headers_env = { X-Org = "ORG_HEADER" }\ninput_price = 0.25\ncached_input_price = 0.025\n'
        "output_price = 2.0\nreasoning_price = 2.0\n"
    )

    assert check_errors(settings, write(tmp_path, text)) == []


def test_it_wants_the_azure_endpoint_and_key_when_an_api_version_is_set(tmp_path, settings, built_in_kinds):
    text = '[providers.az]\nkind = "openai"\napi_version = "2024-10-21"\n[[providers.az.models]]\nname = "m"\n'

    errors = check_errors(settings, write(tmp_path, text))

    assert any("field 'base_url' must be the Azure resource's endpoint" in error for error in errors), errors
    assert any("field 'api_key_env' is required for Azure OpenAI" in error for error in errors), errors


def test_it_calls_an_azure_deployment_with_its_api_version_and_key(openai_stub, settings, monkeypatch):
    monkeypatch.setenv("AZ_KEY", "az-secret-0123456789")
    host = openai_stub.base_url.removesuffix("/v1")
    settings.AGENTTEST_PROVIDERS = {"az": {
        "kind": "openai", "base_url": host, "api_key_env": "AZ_KEY", "api_version": "2024-10-21",
        "timeout": WAIT_SECONDS, "max_retries": 0, "models": [{"name": "support-gpt4o"}],
    }}
    openai_stub.queue("Hello from Azure.")

    response = registry.get_provider("az").complete(
        ModelRequest(model="support-gpt4o", messages=[{"role": "user", "content": "hi"}])
    )

    assert response.text == "Hello from Azure."
    assert openai_stub.paths == ["/openai/deployments/support-gpt4o/chat/completions?api-version=2024-10-21"]
    assert openai_stub.headers[0]["api-key"] == "az-secret-0123456789"


def test_it_fails_a_call_whose_header_variable_is_unset_naming_it(openai_stub, settings, monkeypatch):
    monkeypatch.delenv("ORG_HEADER", raising=False)
    settings.AGENTTEST_PROVIDERS = {"local": {
        "kind": "openai", "base_url": openai_stub.base_url, "api_key_env": "", "timeout": WAIT_SECONDS,
        "max_retries": 0, "models": [{"name": "gpt-4o-mini", "headers_env": {"X-Org": "ORG_HEADER"}}],
    }}

    with pytest.raises(ProviderError) as caught:
        registry.get_provider("local").complete(ModelRequest(model="gpt-4o-mini", messages=[]))

    assert "the environment variable ORG_HEADER (header 'X-Org') is empty or not set" in str(caught.value)
    assert openai_stub.requests == []


# --- Script files -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (None, "field 'script': script file {path}: the file does not exist"),
        ("{not json", "field 'script': script file {path}: not valid JSON"),
        ('{"answers": []}', 'expected {{"answers": [...]}} with at least one entry'),
        ('[{"txt": "hi"}]', "answers[0]: unknown field(s) txt (allowed: delay, error, finish_reason, hang, "),
        ('[{"text": "x", "delay": -1}]', "answers[0]: field 'delay' must be a number of seconds ≥ 0, got -1"),
        ('[{"tool_calls": [{"arguments": {}}]}]', "answers[0]: tool_calls[0] must be an object with a non-empty name"),
        ('[{"error": {"code": 5}}]', "answers[0]: field 'error' must be an object with the strings code and message"),
        ('[{"when": "", "text": "x"}]', "answers[0]: field 'when' must be the non-empty text"),
    ],
)
def test_it_reports_what_is_wrong_with_a_script_file(tmp_path, settings, built_in_kinds, script, expected):
    path = tmp_path / "script.json"
    if script is not None:
        path.write_text(script)
    text = f'[providers.ci]\nkind = "scripted"\nscript = "{path}"\n[[providers.ci.models]]\nname = "m"\n'

    errors = check_errors(settings, write(tmp_path, text))

    assert any(expected.format(path=path) in error for error in errors), errors


def test_it_plays_ordered_entries_and_rules_and_logs_each_request(tmp_path, settings):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"answers": [
        {"when": "refund", "refusal": "I can't issue refunds."},
        "first",
        {"text": "cut", "finish_reason": "length"},
    ]}))
    log = tmp_path / "requests.jsonl"
    settings.AGENTTEST_PROVIDERS = {"ci": {
        "kind": "scripted", "script": str(script), "requests_log": str(log), "models": [{"name": "m"}],
    }}
    ScriptedProvider.reset("ci")
    provider = registry.get_provider("ci")

    def ask(text):
        return provider.complete(ModelRequest(model="m", messages=[{"role": "user", "content": text}]))

    answers = [ask("hello"), ask("a refund please"), ask("again"), ask("refund now")]
    with pytest.raises(ProviderError) as exhausted:
        ask("more")

    assert [(a.text, a.refusal, a.finish_reason) for a in answers] == [
        ("first", "", "stop"), ("", "I can't issue refunds.", "stop"), ("cut", "", "length"),
        ("", "I can't issue refunds.", "stop"),
    ]
    assert exhausted.value.code == "script_exhausted" and "has no answer left" in str(exhausted.value)
    logged = [json.loads(line)["messages"][0]["content"] for line in log.read_text().splitlines()]
    assert logged == ["hello", "a refund please", "again", "refund now", "more"]
    ScriptedProvider.reset("ci")


# --- Server errors ----------------------------------------------------------------------------------------------


@hypothesis_settings(max_examples=200, deadline=None)
@given(st.one_of(
    st.text(), st.none(), st.integers(),
    st.dictionaries(st.sampled_from(["message", "detail", "param"]), st.one_of(
        st.text(), st.lists(st.dictionaries(st.sampled_from(["loc", "msg"]), st.one_of(
            st.text(max_size=30), st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=4)))))),
))
def test_it_makes_any_server_error_a_readable_bounded_message(body):
    message = readable_server_message(body)

    lines = message.splitlines()
    assert message and lines and len(lines) <= 10
    assert len(lines[0]) <= 300 and all(len(line) <= 202 for line in lines[1:])
