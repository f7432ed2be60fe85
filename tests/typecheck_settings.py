"""The settings mypy's django-stubs plugin loads (pyproject's [tool.mypy]): the one settings module as a local demo
runs it, so every app (the demo's too) is installed and it imports with no secret key, database or Redis."""

import os

os.environ["AGENTTEST_DEBUG"] = "1"
os.environ["AGENTTEST_DEMO"] = "1"

from agenttest.settings import *  # noqa: E402, F403
