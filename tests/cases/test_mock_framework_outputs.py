"""A framework tool's Python return type is its output schema (issue 36, item 1): an Agents SDK `function_tool` or a
pydantic-ai tool returning a TypedDict, a pydantic model, a dataclass or a number holds its mocks' results to that
shape at every door, as a typed plugin tool does; one returning text (or saying nothing) accepts any result."""

from __future__ import annotations

import os
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from agenthost.models import Agent
from cases.models import Case
from cases.services import case_create, suite_create
from cases.validation.problems import CaseValidationError

pytestmark = pytest.mark.django_db

TYPES = '''
from dataclasses import dataclass
from typing import TypedDict as TypingTypedDict

from typing_extensions import TypedDict

import pydantic


class Order(TypedDict):
    order_id: str
    status: str


class Legacy(TypingTypedDict):  # pydantic cannot describe it before Python 3.12
    order_id: str


class Parcel(pydantic.BaseModel):
    parcel_id: str
    delivered: bool


@dataclass
class Refund:
    amount: float
    currency: str
'''

AGENTS_SDK = TYPES + '''
from agents import Agent, function_tool


@function_tool
def find_order(order_id: str) -> Order:
    """Find an order."""
    return {"order_id": order_id, "status": "shipped"}


@function_tool
def track_parcel(parcel_id: str) -> Parcel:
    """Track a parcel."""
    return Parcel(parcel_id=parcel_id, delivered=False)


@function_tool
def refund(order_id: str) -> Refund:
    """Refund an order."""
    return Refund(amount=1.0, currency="EUR")


@function_tool
def count_items(order_id: str) -> int:
    """How many items an order has."""
    return 3


@function_tool
def legacy_order(order_id: str) -> Legacy:
    """An order, typed in a way pydantic cannot read on every Python."""
    return {"order_id": order_id}


@function_tool
def note(order_id: str) -> str:
    """An order's note."""
    return "fragile"


entry = Agent(
    name="shop", instructions="Help.", tools=[find_order, track_parcel, refund, count_items, legacy_order, note],
)
'''

PYDANTIC_AI = TYPES + '''
from pydantic_ai import Agent

entry = Agent("openai:gpt-4o-mini", defer_model_check=True, instructions="Help.")


@entry.tool_plain
def find_order(order_id: str) -> Order:
    """Find an order."""
    return {"order_id": order_id, "status": "shipped"}


@entry.tool_plain
def track_parcel(parcel_id: str) -> Parcel:
    """Track a parcel."""
    return Parcel(parcel_id=parcel_id, delivered=False)


@entry.tool_plain
def refund(order_id: str) -> Refund:
    """Refund an order."""
    return Refund(amount=1.0, currency="EUR")


@entry.tool_plain
def count_items(order_id: str) -> int:
    """How many items an order has."""
    return 3


@entry.tool_plain
def legacy_order(order_id: str) -> Legacy:
    """An order, typed in a way pydantic cannot read on every Python."""
    return {"order_id": order_id}


@entry.tool_plain
def note(order_id: str) -> str:
    """An order's note."""
    return "fragile"
'''

RUNTIMES = {"openai-agents": AGENTS_SDK, "pydantic-ai": PYDANTIC_AI}


@pytest.fixture(params=list(RUNTIMES))
def suite(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A suite whose agent is the team's code for one framework, importable from the current directory."""
    monkeypatch.chdir(tmp_path)
    package = f"typed_shop_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "bot.py").write_text(textwrap.dedent(RUNTIMES[request.param]))
    agent = Agent.objects.create(name="shop", runtime=request.param, entry=f"{package}.bot:entry",
                                 provider="scripted", model="scripted")
    yield suite_create(data={"name": "shop", "agent": agent})
    for name in [name for name in sys.modules if name.split(".")[0] == package]:
        del sys.modules[name]
    if str(tmp_path) in sys.path and os.getcwd() != str(tmp_path):
        sys.path.remove(str(tmp_path))


def mocked(suite, function: str, result: str):
    return case_create(suite=suite, document={
        "name": f"mocks {function} {uuid.uuid4().hex[:6]}",
        "turns": [{"user_message": "Where is order 1042?",
                   "assertions": [{"type": "toolCalled", "params": {"function": function}}]}],
        "mocks": [{"function_name": function, "arguments": {}, "result": result}],
    })


@pytest.mark.parametrize(("function", "result", "message"), [
    ("find_order", '{"order_id": "1042", "state": "shipped"}', "result: 'status' is a required property"),
    ("track_parcel", '{"parcel_id": "P1", "delivered": "no"}', "result.delivered: 'no' is not of type 'boolean'"),
    ("refund", '{"amount": "ten", "currency": "EUR"}', "result.amount: 'ten' is not of type 'number'"),
    ("count_items", '"three"', "result: 'three' is not of type 'integer'"),
])
def test_it_refuses_a_mock_result_its_framework_tools_return_type_cannot_be(suite, function, result, message):
    with pytest.raises(CaseValidationError) as refused:
        mocked(suite, function, result)

    assert f"mocks[0].{message} ({function}'s output schema)" in str(refused.value)


@pytest.mark.parametrize(("function", "result"), [
    ("find_order", '{"order_id": "1042", "status": "shipped"}'),
    ("track_parcel", '{"parcel_id": "P1", "delivered": true}'),
    ("refund", '{"amount": 10, "currency": "EUR"}'),
    ("count_items", "3"),
    ("note", "42"),
    ("note", '{"any": "text"}'),
    ("find_order", "Error: the order service is down"),
    ("legacy_order", '{"order_id": "1042"}'),
])
def test_it_accepts_a_mock_result_its_framework_tool_can_return(suite, function, result):
    assert mocked(suite, function, result).mocks.get().result == result


def test_it_refuses_the_same_result_at_the_api_with_a_400_naming_the_mock(suite, admin_client_api):
    response = admin_client_api.post("/api/cases/", {
        "suite": suite.pk, "name": "Order drifted",
        "turns": [{"user_message": "Where is order 1042?",
                   "assertions": [{"type": "toolCalled", "params": {"function": "find_order"}}]}],
        "mocks": [{"function_name": "find_order", "arguments": {}, "result": '{"order_id": "1042"}'}],
    }, format="json")

    assert response.status_code == 400, response.content
    errors = {error["field"]: error["message"] for error in response.json()["errors"]}
    assert "'status' is a required property (find_order's output schema)" in errors["mocks[0].result"]
    assert not Case.objects.exists()

