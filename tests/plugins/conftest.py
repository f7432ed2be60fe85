"""The sample plugin loaded the way start-up loads it (AGENTTEST_PLUGINS, then
agenttest.plugin_loading.plugins_load), its provider kind configured as a providers file would, and the outbox its
sending tool writes to."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from django.core.cache import cache

from agenthost.models import Agent
from agenttest.plugin_loading import plugins_load

PLUGIN = "tests.plugins.sample_plugin"
KIND = "sample-rules"
OUTBOX_ENV = "SAMPLE_PLUGIN_OUTBOX"
LOOKUP, SEND = "ticket_lookup", "ticket_send_note"
RULES_MODEL = "rules:rulebook"
GREETING = "Hello from the rulebook."
PROVIDERS_FILE = f"""
[providers.rules]
kind = "{KIND}"
greeting = "{GREETING}"

[[providers.rules.models]]
name = "rulebook"
label = "The sample plugin's rule-based model"
"""
RULES_PROVIDER = {
    "kind": KIND,
    "base_url": "",
    "api_key_env": "",
    "timeout": 60.0,
    "max_retries": 0,
    "greeting": GREETING,
    "models": [{"name": "rulebook", "input_price": 0.0, "output_price": 0.0, "label": "Rules"}],
}
# What the rule-based model does with this: looks T-7 up, then sends its owner a note.
LOOK_AND_NOTE = "Please look at ticket T-7 and send a note to its owner"


@pytest.fixture(autouse=True)
def _fresh_throttle_history(db) -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def sample_plugin(settings) -> ModuleType:
    settings.AGENTTEST_PLUGINS = [PLUGIN]
    plugins_load()
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "rules": RULES_PROVIDER}
    return sys.modules[PLUGIN]


@pytest.fixture
def outbox(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "outbox.jsonl"
    monkeypatch.setenv(OUTBOX_ENV, str(path))
    return path


@pytest.fixture
def ticket_agent(db, sample_plugin) -> Agent:
    return Agent.objects.create(
        name="tickets", description="Answers questions about support tickets.",
        instruction="You help with support tickets.", provider="rules", model="rulebook",
        functions=[{"name": LOOKUP}, {"name": SEND}],
    )
