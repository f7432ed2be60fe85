"""Configured providers and models, from settings.AGENTTEST_PROVIDERS.

One provider instance per configured name serves the whole process (providers are thread-safe and hold connection
pools); the cache is dropped whenever AGENTTEST_PROVIDERS changes, e.g. under pytest-django's `settings` fixture.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from agenthost.llm.base import ModelConfig, ModelProvider, ProviderError
from agenthost.llm.openai_provider import OpenAIProvider
from agenthost.llm.scripted import ScriptedProvider
from common.model_keys import split_model_key
from common.provider_config import validate_providers


class UnknownModel(ValueError):
    """A `provider:model` key that is malformed or not configured."""


class UnknownProvider(UnknownModel):
    """A provider name that is not configured (a model key naming it is unknown too)."""


class ProviderMisconfigured(ProviderError, ImproperlyConfigured):
    """A configured provider that cannot be built: its kind is not registered, or the kind refuses its options.
    A ProviderError too, so the conversation that needed it ends with this message like any failed model call."""

    def __init__(self, message: str, *, provider: str) -> None:
        super().__init__(message, code="provider_misconfigured", provider=provider)


# Filled by register_provider_kind alone: the host's own kinds (below) as any plugin's.
PROVIDER_KINDS: dict[str, type[ModelProvider]] = {}

_instances: dict[str, ModelProvider] = {}
# Instances a plugin built itself (e.g. the harness's record/replay providers); they are not configured models, so
# no run can select them, and they survive configuration changes.
_runtime: dict[str, ModelProvider] = {}
_lock = threading.Lock()


def register_provider_kind(kind: str, cls: type[ModelProvider]) -> None:
    """Make `kind = "<kind>"` in the provider configuration build instances of `cls`. Registering the same class
    again is harmless; another class under a taken kind is refused, so no plugin silently replaces a kind."""
    if not isinstance(kind, str) or not kind.strip() or not isinstance(cls, type) or not issubclass(cls, ModelProvider):
        raise ValueError("register_provider_kind needs a kind name and a ModelProvider subclass")
    with _lock:
        existing = PROVIDER_KINDS.get(kind)
        if existing is not None and _class_path(existing) != _class_path(cls):
            raise ValueError(f"provider kind {kind!r} is already registered by {_class_path(existing)}")
        PROVIDER_KINDS[kind] = cls
        _instances.clear()


def _class_path(cls: type) -> str:
    # By name, not identity: a plugin module imported again defines an equal class that is not the same object.
    return f"{cls.__module__}.{cls.__qualname__}"


register_provider_kind(OpenAIProvider.kind, OpenAIProvider)
register_provider_kind(ScriptedProvider.kind, ScriptedProvider)


def provider_kinds() -> dict[str, type[ModelProvider]]:
    """The registered kinds: the host's own and those plugins registered."""
    with _lock:
        return dict(PROVIDER_KINDS)


def provider_is_free(name: str) -> bool:
    """Whether the configured provider `name` is of a kind that declares its answers free (ModelProvider.free).
    False for a provider not configured, or of a kind not registered."""
    kind = (_providers().get(name) or {}).get("kind")
    cls = provider_kinds().get(kind) if isinstance(kind, str) else None
    return bool(cls is not None and cls.free)


def configuration_problems(config: dict[str, Any] | None = None) -> list[str]:
    """Every problem with the providers configuration (AGENTTEST_PROVIDERS unless given), kinds included."""
    config = _providers() if config is None else config
    kinds = provider_kinds()
    if isinstance(config, dict):
        config = {name: _located(spec, kinds) for name, spec in config.items()}
    return validate_providers(config, kinds=kinds)


def _located(spec: Any, kinds: dict[str, type[ModelProvider]]) -> Any:
    """`spec` with its kind's relative file options made relative to AGENTTEST_PROVIDERS_DIR, the directory of the
    file that configured it (none: the working directory, as before there were project files)."""
    base = getattr(settings, "AGENTTEST_PROVIDERS_DIR", "")
    cls = kinds.get(spec["kind"]) if isinstance(spec, dict) and isinstance(spec.get("kind"), str) else None
    if not base or cls is None:
        return spec
    located = {
        key: os.path.join(base, value)
        for key in cls.path_option_keys
        if isinstance(value := spec.get(key), str) and value.strip() and not os.path.isabs(value)
    }
    return {**spec, **located} if located else spec


