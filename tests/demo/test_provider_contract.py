"""The demo's `simulated` models keep the contract every provider kind keeps
(tests/agenthost/test_provider_contract.py): its rules give the text answer and the tool call, and a model it does not
simulate the failure."""

from __future__ import annotations

import pytest

from agenthost.llm import registry
from tests.agenthost.test_provider_contract import LOOKUP_TOOL, QUESTION, Arrangement
from tests.agenthost.test_provider_contract import TestProviderContract as ProviderContract


@pytest.fixture
def arranged() -> Arrangement:
    def text():
        return QUESTION, ()

    def tool_call():
        return QUESTION, [LOOKUP_TOOL]

    def failure():
        return "sim-unknown"

    return Arrangement(registry.get_provider("simulated"), "sim-careful", text, tool_call, failure)


class TestSimulatedProviderContract(ProviderContract):
    pass
