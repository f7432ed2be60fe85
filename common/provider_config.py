"""Reading and checking the model-provider configuration.

A pure module (no Django models, no SDK, no app) in the shared room: settings.py imports it to build
AGENTTEST_PROVIDERS, and the system check re-validates whatever the setting holds. Keys never live in the file, only
the name of the env var that holds one.

The file is read at settings time, before any plugin could register its provider kind, so reading it checks only
what every kind shares (the table's shape, the common fields, the models' names and prices). Whether the kind exists
and what its own fields mean is checked once the kinds are known — by the system check and when a provider is built —
by `validate_providers(config, kinds=...)`: each kind's class names its extra keys and validates their values.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured

from common.inputs import is_env_name

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2

# Keys every provider and every model may carry; a kind adds its own (ModelProvider.option_keys, model_option_keys).
COMMON_KEYS = frozenset({"kind", "base_url", "api_key_env", "timeout", "max_retries", "max_concurrency", "models"})
COMMON_MODEL_KEYS = frozenset(
    {"name", "input_price", "output_price", "cached_input_price", "reasoning_price", "label"}
)
# Prices that default to another one when left out: cached input to input, reasoning to output.
_DETAIL_PRICES = ("cached_input_price", "reasoning_price")

_PROVIDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ProviderKind(Protocol):
    """What checking a provider needs from its kind's class (the host's ModelProvider and every plugin's)."""

    kind: str
    option_keys: frozenset[str]
    model_option_keys: frozenset[str]

    @classmethod
    def validate_options(cls, spec: dict[str, Any]) -> Iterable[str]: ...


