"""Reading and checking the model-provider configuration.

A pure module (no Django models, no SDK, no app) in the shared room: settings.py imports it to build
AGENTTEST_PROVIDERS, and the system check re-validates whatever the setting holds. Keys never live in the file, only
the name of the env var that holds one.

The file is read at settings time, before any plugin could register its provider kind, so reading it checks only
what every kind shares: the file's shape, `ProvidersFile` below (the common fields, the models' names and prices),
checked by the one schema engine (common/schemas.py), and that no model is listed twice. Whether the kind exists and
what its own fields mean is checked once the kinds are known — by the system check and when a provider is built — by
`validate_providers(config, kinds=...)`: each kind's class names its extra keys and validates their values.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Protocol

from django.core.exceptions import ImproperlyConfigured
from pydantic import ConfigDict, Field, WithJsonSchema

from common.inputs import ENV_NAME, path_of
from common.schemas import BLANK, Parts, Strict, checker, messages_for

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2


# --- The file's shape, checked by the one schema engine (common/schemas.py) ----------------------------------------
# Each message is what follows the provider, or the model, it is about (`provider 'local': models[0] (model 'm'): …`,
# `_shape_problems`); {at} is the place in it, {provider} the provider's name. The patterns are Python's, as the
# engine reads them: a name ends at the end of the text (\Z), not before a last line end ($).
_PRICE = "field '{at}' must be a number ≥ 0 (USD per million tokens), got {got}"
_KIND = "field 'kind' must name a provider kind (e.g. 'openai'), got {got}"
_MODEL_NAME = "field 'name' must be a non-empty string"
_MODELS = "field 'models' must list at least one [[providers.{provider}.models]] entry"
_BASE_URL = "field 'base_url' must be an http:// or https:// URL, got {got}"
_API_KEY_ENV = (
    "field 'api_key_env' must be the NAME of an environment variable (e.g. OPENAI_API_KEY), not the key itself"
)
# Never echoing the value: it is a secret that should not have been written here.
_API_KEY = (
    "field 'api_key' is not allowed; keys never go in this file. Put the key in an environment variable and give its "
    "name in 'api_key_env'"
)
_TIMEOUT = "field 'timeout' must be a number of seconds greater than 0, got {got}"
_MAX_RETRIES = "field 'max_retries' must be a whole number ≥ 0, got {got}"
_MAX_CONCURRENCY = "field 'max_concurrency' must be a whole number ≥ 1, got {got}"
_NO_PROVIDERS = "no providers: add at least one [providers.<name>] table"
# The name is the part before ':' in a model key, so it may not contain one.
_PROVIDER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_BAD_NAME = "provider {got}: the name must be letters, digits, '_', '.' or '-' (no ':' or spaces)"


def _price(default: float | None, description: str) -> Any:
    # A detail price left out is another price (None: not written); written, it is a number, never null.
    return Field(default, ge=0, description=description, json_schema_extra=messages_for(type=_PRICE, minimum=_PRICE))


class ModelEntry(Strict):
    """A provider's model; its kind may take more keys (ModelProvider.model_option_keys)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=messages_for(
        type="{at} must be a table with name and prices",
    ))

    name: str = Field(pattern=BLANK, json_schema_extra=messages_for(
        required=_MODEL_NAME, type=_MODEL_NAME, pattern=_MODEL_NAME,
    ))
    input_price: float = _price(0.0, "USD per million input tokens.")
    output_price: float = _price(0.0, "USD per million output tokens.")
    cached_input_price: float = _price(None, "USD per million cached input tokens; absent: the input price.")
    reasoning_price: float = _price(None, "USD per million reasoning tokens; absent: the output price.")
    label: str = Field("", json_schema_extra=messages_for(type="field 'label' must be a string"))


