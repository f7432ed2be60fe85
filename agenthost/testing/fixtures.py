"""pytest fixtures for testing agents without a real model.

Enable with `pytest_plugins = ["agenthost.testing.fixtures"]`.

    def test_it_looks_the_order_up(scripted_model):
        scripted_model.play(Answer(tool_calls=[Call("lookup_order", {"order_id": "1042"})]), "It has shipped.")
        ...  # an agent using provider "scripted", model "scripted" (or scripted_model.key in a run)
        assert scripted_model.requests[1].messages[-1]["role"] == "tool"
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Entry, ScriptedProvider
from agenthost.testing.openai_stub import OpenAIStub

SCRIPTED_PROVIDER = "scripted"
SCRIPTED_MODEL = "scripted"


class ScriptedModel:
    """The `scripted:scripted` model of one test: what it will answer and what it was asked."""

    provider_name = SCRIPTED_PROVIDER
    model = SCRIPTED_MODEL
    key = f"{SCRIPTED_PROVIDER}:{SCRIPTED_MODEL}"

    def play(self, *entries: Entry) -> None:
        """Answer the next requests with these entries (Answer, Call-carrying Answer, Fail, Hang or text)."""
        ScriptedProvider.install(self.provider_name, list(entries))

    def respond_with(self, responder: Callable[[ModelRequest], Entry]) -> None:
        """Answer every request by rule: responder(request) → entry."""
        ScriptedProvider.install(self.provider_name, responder)

    @property
    def requests(self) -> list[ModelRequest]:
        return ScriptedProvider.requests_for(self.provider_name)

    def release_hangs(self) -> None:
        ScriptedProvider.release_hangs()


def scripted_provider_config() -> dict[str, Any]:
    # Non-zero prices so a test can check cost arithmetic.
    return {
        "kind": "scripted",
        "base_url": "",
        "api_key_env": "",
        "timeout": 60.0,
        "max_retries": 0,
        "models": [{"name": SCRIPTED_MODEL, "input_price": 1.0, "output_price": 2.0, "label": "Scripted (tests)"}],
    }


@pytest.fixture
def scripted_model(settings: Any) -> Iterator[ScriptedModel]:
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, SCRIPTED_PROVIDER: scripted_provider_config()}
    ScriptedProvider.reset(SCRIPTED_PROVIDER)
    yield ScriptedModel()
    ScriptedProvider.release_hangs()
    ScriptedProvider.reset(SCRIPTED_PROVIDER)


@pytest.fixture
def openai_stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        yield stub