def default_providers() -> dict[str, dict[str, Any]]:
    """OpenAI when OPENAI_API_KEY is set, else none (the demo's simulated models come with the demo plugin)."""
    providers: dict[str, dict[str, Any]] = {}
    if os.environ.get("OPENAI_API_KEY", "").strip():
        providers["openai"] = _normalise(
            {
                "kind": "openai",
                "base_url": OPENAI_BASE_URL,
                "api_key_env": "OPENAI_API_KEY",
                "models": [
                    {"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.60, "label": "OpenAI GPT-4o mini"},
                    {"name": "gpt-4o", "input_price": 2.50, "output_price": 10.00, "label": "OpenAI GPT-4o"},
                ],
            }
        )
    return providers


def load_providers(path: str) -> dict[str, dict[str, Any]]:
    """The providers configured in the TOML file at `path` ("" → default_providers()), validated and normalised."""
    if not path:
        return default_providers()
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ImproperlyConfigured(f"model provider file {path}: the file does not exist") from None
    except OSError as exc:
        raise ImproperlyConfigured(f"model provider file {path}: cannot be read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ImproperlyConfigured(f"model provider file {path}: not valid TOML ({exc})") from None

    problems = [f"unknown top-level key {key!r} (only [providers.<name>] tables belong here)" for key in data
                if key != "providers"]
    providers = data.get("providers")
    if not isinstance(providers, dict) or not providers:
        problems.append("no providers: add at least one [providers.<name>] table")
        providers = {}
    else:
        problems.extend(validate_providers(providers))
    if problems:
        raise ImproperlyConfigured(f"model provider file {path}: " + "; ".join(problems))
    return normalise_providers(providers)


def normalise_providers(providers: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A providers mapping validate_providers found no problem with, with every default filled in."""
    return {name: _normalise(spec) for name, spec in providers.items()}


def validate_providers(
    config: dict[str, Any], kinds: Mapping[str, type[ProviderKind]] | None = None
) -> list[str]:
    """Every problem with a providers mapping (raw from the file or normalised), each naming provider and field.

    Without `kinds` only what every kind shares is checked; with the registered kinds also that each provider's kind
    is one of them, its keys are the ones that kind knows, and the kind's own validate_options."""
    if not isinstance(config, dict):
        return [f"the providers must be a mapping of name → provider, got {type(config).__name__}"]
    problems: list[str] = []
    for name, spec in config.items():
        problems.extend(_provider_problems(name, spec, kinds))
    return problems


def _provider_problems(name: Any, spec: Any, kinds: Mapping[str, type[ProviderKind]] | None) -> list[str]:
    where = f"provider {name!r}"
    if not isinstance(name, str) or not _PROVIDER_NAME.match(name):
        # The name is the part before ':' in a model key, so it may not contain one.
        return [f"{where}: the name must be letters, digits, '_', '.' or '-' (no ':' or spaces)"]
    if not isinstance(spec, dict):
        return [f"{where}: must be a table of settings"]
    problems: list[str] = []
    if "api_key" in spec:
        # Never echo the value: it is a secret that should not have been written here.
        problems.append(
            f"{where}: field 'api_key' is not allowed; keys never go in this file. Put the key in an environment "
            "variable and give its name in 'api_key_env'"
        )
    kind = spec.get("kind")
    if kinds is not None and (not isinstance(kind, str) or kind not in kinds):
        known = ", ".join(sorted(kinds))
        problems.append(
            f"{where}: field 'kind' must be one of {known}, got {kind!r} (a plugin's kind is known once the plugin is "
            "loaded: AGENTTEST_PLUGINS or an installed agenttest.plugins entry point)"
        )
        return problems
    if not isinstance(kind, str) or not kind.strip():
        problems.append(f"{where}: field 'kind' must name a provider kind (e.g. 'openai'), got {kind!r}")
        return problems
    cls = kinds[kind] if kinds is not None else None
    if cls is not None:
        allowed = COMMON_KEYS | cls.option_keys
        problems.extend(
            f"{where}: unknown field {key!r} (allowed for kind {kind!r}: {', '.join(sorted(allowed))})"
            for key in spec
            if key not in allowed and key != "api_key"
        )

    base_url = spec.get("base_url", "")
    if not isinstance(base_url, str) or (base_url and not base_url.startswith(("http://", "https://"))):
        problems.append(f"{where}: field 'base_url' must be an http:// or https:// URL, got {base_url!r}")
    api_key_env = spec.get("api_key_env", "")
    if not isinstance(api_key_env, str) or (api_key_env and not is_env_name(api_key_env)):
        problems.append(
            f"{where}: field 'api_key_env' must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
            "not the key itself"
        )
    timeout = spec.get("timeout", DEFAULT_TIMEOUT)
    if not is_number(timeout) or timeout <= 0:
        problems.append(f"{where}: field 'timeout' must be a number of seconds greater than 0, got {timeout!r}")
    max_retries = spec.get("max_retries", DEFAULT_MAX_RETRIES)
    if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
        problems.append(f"{where}: field 'max_retries' must be a whole number ≥ 0, got {max_retries!r}")
    # At most this many calls of a run in flight at once (the harness lowers it further on HTTP 429).
    max_concurrency = spec.get("max_concurrency", 1)
    if not isinstance(max_concurrency, int) or isinstance(max_concurrency, bool) or max_concurrency < 1:
        problems.append(f"{where}: field 'max_concurrency' must be a whole number ≥ 1, got {max_concurrency!r}")

    models = spec.get("models")
    if not isinstance(models, list) or not models:
        problems.append(f"{where}: field 'models' must list at least one [[providers.{name}.models]] entry")
        return problems
    seen: set[str] = set()
    model_keys = (COMMON_MODEL_KEYS | cls.model_option_keys) if cls is not None else None
    for index, model in enumerate(models):
        problems.extend(_model_problems(f"{where}: models[{index}]", model, model_keys, seen))
    if cls is not None:
        problems.extend(f"{where}: {problem}" for problem in _kind_problems(cls, spec))
    return problems


def _kind_problems(cls: type[ProviderKind], spec: dict[str, Any]) -> list[str]:
    try:
        return list(cls.validate_options(spec))
    except Exception as exc:  # a plugin's validator that breaks must not hide the provider's other problems
        return [f"kind {cls.kind!r} ({cls.__module__}.{cls.__qualname__}) could not check its options: "
                f"{type(exc).__name__}: {exc}"]


def _model_problems(where: str, model: Any, allowed: frozenset[str] | None, seen: set[str]) -> list[str]:
    if not isinstance(model, dict):
        return [f"{where} must be a table with name and prices"]
    if isinstance(model.get("name"), str) and model["name"].strip():
        where = f"{where} (model {model['name']!r})"
    problems = [
        f"{where}: unknown field {key!r} (allowed: {', '.join(sorted(allowed))})"
        for key in model
        if allowed is not None and key not in allowed
    ]
    name = model.get("name")
    if not isinstance(name, str) or not name.strip():
        problems.append(f"{where}: field 'name' must be a non-empty string")
    elif name in seen:
        problems.append(f"{where}: model {name!r} is listed twice")
    else:
        seen.add(name)
    for field in ("input_price", "output_price", *_DETAIL_PRICES):
        if field in _DETAIL_PRICES and field not in model:
            continue
        price = model.get(field, 0.0)
        if not is_number(price) or price < 0:
            problems.append(f"{where}: field {field!r} must be a number ≥ 0 (USD per million tokens), got {price!r}")
    if not isinstance(model.get("label", ""), str):
        problems.append(f"{where}: field 'label' must be a string")
    return problems


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool): what a numeric option of any kind must be."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _normalise(spec: dict[str, Any]) -> dict[str, Any]:
    # A kind's own keys are kept as written: which they are is the kind's to say, once it is registered.
    kind = spec["kind"]
    normalised: dict[str, Any] = {
        "kind": kind,
        "base_url": spec.get("base_url") or (OPENAI_BASE_URL if kind == "openai" else ""),
        "api_key_env": spec.get("api_key_env", ""),
        "timeout": float(spec.get("timeout", DEFAULT_TIMEOUT)),
        "max_retries": spec.get("max_retries", DEFAULT_MAX_RETRIES),
    }
    if "max_concurrency" in spec:
        normalised["max_concurrency"] = spec["max_concurrency"]
    normalised.update({key: spec[key] for key in sorted(spec) if key not in COMMON_KEYS})
    normalised["models"] = [
        {
            **{key: model[key] for key in sorted(model) if key not in COMMON_MODEL_KEYS},
            "name": model["name"],
            "input_price": float(model.get("input_price", 0.0)),
            "output_price": float(model.get("output_price", 0.0)),
            **{field: float(model[field]) for field in _DETAIL_PRICES if field in model},
            "label": model.get("label", ""),
        }
        for model in spec["models"]
    ]
    return normalised
