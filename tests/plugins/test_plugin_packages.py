"""A plugin that lives in a package brings what settings must know before any plugin is imported — its app (for its
commands) and its offline models — the way the demo brings demo_setup and its simulated models: no deployment
setting names any plugin's parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers import WAIT_SECONDS

BASE_DIR = Path(__file__).resolve().parent.parent.parent

INSPECT = (
    "import django, json; django.setup()\n"
    "from django.conf import settings\n"
    "from django.core.management import get_commands\n"
    "from agenthost.llm.registry import provider_kinds\n"
    "from runs.engine.numbers import model_is_priced\n"
    "print(json.dumps({\n"
    "    'commands': sorted(c for c in ('acme_setup', 'demo_setup') if c in get_commands()),\n"
    "    'kinds': sorted(provider_kinds()),\n"
    "    'providers': sorted(settings.AGENTTEST_PROVIDERS),\n"
    "    'free': [key for key in ('acme:tiny',) if model_is_priced(key)],\n"
    "}))\n"
)

REGISTRATION = '''
from agenttest.plugin import ModelProvider, ModelResponse, register_provider_kind


class RulesProvider(ModelProvider):
    kind = "acme-rules"
    free = True

    def complete(self, request):
        return ModelResponse(text="ok")


register_provider_kind(RulesProvider.kind, RulesProvider)
'''

PROVIDERS = '[providers.acme]\nkind = "acme-rules"\n[[providers.acme.models]]\nname = "tiny"\n'

FILES = {
    "acme_agents/__init__.py": "",
    "acme_agents/registration.py": REGISTRATION,
    "acme_agents/apps.py": (
        "from django.apps import AppConfig\n\n\nclass AcmeConfig(AppConfig):\n    name = 'acme_agents'\n"
    ),
    "acme_agents/providers.toml": PROVIDERS,
    "acme_agents/management/__init__.py": "",
    "acme_agents/management/commands/__init__.py": "",
    "acme_agents/management/commands/acme_setup.py": (
        "from django.core.management.base import BaseCommand\n\n\nclass Command(BaseCommand):\n"
        "    def handle(self, *args, **options):\n        self.stdout.write('acme is set up')\n"
    ),
    # A plugin that is a module of its own, beside a providers file of the team's: neither is the plugin's.
    "shop_tools.py": "from agenttest.plugin import tool\n",
    "providers.toml": PROVIDERS.replace("acme", "shop"),
}

pytestmark = pytest.mark.own_database


def start(tmp_path: Path, *args: str, plugins: str) -> subprocess.CompletedProcess:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AGENTTEST_", "DATABASE_URL"))}
    env.update(
        AGENTTEST_DEBUG="1", AGENTTEST_VAR_DIR=str(tmp_path / "var"), AGENTTEST_PLUGINS=plugins, OPENAI_API_KEY="",
        DJANGO_SETTINGS_MODULE="agenttest.settings", PYTHONPATH=os.pathsep.join((str(tmp_path), str(BASE_DIR))),
    )
    return subprocess.run(
        [sys.executable, *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=WAIT_SECONDS
    )


def test_it_installs_a_plugin_packages_app_and_configures_its_free_models(tmp_path):
    result = start(tmp_path, "-c", INSPECT, plugins="acme_agents.registration")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "commands": ["acme_setup"], "kinds": ["acme-rules", "openai", "scripted"], "providers": ["acme"],
        "free": ["acme:tiny"],
    }
    command = start(tmp_path, "manage.py", "acme_setup", plugins="acme_agents.registration")
    assert command.returncode == 0, command.stderr
    assert "acme is set up" in command.stdout


def test_it_takes_nothing_but_the_tools_of_a_plugin_that_is_a_module_of_its_own(tmp_path):
    result = start(tmp_path, "-c", INSPECT, plugins="shop_tools")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "commands": [], "kinds": ["openai", "scripted"], "providers": [], "free": [],
    }
