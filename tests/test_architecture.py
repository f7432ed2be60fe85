"""The seam contract: the harness reaches the host only through agenthost/seams.py, and the host never imports the
harness — deleting the harness apps leaves a host whose behaviour is identical."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
HARNESS = ("cases", "runs", "recording")
HOST_PUBLIC = {"agenthost.seams"}


def _imports(package: str) -> list[tuple[str, str]]:
    found = []
    for path in sorted((BASE_DIR / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((str(path.relative_to(BASE_DIR)), node.module))
            elif isinstance(node, ast.Import):
                found.extend((str(path.relative_to(BASE_DIR)), alias.name) for alias in node.names)
    return found


def test_it_keeps_the_host_free_of_harness_imports():
    offending = [(f, m) for f, m in _imports("agenthost") if m.split(".")[0] in HARNESS]
    assert offending == []


def test_it_lets_the_harness_reach_the_host_only_through_the_seams_module():
    offending = [
        (f, m)
        for package in HARNESS
        for f, m in _imports(package)
        if m.split(".")[0] == "agenthost" and m not in HOST_PUBLIC
    ]
    assert offending == []


def test_it_runs_the_host_alone_when_the_harness_apps_are_removed(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTEST_", "CELERY_", "DATABASE_URL"))}
    env.update(AGENTTEST_DEBUG="1", AGENTTEST_VAR_DIR=str(tmp_path), AGENTTEST_HARNESS_APPS="")
    script = (
        "import django; django.setup()\n"
        "from django.core.management import call_command\n"
        "call_command('migrate', verbosity=0)\n"
        "from django.apps import apps\n"
        "assert not any(apps.is_installed(a) for a in ('cases', 'runs', 'recording'))\n"
        "from agenthost.seams import executor_providers\n"
        "assert executor_providers() == [], executor_providers()\n"
        "from agenthost.demo import demo_agents_ensure\n"
        "demo_agents_ensure()\n"
        "from agenthost.models import Agent\n"
        "from agenthost.services import conversation_start, conversation_send\n"
        "turn = conversation_send(conversation=conversation_start(agent=Agent.objects.get(name='order-router')),\n"
        "                         text='Please cancel order 1043, my email is ana@example.com')\n"
        "print([(c.name, c.outcome) for c in turn.tool_calls])\n"
        "from django.test import Client\n"
        "assert Client(HTTP_HOST='localhost').get('/chat/').status_code == 302\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=BASE_DIR, env={**env,
                            "DJANGO_SETTINGS_MODULE": "agenttest.settings"}, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "('util-email-handle_email_sender', 'executed')" in result.stdout