class ProviderEntry(Strict):
    """A provider: `[providers.<name>]`; its kind may take more keys (ModelProvider.option_keys)."""

    model_config = ConfigDict(extra="allow", regex_engine="python-re", json_schema_extra=messages_for(
        type="must be a table of settings",
    ))

    kind: str = Field(pattern=BLANK, json_schema_extra=messages_for(
        required=_KIND.replace("{got}", "None"), type=_KIND, pattern=_KIND,
    ))
    base_url: str = Field("", pattern=r"^(?:https?://|\Z)", description="Empty: the kind's own endpoint.",
                          json_schema_extra=messages_for(type=_BASE_URL, pattern=_BASE_URL))
    api_key_env: str = Field(
        "", pattern=rf"^(?:{ENV_NAME.pattern})?\Z", description="The environment variable holding the key.",
        json_schema_extra=messages_for(type=_API_KEY_ENV, pattern=_API_KEY_ENV),
    )
    api_key: Annotated[None, WithJsonSchema({"not": {}, **messages_for(**{"not": _API_KEY})})] = None
    timeout: float = Field(DEFAULT_TIMEOUT, gt=0, description="Seconds one call may take.",
                           json_schema_extra=messages_for(type=_TIMEOUT, exclusiveMinimum=_TIMEOUT))
    max_retries: int = Field(DEFAULT_MAX_RETRIES, ge=0, json_schema_extra=messages_for(
        type=_MAX_RETRIES, minimum=_MAX_RETRIES,
    ))
    # At most this many calls of a run in flight at once (the harness lowers it further on HTTP 429).
    max_concurrency: int = Field(1, ge=1, json_schema_extra=messages_for(
        type=_MAX_CONCURRENCY, minimum=_MAX_CONCURRENCY,
    ))
    models: list[ModelEntry] = Field(min_length=1, json_schema_extra=messages_for(
        required=_MODELS, type=_MODELS, minItems=_MODELS,
    ))


class ProvidersFile(Strict):
    """The model providers file (AGENTTEST_PROVIDERS_FILE)."""

    model_config = ConfigDict(extra="forbid", title="agenttest model providers", json_schema_extra=messages_for(
        additionalProperties="unknown top-level key {key} (only [providers.<name>] tables belong here)",
    ))

    providers: dict[str, ProviderEntry] = Field(min_length=1, json_schema_extra={
        "propertyNames": {"type": "string", "pattern": _PROVIDER_NAME, **messages_for(type=_BAD_NAME,
                                                                                      pattern=_BAD_NAME)},
        **messages_for(required=_NO_PROVIDERS, type=_NO_PROVIDERS, minProperties=_NO_PROVIDERS),
    })


# Keys every provider and every model may carry; a kind adds its own (ModelProvider.option_keys, model_option_keys).
COMMON_KEYS = frozenset(ProviderEntry.model_fields) - {"api_key"}
COMMON_MODEL_KEYS = frozenset(ModelEntry.model_fields)
# Prices that default to another one when left out: cached input to input, reasoning to output.
_DETAIL_PRICES = ("cached_input_price", "reasoning_price")


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
    problems = _problems(data, None)
    if problems:
        raise ImproperlyConfigured(f"model provider file {path}: " + "; ".join(problems))
    return normalise_providers(data["providers"])


