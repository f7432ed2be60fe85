"""Reproductions 2 and 4 of issue 33 on a real worker, side effects counted at a local listener and in marker files:
a plain python-runtime loop that calls its own functions (`IMPLEMENTATIONS[name](**args)`) instead of `tools.call`,
and an extra-allowed, effect-free tool that makes its own `OpenAI()` client. Before the seal both Passed, with real
refunds posted and the tool's model call sent past agenttest; now the first is an Error naming what broke the seal,
and the second's call is answered by the model under test, nothing reaching the listener."""

from __future__ import annotations

import json

import pytest

from agenthost.models import Agent
from cases.models import Assertion, Case, Mock, Suite, Turn
from common.provider_config import load_providers
from runs.models import CaseResult, Run
from runs.services import run_trigger
from tests.agenthost.listeners import local_server  # noqa: F401 — the fixture
from tests.workers import WAIT_SECONDS, dispatch_to, runs_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BOT = '''
import json
import os
import urllib.request
from pathlib import Path

from openai import OpenAI

LISTENER = os.environ["SEAL_LISTENER"]
MARKERS = Path(os.environ["SHOP_MARKERS"])
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}}}}
    for name in ("refund", "lookup", "exchange_rate")]


def refund(order_id):
    urllib.request.urlopen(urllib.request.Request(f"{LISTENER}/refunds/{order_id}", data=b"{}", method="POST"),
                           timeout=5)
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"refund-{order_id}").write_text("refunded")
    return f"refunded order {order_id}"


def lookup(order_id):
    return f"order {order_id} is shipped"


def exchange_rate(order_id=""):
    client = OpenAI(api_key="sk-own", base_url=f"{LISTENER}/v1", max_retries=0)
    answer = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "What is the exchange rate today?"}]
    )
    return "rate: " + (answer.choices[0].message.content or "")


IMPLEMENTATIONS = {"refund": refund, "lookup": lookup, "exchange_rate": exchange_rate}
# What the loop runs itself (the issue's plain loop), and what it hands agenttest's tools helper.
OWN = {"refund", "lookup"}


def respond(messages, client, tools):
    conversation = [{"role": "system", "content": "Help with orders."}, *messages]
    for _ in range(4):
        completion = client.chat.completions.create(model="gpt-4o-mini", messages=conversation, tools=TOOLS)
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        conversation.append({"role": "assistant", "content": message.content or "",
                             "tool_calls": [call.model_dump() for call in message.tool_calls]})
        for call in message.tool_calls:
            name = call.function.name
            if name in OWN:
                result = IMPLEMENTATIONS[name](**json.loads(call.function.arguments))
            else:
                result = tools.call(IMPLEMENTATIONS[name], call.function.arguments, call_id=call.id)
            conversation.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return "I could not finish."
'''

SCRIPT = {"answers": [
    {"when": "Refund order 7", "tool_calls": [{"name": "refund", "arguments": {"order_id": "7"}}]},
    {"when": "refunded order 7", "text": "done: order 7 refunded"},
    {"when": "Where is order 8", "tool_calls": [{"name": "lookup", "arguments": {"order_id": "8"}}]},
    {"when": "order 8 is", "text": "done: order 8 is shipped"},
    {"when": "Convert 10 EUR", "tool_calls": [{"name": "exchange_rate", "arguments": {}}]},
    {"when": "exchange rate today", "text": "1.08"},
    {"when": "rate: 1.08", "text": "done: 10.80 USD"},
]}


def _case(suite: Suite, name: str, text: str, mock: str = "") -> None:
    case = Case.objects.create(suite=suite, name=name)
    Turn.objects.create(case=case, user_message=text)
    if mock:
        Mock.objects.create(case=case, function_name=mock, result="queued, nothing done")
    Assertion.objects.create(case=case, type="outputContains", params={"text": "done"})


def test_it_stops_a_loop_running_its_own_tools_and_routes_a_tools_own_client_on_a_real_worker(
    tmp_path, settings, admin_user, local_server, monkeypatch  # noqa: F811 — the fixture imported above
):
    package = tmp_path / "team" / "sealshop"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "bot.py").write_text(BOT)
    script, log = tmp_path / "script.json", tmp_path / "requests.jsonl"
    script.write_text(json.dumps(SCRIPT))
    providers = tmp_path / "providers.toml"
    providers.write_text(
        f'[providers.ci]\nkind = "scripted"\nscript = "{script}"\nrequests_log = "{log}"\nmax_retries = 0\n\n'
        '[[providers.ci.models]]\nname = "desk-model"\ninput_price = 1.0\noutput_price = 2.0\n'
    )
    settings.AGENTTEST_PROVIDERS = load_providers(str(providers))
    broker_url = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    settings.CELERY_BROKER_URL = broker_url
    markers = tmp_path / "markers"
    agent = Agent.objects.create(
        name="desk", runtime="python", entry="sealshop.bot:respond", provider="ci", model="desk-model",
        outside_effects={"exchange_rate": False},
    )
    own_calls = Suite.objects.create(name="own calls", agent=agent, case_timeout_seconds=int(WAIT_SECONDS))
    _case(own_calls, "refund", "Refund order 7", mock="refund")
    _case(own_calls, "lookup", "Where is order 8?", mock="lookup")
    own_client = Suite.objects.create(name="own client", agent=agent, case_timeout_seconds=int(WAIT_SECONDS),
                                      extra_allowed_functions=["exchange_rate"])
    _case(own_client, "rate", "Convert 10 EUR to USD")

    dispatch = dispatch_to(broker_url)

    worker_log = tmp_path / "worker.log"
    env = {"AGENTTEST_PROVIDERS_FILE": str(providers), "PYTHONPATH": str(tmp_path / "team"),
           "SEAL_LISTENER": local_server.base_url, "SHOP_MARKERS": str(markers)}
    runs = []
    with runs_worker(broker_url, worker_log, **env):
        for suite in (own_calls, own_client):
            run = run_trigger(suite=suite, model_keys=["ci:desk-model"], triggered_by=admin_user, dispatch=dispatch)
            wait_for(lambda run=run: Run.objects.get(pk=run.pk).is_finished, what="the run",
                     log_path=worker_log)
            runs.append(run)

    results = {r.case_name: r for r in CaseResult.objects.filter(run__in=runs)}
    # Nothing reached the listener, and no refund was made.
    assert local_server.received == []
    assert not markers.exists()
    refund, lookup, rate = results["refund"], results["lookup"], results["rate"]
    assert refund.status == "error", refund.reason
    assert f"tried to connect to {local_server.host_port}" in refund.reason
    assert lookup.status == "error", lookup.reason
    assert "tool 'lookup' ran outside agenttest" in lookup.reason
    assert Run.objects.get(pk=runs[0].pk).status == Run.Status.ERROR
    # The tool's own client reached the model under test through the model layer: logged by the scripted
    # provider, counted in the case's tokens.
    assert rate.status == "passed", rate.reason
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert {"role": "user", "content": "What is the exchange rate today?"} in [
        request["messages"][-1] for request in logged
    ]
    assert Run.objects.get(pk=runs[1].pk).status == Run.Status.PASSED
