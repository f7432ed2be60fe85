"""Key-free by construction: with OPENAI_API_KEY set to a poisoned value and every outbound connection refused, replay
and scripted runs complete without a single connection attempt, and the poisoned value is stored nowhere. (The demo's
committed recordings replay so in tests/demo/test_key_free.py.)"""

from __future__ import annotations

import socket

import pytest
from django.apps import apps
from django.core import serializers

from agenthost.llm.scripted import Answer
from agenthost.models import Agent
from agenthost.testing.openai_stub import echo_reply
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

POISON = "sk-poisoned-" + "5f1e" * 8
OPENAI = "openai:gpt-4o-mini"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class OutboundGuard:
    """Refuses — and remembers — every name lookup and connection that would leave this machine."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.attempts: list[str] = []
        real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
        real_getaddrinfo = socket.getaddrinfo

        def outside(sock: socket.socket, address) -> bool:
            return sock.family != socket.AF_UNIX and str(address[0]) not in LOOPBACK

        def connect(sock, address):
            if outside(sock, address):
                self.attempts.append(f"connect {address[0]}:{address[1]}")
                raise ConnectionRefusedError(f"test guard: no outbound connection to {address[0]}")
            return real_connect(sock, address)

        def connect_ex(sock, address):
            if outside(sock, address):
                self.attempts.append(f"connect {address[0]}:{address[1]}")
                return 111
            return real_connect_ex(sock, address)

        def getaddrinfo(host, *args, **kwargs):
            if host is not None and str(host) not in LOOPBACK:
                self.attempts.append(f"lookup {host}")
                raise socket.gaierror(socket.EAI_NONAME, f"test guard: no lookup of {host}")
            return real_getaddrinfo(host, *args, **kwargs)

        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def openai_provider(base_url: str, api_key_env: str) -> dict:
    return {
        "kind": "openai", "base_url": base_url, "api_key_env": api_key_env, "timeout": WAIT_SECONDS, "max_retries": 0,
        "models": [{"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.6, "label": ""}],
    }


def stub_answer(body: dict) -> Answer | str:
    if '"score"' in body["messages"][0]["content"]:
        return Answer('{"score": 5, "reason": "it reports the order"}')
    return echo_reply(body)


@pytest.fixture
def desk_suite() -> Suite:
    agent = Agent.objects.create(name="desk", instruction="You run the order desk.", provider="openai",
                                 model="gpt-4o-mini", functions=[{"name": "find_order"}])
    suite = Suite.objects.create(name="desk", agent=agent, judge_model=OPENAI, case_timeout_seconds=20)
    for name, text in [("looks up", "please find_order 1043"), ("chats", "hello")]:
        case = Case.objects.create(suite=suite, name=name)
        Turn.objects.create(case=case, user_message=text)
        Mock.objects.create(case=case, function_name="find_order", result='{"order_id": "1043"}')
        Assertion.objects.create(case=case, type="llmJudge", params={"criterion": "Helpful.", "min_score": 4})
    return suite


def statuses(run: Run) -> list[tuple[str, str, str]]:
    return list(CaseResult.objects.filter(run=run).order_by("position").values_list("case_name", "model", "status"))


def execute(suite: Suite, models: list[str], mode: str = Run.Mode.LIVE) -> Run:
    return run_execute(run_id=run_create(suite=suite, model_keys=models, mode=mode).pk)


def database_dump() -> str:
    return "".join(serializers.serialize("json", model.objects.all()) for model in apps.get_models())


def test_it_replays_and_plays_scripts_with_a_poisoned_key_and_no_network(
    desk_suite, openai_stub, settings, monkeypatch, scripted_model
):
    # Recorded once against a local OpenAI-compatible server standing in for OpenAI.
    settings.AGENTTEST_PROVIDERS = {**settings.AGENTTEST_PROVIDERS, "openai": openai_provider(openai_stub.base_url, "")}
    openai_stub.respond_with(stub_answer)
    recorded = execute(desk_suite, [OPENAI], Run.Mode.RECORD)
    assert [status for *_, status in statuses(recorded)] == ["passed", "passed"]
    openai_stub.stop()

    # Now the real endpoint, a poisoned key, and no way out of the machine.
    monkeypatch.setenv("OPENAI_API_KEY", POISON)
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "openai": openai_provider("https://api.openai.com/v1", "OPENAI_API_KEY"),
        # Only for the guard's own check below: a name that can never resolve.
        "canary": openai_provider("https://api.openai.invalid/v1", "OPENAI_API_KEY"),
    }
    guard = OutboundGuard(monkeypatch)

    live = execute(desk_suite, ["canary:gpt-4o-mini"])
    assert guard.attempts and all("api.openai.invalid" in attempt for attempt in guard.attempts), (
        "the guard must see the openai provider's connection attempts, or it proves nothing"
    )
    assert all(r.status == "error" and "cannot connect" in r.reason for r in CaseResult.objects.filter(run=live))
    guard.attempts.clear()

    replayed = execute(desk_suite, [OPENAI], Run.Mode.REPLAY)
    assert guard.attempts == []
    # A scripted run judges with the scripted model too: a live judge would be a live model.
    Suite.objects.filter(pk=desk_suite.pk).update(judge_model=scripted_model.key)
    scripted_model.respond_with(lambda request: Answer('{"score": 5, "reason": "fine"}') if not request.tools
                                else Answer("Order 1043 has shipped."))
    scripted = execute(desk_suite, [scripted_model.key])

    assert guard.attempts == []
    assert statuses(replayed) == statuses(recorded)
    assert [status for *_, status in statuses(scripted)] == ["passed", "passed"]
    assert POISON not in database_dump()

