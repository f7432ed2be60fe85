"""The demo is a plugin: a deployment without AGENTTEST_DEMO has no demo tools, no `simulated` provider kind, no
simulated models and no `demo_setup`; with it, it has all of them, registered through the public plugin module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.provider_config import load_providers
from tests.workers import WAIT_SECONDS

BASE_DIR = Path(__file__).resolve().parents[2]

INSPECT = (
    "import django, json; django.setup()\n"
    "from django.conf import settings\n"
    "from django.core.management import get_commands\n"
    "from agenthost.functions import get_function\n"
    "from agenthost.llm.registry import provider_kinds\n"
    "print(json.dumps({\n"
    "    'tools': [name for name in ('lookup_order', 'cancel_order') if get_function(name) is not None],\n"
    "    'kinds': sorted(provider_kinds()),\n"
    "    'providers': sorted(settings.AGENTTEST_PROVIDERS),\n"
    "    'demo_setup': 'demo_setup' in get_commands(),\n"
    "}))\n"
)

pytestmark = pytest.mark.own_database


def deployment(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTEST_", "CELERY_", "DATABASE_URL"))}
    clean.update(AGENTTEST_DEBUG="1", AGENTTEST_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="agenttest.settings",
                 OPENAI_API_KEY="", **env)
    return subprocess.run(
        [sys.executable, *args], cwd=BASE_DIR, env=clean, capture_output=True, text=True, timeout=WAIT_SECONDS
    )


@pytest.mark.parametrize(("demo", "expected"), [
    ({}, {"tools": [], "kinds": ["openai", "scripted"], "providers": [], "demo_setup": False}),
    ({"AGENTTEST_DEMO": "0"}, {"tools": [], "kinds": ["openai", "scripted"], "providers": [], "demo_setup": False}),
    ({"AGENTTEST_DEMO": "1"}, {"tools": ["lookup_order", "cancel_order"], "kinds": ["openai", "scripted", "simulated"],
                               "providers": ["simulated"], "demo_setup": True}),
])
def test_it_offers_the_demo_only_to_a_deployment_that_enables_it(tmp_path, demo, expected):
    result = deployment(tmp_path, "-c", INSPECT, **demo)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


def test_it_refuses_a_simulated_provider_in_a_deployment_without_the_demo(tmp_path):
    providers = tmp_path / "providers.toml"
    providers.write_text('[providers.sim]\nkind = "simulated"\n[[providers.sim.models]]\nname = "sim-careful"\n')

    result = deployment(tmp_path, "manage.py", "check", AGENTTEST_PROVIDERS_FILE=str(providers))

    assert result.returncode != 0
    assert (
        "(agenttest.E001) model providers: provider 'sim': field 'kind' must be one of openai, scripted, got "
        "'simulated'"
    ) in result.stderr


def test_it_has_no_demo_setup_command_without_the_demo(tmp_path):
    result = deployment(tmp_path, "manage.py", "demo_setup")

    assert result.returncode != 0
    assert "Unknown command: 'demo_setup'" in result.stderr


def test_it_gives_the_demo_the_offline_simulated_models():
    providers = load_providers(str(BASE_DIR / "agenttest_demo" / "providers.toml"))

    assert list(providers) == ["simulated"]
    assert providers["simulated"]["kind"] == "simulated"
    assert [(m["name"], m["label"], m["input_price"]) for m in providers["simulated"]["models"]] == [
        ("sim-careful", "Simulated: careful (offline)", 0.0),
        ("sim-hasty", "Simulated: hasty (offline)", 0.0),
    ]
