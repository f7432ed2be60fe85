"""Secrets never reach storage: an API key planted in a tool result, an Authorization header and a model answer is
removed from messages, state, results, transcripts, recordings and exports before anything is written."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent, Message, StateChange
from agenthost.redaction import RedactingLogFilter
from cases.models import Assertion, Case, Mock, Suite, Turn
from runs.models import CaseResult, CaseSnapshot, Run
from runs.services import run_create, run_execute
from runs.web.junit import run_to_junit
from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-planted0123456789abcdefSECRET"
BEARER = "eyJplantedBearerToken.0123456789abcdef"
ACCOUNT = "ACCT-774411"


@pytest.fixture
def leaky_model(settings, openai_stub, monkeypatch):
    monkeypatch.setenv("LEAKY_API_KEY", KEY)
    settings.AGENTTEST_REDACT_PATTERNS = [r"ACCT-\d{6}"]
    settings.AGENTTEST_PROVIDERS = {
        **settings.AGENTTEST_PROVIDERS,
        "leaky": {"kind": "openai", "base_url": openai_stub.base_url, "api_key_env": "LEAKY_API_KEY",
                  "timeout": WAIT_SECONDS, "max_retries": 0,
                  "models": [{"name": "m", "input_price": 1.0, "output_price": 1.0, "label": ""}]},
    }

    def answer(body):
        if body["messages"][-1]["role"] == "tool":
            return f"Done. Your key is {KEY} and account {ACCOUNT}; header was Authorization: Bearer {BEARER}"
        return Answer(tool_calls=[Call("lookup_order", {"order_id": "1", "note": f"api_key={KEY}"})])

    openai_stub.respond_with(answer)
    return openai_stub


def everything_stored() -> str:
    """Every row the runtime wrote. The case itself is left out: the test planted the secrets there on purpose; so is
    the snapshot of what the run ran, which is that case's content as its author wrote it (the compare page's diff)."""
    from django.apps import apps

    dump = []
    for model in apps.get_models():
        if model._meta.app_label in {"agenthost", "runs", "recording"} and model is not CaseSnapshot:
            dump.extend(json.dumps(row, default=str) for row in model.objects.values())
    return "\n".join(dump)


def assert_clean(text: str) -> None:
    assert KEY not in text
    assert BEARER not in text
    assert ACCOUNT not in text


def test_it_stores_no_planted_secret_anywhere(leaky_model, tmp_path):
    agent = Agent.objects.create(name="leaky", instruction="x", provider="leaky", model="m",
                                 functions=[{"name": "lookup_order"}])
    suite = Suite.objects.create(name="leaky", agent=agent)
    case = Case.objects.create(suite=suite, name="leaks")
    turn = Turn.objects.create(case=case, user_message=f"My account is {ACCOUNT}, key {KEY}")
    Mock.objects.create(case=case, function_name="lookup_order",
                        result=f'{{"status": "shipped", "headers": "Authorization: Bearer {BEARER}"}}',
                        state_writes={"token": f"Bearer {BEARER}", "key": KEY})
    Assertion.objects.create(case=case, turn=turn, type="outputContains", params={"text": "never there"})
    modes = ["live"] + (["record"] if "record" in Run.Mode.values else [])
    for mode in modes:
        run = run_execute(run_id=run_create(suite=suite, model_keys=["leaky:m"], mode=mode).pk)
        assert CaseResult.objects.get(run=run).status == "failed"
    assert leaky_model.headers[0]["authorization"] == f"Bearer {KEY}", "the endpoint itself did get the key"
    assert Message.objects.filter(content__contains="[redacted]").exists()
    assert StateChange.objects.filter(key="key", value="[redacted]").exists()
    assert_clean(everything_stored())
    assert_clean(run_to_junit(Run.objects.first()))
    if "record" in Run.Mode.values:
        call_command("recordings", "export", "leaky", "--dir", str(tmp_path / "out"))
        assert_clean("\n".join(p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file()))


def test_it_redacts_log_lines(caplog, monkeypatch, settings):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    import logging

    logger = logging.getLogger("agenttest.redaction-test")
    logger.addFilter(RedactingLogFilter())
    with caplog.at_level(logging.INFO):
        logger.info("calling with %s and Authorization: Bearer %s", KEY, BEARER)
    assert_clean(caplog.text)
    assert "[redacted]" in caplog.text


def test_it_keeps_ordinary_text_intact(scripted_model):
    agent = Agent.objects.create(name="plain", instruction="x", provider="scripted", model="scripted")
    scripted_model.play(Answer("Your order 1043 ships on Monday; the API key field is empty."))
    from agenthost.services import conversation_send, conversation_start

    turn = conversation_send(conversation=conversation_start(agent=agent), text="when?")
    assert turn.output == "Your order 1043 ships on Monday; the API key field is empty."
