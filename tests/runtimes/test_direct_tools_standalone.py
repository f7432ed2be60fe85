"""The guide's stand-alone snippet (issue 33, reproduction 7): a `python` agent run on its own, outside agenttest,
with `from agenttest.plugin import DirectTools` — in a plain interpreter where no Django settings are configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agenthost.testing.openai_stub import OpenAIStub
from tests.runtimes.conftest import SHOP_BOT, find_order_answer
from tests.workers import WAIT_SECONDS

SNIPPET = textwrap.dedent('''
    from openai import OpenAI
    from agenttest.plugin import DirectTools
    from shop.bot import respond

    print(respond([{"role": "user", "content": "Where is order 1042?"}], OpenAI(), DirectTools()))
''')


@pytest.fixture
def plain_environment(tmp_path: Path) -> dict[str, str]:
    """What a team's shell has: no Django settings module, nothing of agenttest's test configuration."""
    environment = {
        name: value for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "AGENTTEST_")) and name != "DATABASE_URL"
    }
    environment["SHOP_MARKERS"] = str(tmp_path / "markers")
    return environment


@pytest.mark.parametrize("debug", ["", "1"])
def test_it_runs_the_guides_snippet_with_no_django_settings(tmp_path, plain_environment, debug):
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "bot.py").write_text(textwrap.dedent(SHOP_BOT))
    if debug:
        # The reproduction's second form: AppRegistryNotReady when DEBUG is on.
        plain_environment["AGENTTEST_DEBUG"] = debug
    with OpenAIStub(strict_content=False) as stub:
        stub.respond_with(find_order_answer)
        plain_environment.update(OPENAI_BASE_URL=stub.base_url, OPENAI_API_KEY="unused")
        done = subprocess.run(
            [sys.executable, "-c", SNIPPET], cwd=tmp_path, env=plain_environment, capture_output=True, text=True,
            timeout=WAIT_SECONDS,
        )

    assert done.returncode == 0, done.stderr
    # The team's own find_order ran (DirectTools runs each function directly) and its result reached the model.
    said, _, shown = done.stdout.strip().partition(": ")
    assert (said, json.loads(shown)) == ("Your order", {"order_id": "1042", "status": "shipped"})
    assert len(stub.requests) == 2
