"""A model's key, `provider:model` (`openai:gpt-4o-mini`, `local:llama3:8b`): the one rule every place that reads one
applies — the agent and case files' schema, the project file, the model registry, the run engine. Written once here
because each place had its own (a regular expression, a partition, two stripped partitions) and they disagreed: a key
with a space in its provider name passed one and failed another.

The provider's name has no ':' and no whitespace; the model's name is everything after the first ':' (model names
may contain one, Ollama's `llama3:8b`) and has no whitespace."""

from __future__ import annotations

import re

MODEL_KEY_PATTERN = r"^[^:\s]+:\S+$"
MODEL_KEY_RULE = "must be provider:model, e.g. openai:gpt-4o-mini"
_MODEL_KEY = re.compile(MODEL_KEY_PATTERN)


def split_model_key(key: object) -> tuple[str, str] | None:
    """(provider, model) when `key` is a model key, else None."""
    if not isinstance(key, str) or not _MODEL_KEY.fullmatch(key):
        return None
    provider, _, model = key.partition(":")
    return provider, model