def register_runtime_provider(name: str, provider: ModelProvider) -> None:
    """Make get_provider(name) return `provider`. The name must not be a configured provider's: an agent naming a
    configured provider always gets that one."""
    if not name or not isinstance(provider, ModelProvider):
        raise ValueError("register_runtime_provider needs a name and a ModelProvider instance")
    if name in _providers():
        raise ValueError(f"provider {name!r} is configured in AGENTTEST_PROVIDERS; choose another runtime name")
    with _lock:
        _runtime[name] = provider


def unregister_runtime_provider(name: str) -> None:
    with _lock:
        _runtime.pop(name, None)


def providers_prepare() -> None:
    """Let the kind of every configured provider import what its calls need (ModelProvider.prepare)."""
    kinds = provider_kinds()
    for kind in {spec.get("kind") for spec in _providers().values() if isinstance(spec, dict)}:
        cls = kinds.get(kind) if isinstance(kind, str) else None
        if cls is not None:
            cls.prepare()


def _providers() -> dict[str, dict[str, Any]]:
    return getattr(settings, "AGENTTEST_PROVIDERS", {}) or {}


def get_provider(name: str) -> ModelProvider:
    """The process-wide instance of the configured provider `name`, else the runtime provider of that name."""
    provider = _instances.get(name)
    if provider is not None:
        return provider
    with _lock:
        provider = _instances.get(name)
        if provider is None:
            providers = _providers()
            if name not in providers and name in _runtime:
                return _runtime[name]
            if name not in providers:
                configured = ", ".join(sorted(providers)) or "none"
                raise UnknownProvider(f"provider {name!r} is not configured; configured: {configured}")
            options = _located(providers[name], PROVIDER_KINDS)
            kind = options.get("kind", "")
            cls = PROVIDER_KINDS.get(kind)
            if cls is None:
                known = ", ".join(sorted(PROVIDER_KINDS))
                raise ProviderMisconfigured(
                    f"provider {name!r} has kind {kind!r}, which is not registered (known: {known}; a plugin's kind "
                    "is known once the plugin is loaded)",
                    provider=name,
                )
            problems = validate_providers({name: options}, kinds=PROVIDER_KINDS)
            if problems:
                raise ProviderMisconfigured(f"provider {name!r} is misconfigured: {'; '.join(problems)}", provider=name)
            provider = cls(name, options)
            _instances[name] = provider
        return provider


def configured_models() -> list[ModelConfig]:
    """Every configured model, in configuration order."""
    return [
        ModelConfig(
            provider=provider_name,
            model=model["name"],
            input_price=float(model.get("input_price", 0.0)),
            output_price=float(model.get("output_price", 0.0)),
            label=model.get("label", ""),
            cached_input_price=_price(model.get("cached_input_price")),
            reasoning_price=_price(model.get("reasoning_price")),
        )
        for provider_name, spec in _providers().items()
        for model in spec.get("models", [])
    ]


def _price(value: Any) -> float | None:
    return None if value is None else float(value)


def parse_model_key(key: str) -> tuple[str, str]:
    """'provider:model' → (provider, model). Model names may contain ':' (e.g. Ollama's 'llama3:8b')."""
    parts = split_model_key(key)
    if parts is None:
        raise UnknownModel(f"model key {key!r} must look like 'provider:model', e.g. 'openai:gpt-4o-mini'")
    return parts


def get_model(key: str) -> ModelConfig:
    """The configured model for 'provider:model'; UnknownModel names the configured ones otherwise."""
    provider, model = parse_model_key(key)
    models = configured_models()
    for config in models:
        if config.provider == provider and config.model == model:
            return config
    configured = ", ".join(config.key for config in models) or "none"
    raise UnknownModel(f"model {key!r} is not configured; configured: {configured}")


def clear_cache() -> None:
    with _lock:
        _instances.clear()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("AGENTTEST_PROVIDERS", "AGENTTEST_PROVIDERS_DIR"):
        clear_cache()


def connect_signals() -> None:
    setting_changed.connect(_on_setting_changed, dispatch_uid="agenthost.llm.registry.providers_changed")