def normalise_providers(providers: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A providers mapping validate_providers found no problem with, with every default filled in."""
    return {name: _normalise(spec) for name, spec in providers.items()}


def validate_providers(
    config: dict[str, Any], kinds: Mapping[str, type[ProviderKind]] | None = None
) -> list[str]:
    """Every problem with a providers mapping (raw from the file or normalised), each naming provider and field.

    Without `kinds` only what every kind shares is checked; with the registered kinds also that each provider's kind
    is one of them, its keys are the ones that kind knows, and the kind's own validate_options."""
    # A mapping in the settings is not a file: it may be set in code to anything, and may hold no provider at all.
    if not isinstance(config, dict):
        return [f"the providers must be a mapping of name → provider, got {type(config).__name__}"]
    return _problems({"providers": config}, kinds) if config else []


def _problems(document: dict[str, Any], kinds: Mapping[str, type[ProviderKind]] | None) -> list[str]:
    """The file's problems, the file's own first, then provider by provider: its shape's, or when its shape holds,
    what it means."""
    shape = _shape_problems(document)
    problems = shape.pop(None, [])
    providers = document.get("providers")
    for name, spec in providers.items() if isinstance(providers, dict) else ():
        problems.extend(shape[name] if name in shape else _meaning_problems(name, spec, kinds))
    return problems


def _shape_problems(document: dict[str, Any]) -> dict[Any, list[str]]:
    """Every way the file breaks its shape, in the file's words, by provider (None: the file's own)."""
    def inside_a_model(parts: Parts) -> bool:
        return len(parts) > 4 and parts[2] == "models"

    def words(parts: Parts, value: Any) -> dict[str, str]:
        return {"at": path_of(parts[4:] if inside_a_model(parts) else parts[2:]),
                "provider": str(parts[1]) if len(parts) > 1 else ""}

    found: dict[Any, list[str]] = {}
    for parts, message in checker(ProvidersFile).findings(document, words=words):
        if len(parts) < 2:
            found.setdefault(None, []).append(message)
            continue
        name = parts[1]
        where = f"provider {name!r}"
        if inside_a_model(parts):
            index = int(parts[3])
            where += f": {_model_where(index, document['providers'][name]['models'][index])}"
        found.setdefault(name, []).append(f"{where}: {message}")
    return found


def _unknown_keys(given: dict[str, Any], allowed: frozenset[str], where: str, which: str) -> list[str]:
    """A problem for each key of `given` that a kind does not take, listing what it does take (`allowed{which}…`)."""
    listed = ", ".join(sorted(allowed))
    return [f"{where}unknown field {key!r} (allowed{which}{listed})" for key in given if key not in allowed]


def _model_where(index: int, model: dict[str, Any]) -> str:
    named = isinstance(model.get("name"), str) and model["name"].strip()
    return f"models[{index}] (model {model['name']!r})" if named else f"models[{index}]"


def _meaning_problems(name: str, spec: dict[str, Any], kinds: Mapping[str, type[ProviderKind]] | None) -> list[str]:
    """What a provider whose shape holds means: no model listed twice, and with the kinds known, a registered kind,
    only its keys, and what the kind itself says of its options."""
    where = f"provider {name!r}"
    kind = spec["kind"]
    if kinds is not None and kind not in kinds:
        known = ", ".join(sorted(kinds))
        return [
            f"{where}: field 'kind' must be one of {known}, got {kind!r} (a plugin's kind is known once the plugin is "
            "loaded: AGENTTEST_PLUGINS or an installed agenttest.plugins entry point)"
        ]
    cls = kinds[kind] if kinds is not None else None
    problems: list[str] = []
    if cls is not None:
        problems.extend(_unknown_keys(spec, COMMON_KEYS | cls.option_keys, f"{where}: ", f" for kind {kind!r}: "))
    seen: set[str] = set()
    for index, model in enumerate(spec["models"]):
        model_where = f"{where}: {_model_where(index, model)}"
        if cls is not None:
            problems.extend(_unknown_keys(model, COMMON_MODEL_KEYS | cls.model_option_keys, f"{model_where}: ", ": "))
        if model["name"] in seen:
            problems.append(f"{model_where}: model {model['name']!r} is listed twice")
        seen.add(model["name"])
    if cls is not None:
        problems.extend(f"{where}: {problem}" for problem in _kind_problems(cls, spec))
    return problems


def _kind_problems(cls: type[ProviderKind], spec: dict[str, Any]) -> list[str]:
    try:
        return list(cls.validate_options(spec))
    except Exception as exc:  # a plugin's validator that breaks must not hide the provider's other problems
        return [f"kind {cls.kind!r} ({cls.__module__}.{cls.__qualname__}) could not check its options: "
                f"{type(exc).__name__}: {exc}"]


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
