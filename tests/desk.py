"""An order desk whose two models behave differently, for runs a real worker executes: a worker process cannot play
an in-process script, so both models are scripted in a providers file this process and the worker read.

Each model answers by what the last message says: the careful one looks the order up before cancelling it (the
look-up of the order to cancel finds it "processing"), the hasty one cancels straight away — so a case asserting the
look-up passes on one and fails on the other."""

from __future__ import annotations

import json
from pathlib import Path

from agenthost.models import Agent
from cases.models import Assertion, Case, Mock, Suite, Turn

MODELS = ["careful:desk-model", "hasty:desk-model"]
SCRIPTS = {
    "careful": [
        {"when": "Where is order", "tool_calls": [{"name": "find_order", "arguments": {"order_id": "1041"}}]},
        {"when": "cancel order", "tool_calls": [{"name": "find_order", "arguments": {"order_id": "1043"}}]},
        {"when": "processing", "tool_calls": [{"name": "void_order", "arguments": {"order_id": "1043"}}]},
        {"when": "cancelled", "text": "Order 1043 is cancelled."},
        {"when": "shipped", "text": "Order 1041 has shipped."},
    ],
    "hasty": [
        {"when": "Where is order", "tool_calls": [{"name": "find_order", "arguments": {"order_id": "1041"}}]},
        {"when": "cancel order", "tool_calls": [{"name": "void_order", "arguments": {"order_id": "1043"}}]},
        {"when": "cancelled", "text": "Cancelled."},
        {"when": "shipped", "text": "Shipped."},
    ],
}


def desk_providers_file(folder: Path) -> Path:
    """MODELS in a providers file (with their scripts beside it) in `folder`."""
    lines = []
    for name, script in SCRIPTS.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(script))
        lines.append(
            f'[providers.{name}]\nkind = "scripted"\nscript = "{path}"\nmax_retries = 0\n\n'
            f'[[providers.{name}.models]]\nname = "desk-model"\n'
        )
    providers = folder / "providers.toml"
    providers.write_text("\n".join(lines))
    return providers


def desk_suite() -> Suite:
    """The desk's suite: "where is my order" passes on both models, "cancel" (asking for the look-up) only on the
    careful one."""
    agent = Agent.objects.create(
        name="orders",
        instruction="Help with orders.",
        provider="careful",
        model="desk-model",
        functions=[{"name": "find_order"}, {"name": "void_order"}],
    )
    suite = Suite.objects.create(name="orders", agent=agent)
    for name, text, status in [
        ("where is my order", "Where is order #1041?", "shipped"), ("cancel", "Please cancel order 1043", "processing")
    ]:
        case = Case.objects.create(suite=suite, name=name)
        turn = Turn.objects.create(case=case, user_message=text)
        Mock.objects.create(case=case, function_name="find_order", result=json.dumps({"status": status}))
        Mock.objects.create(case=case, function_name="void_order", result='{"cancelled": true}')
        Assertion.objects.create(case=case, turn=turn, type="toolCalled", params={"function": "find_order"})
    return suite
