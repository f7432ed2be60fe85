"""Provider configuration (the TOML file and its defaults) and the registry of configured providers and models."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ImproperlyConfigured

from agenthost.llm import registry
from agenthost.llm.base import ModelProvider, ModelRequest, ModelResponse, ProviderError, Usage
from agenthost.llm.scripted import ScriptedProvider
from agenttest.checks import check_agenttest_settings
from common.provider_config import load_providers, validate_providers

GOOD_FILE = """
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8001/v1"
api_key_env = "LOCAL_API_KEY"
timeout = 30
max_retries = 1

[[providers.local.models]]
name = "gpt-4o-mini"
input_price = 0.15
output_price = 0.60
label = "Local mini"

[[providers.local.models]]
name = "llama3:8b"

[providers.offline]
kind = "scripted"
requests_log = "requests.jsonl"

[[providers.offline.models]]
name = "scripted"
"""


def write(tmp_path, text):
    path = tmp_path / "providers.toml"
    path.write_text(text)
    return str(path)


def test_it_defaults_to_no_model_without_the_demo_or_an_openai_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    assert load_providers("") == {}


def test_it_adds_openai_to_the_defaults_when_its_key_is_set_without_copying_the_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-default-config-secret-value")

    providers = load_providers("")

    openai = providers["openai"]
    assert openai["base_url"] == "https://api.openai.com/v1"
    assert openai["api_key_env"] == "OPENAI_API_KEY"
    assert [(m["name"], m["input_price"], m["output_price"]) for m in openai["models"]] == [
        ("gpt-4o-mini", 0.15, 0.60),
        ("gpt-4o", 2.50, 10.00),
    ]
    assert "sk-default-config-secret-value" not in repr(providers)


def test_it_reads_a_provider_file_into_the_normalised_shape(tmp_path):
    providers = load_providers(write(tmp_path, GOOD_FILE))

    assert providers["local"] == {
        "kind": "openai",
        "base_url": "http://127.0.0.1:8001/v1",
        "api_key_env": "LOCAL_API_KEY",
        "timeout": 30.0,
        "max_retries": 1,
        "models": [
            {"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.60, "label": "Local mini"},
            {"name": "llama3:8b", "input_price": 0.0, "output_price": 0.0, "label": ""},
        ],
    }
    assert providers["offline"]["requests_log"] == "requests.jsonl"
    assert validate_providers(providers) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[providers.local\nkind = ", "not valid TOML"),
        ('[providers.local]\nkind = "openai"\nbase_url = "http://x/v1"\n', "provider 'local': field 'models'"),
        (
            '[providers.local]\nkind = "openai"\nbase_url = "http://x/v1"\n'
            '[[providers.local.models]]\nname = "m"\ninput_price = -1\n',
            "provider 'local': models[0] (model 'm'): field 'input_price' must be a number ≥ 0",
        ),
        (
            '[providers.local]\nkind = 3\n[[providers.local.models]]\nname = "m"\n',
            "provider 'local': field 'kind' must name a provider kind (e.g. 'openai'), got 3",
        ),
        (
            '[providers.local]\nkind = "openai"\nbase_url = "ftp://x"\n[[providers.local.models]]\nname = "m"\n',
            "provider 'local': field 'base_url'",
        ),
        (
            '[providers.local]\nkind = "openai"\nbase_url = "http://x/v1"\nmax_retries = -2\n'
            '[[providers.local.models]]\nname = "m"\n',
            "provider 'local': field 'max_retries'",
        ),
        (
            '[providers.local]\nkind = "openai"\nmax_concurrency = 0\n[[providers.local.models]]\nname = "m"\n',
            "provider 'local': field 'max_concurrency' must be a whole number ≥ 1, got 0",
        ),
        (
            '[providers.local]\nkind = "openai"\nbase_url = "http://x/v1"\n'
            '[[providers.local.models]]\nname = "m"\n[[providers.local.models]]\nname = "m"\n',
            "provider 'local': models[1] (model 'm'): model 'm' is listed twice",
        ),
        ('title = "mine"\n', "unknown top-level key 'title'"),
    ],
)
def test_it_rejects_a_bad_file_naming_the_file_provider_and_field(tmp_path, text, expected):
    path = write(tmp_path, text)

    with pytest.raises(ImproperlyConfigured) as caught:
        load_providers(path)

    assert path in str(caught.value)
    assert expected in str(caught.value)


def test_it_reads_a_kind_that_no_plugin_has_registered_yet_keeping_its_own_fields(tmp_path):
    # The file is read at settings time, before any plugin could register its kind.
    path = write(
        tmp_path,
        '[providers.acme]\nkind = "acme-llm"\nregion = "eu"\n[[providers.acme.models]]\nname = "a1"\n'
        "context_window = 8000\n",
    )

    providers = load_providers(path)

    assert providers["acme"]["kind"] == "acme-llm"
    assert providers["acme"]["region"] == "eu"
    assert providers["acme"]["models"] == [
        {"context_window": 8000, "name": "a1", "input_price": 0.0, "output_price": 0.0, "label": ""}
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[providers.local]\nkind = "openai"\nbase_url = "http://x/v1"\nretries = 3\n'
            '[[providers.local.models]]\nname = "m"\n',
            "provider 'local': unknown field 'retries' (allowed for kind 'openai': api_key_env, api_version, base_url, "
            "headers_env, kind, max_concurrency, max_retries, models, timeout)",
        ),
        (
            '[providers.local]\nkind = "openai"\nbase_url = "http://x/v1"\n'
            '[[providers.local.models]]\nname = "m"\ncontext = 8000\n',
            "provider 'local': models[0] (model 'm'): unknown field 'context'",
        ),
        (
            '[providers.local]\nkind = "grpc"\n[[providers.local.models]]\nname = "m"\n',
            "provider 'local': field 'kind' must be one of openai, scripted, got 'grpc'",
        ),
        (
            '[providers.openai]\nkind = "openai"\n[[providers.openai.models]]\nname = "gpt-4o"\n',
            "provider 'openai': field 'api_key_env' is required",
        ),
        (
            '[providers.slow]\nkind = "scripted"\nrequests_log = "/nonexistent/requests.jsonl"\n'
            '[[providers.slow.models]]\nname = "m"\n',
            "provider 'slow': field 'requests_log': the folder of /nonexistent/requests.jsonl does not exist",
        ),
        (
            '[providers.slow]\nkind = "openai"\nbase_url = "http://x/v1"\n'
            '[[providers.slow.models]]\nname = "m"\nmax_completion_tokens = 0\n',
            "provider 'slow': models[0] (model 'm'): field 'max_completion_tokens' must be a whole number ≥ 1, got 0",
        ),
    ],
)
def test_it_reports_what_a_kind_refuses_as_a_system_check_error(tmp_path, settings, monkeypatch, text, expected):
    # Only the host's kinds, whatever plugins other tests of this process loaded.
    built_in = {kind: registry.PROVIDER_KINDS[kind] for kind in ("openai", "scripted")}
    monkeypatch.setattr(registry, "PROVIDER_KINDS", built_in)
    settings.AGENTTEST_PROVIDERS = load_providers(write(tmp_path, text))

    errors = [message for message in check_agenttest_settings() if message.id == "agenttest.E001"]

    assert any(expected in error.msg for error in errors), [error.msg for error in errors]


def test_it_refuses_to_build_a_provider_whose_kind_refuses_its_options(settings, tmp_path):
    log = tmp_path / "nowhere" / "requests.jsonl"
    settings.AGENTTEST_PROVIDERS = {"slow": {"kind": "scripted", "requests_log": str(log), "models": [{"name": "m"}]}}

    with pytest.raises(registry.ProviderMisconfigured) as caught:
        registry.get_provider("slow")

    # Both: a conversation ends with it like any failed model call, and it is a configuration error.
    assert isinstance(caught.value, ProviderError) and isinstance(caught.value, ImproperlyConfigured)
    assert str(caught.value) == (
        f"provider 'slow' is misconfigured: provider 'slow': field 'requests_log': the folder of {log} does not exist"
    )


def test_it_refuses_another_class_under_a_registered_kind_and_accepts_the_same_one_again(monkeypatch):
    class Impostor(ModelProvider):
        kind = "scripted"

        def complete(self, request: ModelRequest) -> ModelResponse:
            return ModelResponse(text="not the scripted model")

    monkeypatch.setattr(registry, "PROVIDER_KINDS", dict(registry.PROVIDER_KINDS))

    with pytest.raises(ValueError, match="'scripted' is already registered by agenthost.llm.scripted.ScriptedProvider"):
        registry.register_provider_kind("scripted", Impostor)
    registry.register_provider_kind("scripted", ScriptedProvider)

    assert registry.provider_kinds()["scripted"] is ScriptedProvider


def test_it_rejects_a_missing_file(tmp_path):
    path = str(tmp_path / "nowhere.toml")

    with pytest.raises(ImproperlyConfigured, match="does not exist") as caught:
        load_providers(path)

    assert path in str(caught.value)


def test_it_refuses_a_key_written_in_the_file_without_repeating_it(tmp_path):
    path = write(
        tmp_path,
        '[providers.local]\nkind = "openai"\nbase_url = "http://x/v1"\napi_key = "sk-written-in-the-file-123"\n'
        '[[providers.local.models]]\nname = "m"\n',
    )

    with pytest.raises(ImproperlyConfigured) as caught:
        load_providers(path)

    assert "provider 'local': field 'api_key' is not allowed" in str(caught.value)
    assert "api_key_env" in str(caught.value)
    assert "sk-written-in-the-file-123" not in str(caught.value)


@pytest.mark.parametrize("api_key_env", ["sk-abc/def+ghi", "OPENAI_API_KEY\\n"])
def test_it_rejects_an_api_key_env_that_looks_like_a_key(tmp_path, api_key_env):
    path = write(
        tmp_path,
        '[providers.local]\nkind = "openai"\nbase_url = "http://x/v1"\n'
        f'api_key_env = "{api_key_env}"\n[[providers.local.models]]\nname = "m"\n',
    )

    with pytest.raises(ImproperlyConfigured, match="must be the NAME of an environment variable"):
        load_providers(path)


def test_it_reports_every_problem_of_a_mapping_as_text():
    problems = validate_providers(
        {"a:b": {"kind": "scripted", "models": [{"name": "x"}]}, "ok": {"kind": "scripted", "models": []}}
    )

    assert problems == [
        "provider 'a:b': the name must be letters, digits, '_', '.' or '-' (no ':' or spaces)",
        "provider 'ok': field 'models' must list at least one [[providers.ok.models]] entry",
    ]


# The registry


def test_it_names_the_configured_models_when_a_model_is_unknown(settings, tmp_path):
    settings.AGENTTEST_PROVIDERS = load_providers(write(tmp_path, GOOD_FILE))

    with pytest.raises(registry.UnknownModel) as caught:
        registry.get_model("local:gpt-imaginary")

    assert str(caught.value) == (
        "model 'local:gpt-imaginary' is not configured; configured: local:gpt-4o-mini, local:llama3:8b, "
        "offline:scripted"
    )


@pytest.mark.parametrize("key", ["scripted", ":scripted", "scripted:", ""])
def test_it_rejects_a_malformed_model_key(key):
    with pytest.raises(registry.UnknownModel, match="must look like 'provider:model'"):
        registry.get_model(key)


def test_it_splits_a_model_key_at_the_first_colon():
    assert registry.parse_model_key("local:llama3:8b") == ("local", "llama3:8b")


def test_it_lists_configured_models_with_their_prices(settings, tmp_path):
    settings.AGENTTEST_PROVIDERS = load_providers(write(tmp_path, GOOD_FILE))

    models = registry.configured_models()

    assert [model.key for model in models] == ["local:gpt-4o-mini", "local:llama3:8b", "offline:scripted"]
    mini = registry.get_model("local:gpt-4o-mini")
    assert mini.label == "Local mini"
    assert mini.cost(Usage(input_tokens=1_000_000, output_tokens=2_000_000)) == pytest.approx(0.15 + 1.20)


def test_it_serves_one_provider_instance_per_name(scripted_model):
    instances = []

    def build():
        instances.append(registry.get_provider(scripted_model.provider_name))

    threads = [threading.Thread(target=build) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert isinstance(instances[0], ScriptedProvider)
    assert all(instance is instances[0] for instance in instances)


def test_it_rebuilds_providers_when_the_setting_changes(scripted_model, settings, tmp_path):
    before = registry.get_provider("scripted")
    log = str(tmp_path / "requests.jsonl")

    settings.AGENTTEST_PROVIDERS = {
        "scripted": {"kind": "scripted", "requests_log": log, "models": [{"name": "other"}]},
    }
    after = registry.get_provider("scripted")

    assert after is not before
    assert after.options["requests_log"] == log
    assert [model.key for model in registry.configured_models()] == ["scripted:other"]


def test_it_names_the_configured_providers_when_a_provider_is_unknown(settings, tmp_path):
    settings.AGENTTEST_PROVIDERS = load_providers(write(tmp_path, GOOD_FILE))

    with pytest.raises(registry.UnknownModel, match="provider 'azure' is not configured; configured: local, offline"):
        registry.get_provider("azure")


def test_it_builds_a_registered_provider_kind(settings, monkeypatch):
    class EchoProvider(ModelProvider):
        kind = "echo"

        def complete(self, request: ModelRequest) -> ModelResponse:
            return ModelResponse(text=request.messages[-1]["content"], model=request.model)

    monkeypatch.setattr(registry, "PROVIDER_KINDS", dict(registry.PROVIDER_KINDS))
    settings.AGENTTEST_PROVIDERS = {"echoes": {"kind": "echo", "models": [{"name": "e"}]}}

    with pytest.raises(ImproperlyConfigured, match="kind 'echo', which is not registered"):
        registry.get_provider("echoes")
    registry.register_provider_kind("echo", EchoProvider)
    answer = registry.get_provider("echoes").complete(
        ModelRequest(model="e", messages=[{"role": "user", "content": "hi"}])
    )

    assert answer.text == "hi"
