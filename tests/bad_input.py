"""What the bad-input tests share: the objects every write endpoint can name, a fingerprint of the whole database to
prove a refused request stored nothing, and HTTP clients for the live server (token for the API, session + CSRF for
pages and the admin)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from django.apps import apps
from django.test import Client
from rest_framework.authtoken.models import Token

# The product's own scripted model (the `scripted_model` fixture configures it): no plugin's.
MODEL = "scripted:scripted"
HUGE_ID = 10**25
# Digits to str.isdigit() (and, for "٣", to int()) that are no id.
NON_ASCII_DIGITS = ("³", "٣", "１")
# More digits than int() reads from text (4,300).
LONG_DIGITS = "1" * 5000


# The function the world's agent declares, which bodies naming a function (mocks, rules) name.
ORDER_LOOKUP = {
    "name": "lookup_order",
    "description": "Look up an order by its number.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
}


@dataclass(frozen=True)
class World:
    """Real objects of every kind a write endpoint's path or body names."""

    agent_id: int
    agent_name: str
    conversation_id: int
    suite_id: int
    case_id: int
    run_id: int
    result_id: int


def world_create(*, owner: Any) -> World:
    """Needs the `scripted_model` fixture, which configures the agent's model."""
    from agenthost.models import Agent
    from agenthost.services import conversation_start
    from cases.models import Case, Turn
    from cases.services import suite_create
    from runs.models import CaseResult
    from runs.services import run_create

    agent = Agent.objects.create(
        name="order-desk", description="Answers questions about orders.", instruction="Help with orders.",
        provider="scripted", model="scripted", functions=[ORDER_LOOKUP],
    )
    suite = suite_create(data={"name": "Bad input", "agent": agent})
    case = Case.objects.create(suite=suite, name="looks the order up")
    Turn.objects.create(case=case, user_message="Where is order 1042?")
    conversation = conversation_start(agent=agent, owner=owner, title="bad input")
    run = run_create(suite=suite, model_keys=[MODEL], triggered_by=owner)
    result = CaseResult.objects.create(run=run, case=case, case_name=case.name, model=MODEL, status="passed")
    return World(
        agent_id=agent.pk, agent_name=agent.name, conversation_id=conversation.pk, suite_id=suite.pk,
        case_id=case.pk, run_id=run.pk, result_id=result.pk,
    )


def database_fingerprint() -> dict[str, tuple[int, str]]:
    """Per table: its row count and a digest of every row, in primary-key order."""
    fingerprint = {}
    for model in apps.get_models(include_auto_created=True):
        rows = list(model._default_manager.order_by("pk").values_list())
        fingerprint[model._meta.db_table] = (len(rows), hashlib.sha256(repr(rows).encode()).hexdigest())
    return fingerprint


def fingerprint_changes(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> list[str]:
    return sorted(table for table in before.keys() | after.keys() if before.get(table) != after.get(table))


@contextmanager
def token_client(base_url: str, user: Any) -> Iterator[httpx.Client]:
    token, _ = Token.objects.get_or_create(user=user)
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Token {token.key}"}, timeout=30) as client:
        yield client


@contextmanager
def session_client(base_url: str, user: Any) -> Iterator[httpx.Client]:
    """Signed in with a session cookie, sending the CSRF token a form would."""
    django_client = Client()
    django_client.force_login(user)
    cookies = {"sessionid": django_client.cookies["sessionid"].value, "csrftoken": "t" * 32}
    headers = {"X-CSRFToken": "t" * 32, "Referer": base_url + "/"}
    with httpx.Client(base_url=base_url, cookies=cookies, headers=headers, timeout=30) as client:
        yield client


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth
