"""The scripted provider and the `scripted_model` fixture: answers, malformed calls, failures, hangs, recording."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict

import pytest

from agenthost.llm import registry
from agenthost.llm.base import ModelRequest, ProviderError, Usage
from agenthost.llm.scripted import Answer, Call, Fail, Hang, ScriptedProvider
from tests.workers import WAIT_SECONDS


def request(text="Where is order 1042?", **metadata):
    return ModelRequest(model="scripted", messages=[{"role": "user", "content": text}], metadata=metadata)


@pytest.fixture
def provider(scripted_model):
    return registry.get_provider(scripted_model.provider_name)


def test_it_plays_answers_in_order_with_deterministic_call_ids(scripted_model, provider):
    scripted_model.play(
        Answer(tool_calls=[Call("lookup_order", {"order_id": "1042"}), Call("lookup_order", {"order_id": "7"})]),
        Answer(tool_calls=[Call("cancel_order", {"order_id": "1042"})]),
        "Order 1042 is cancelled.",
    )

    first, second, third = (provider.complete(request()) for _ in range(3))

    assert [(call.id, call.name, json.loads(call.arguments)) for call in first.tool_calls] == [
        ("call_1", "lookup_order", {"order_id": "1042"}),
        ("call_2", "lookup_order", {"order_id": "7"}),
    ]
    assert [call.id for call in second.tool_calls] == ["call_3"]
    assert (first.finish_reason, third.finish_reason) == ("tool_calls", "stop")
    assert third.text == "Order 1042 is cancelled."
    assert third.latency_ms >= 0


def test_it_keeps_malformed_arguments_as_written(scripted_model, provider):
    scripted_model.play(Answer(tool_calls=[Call("lookup_order", '{"order_id": 10')]))

    answer = provider.complete(request())

    assert answer.tool_calls[0].arguments == '{"order_id": 10'


def test_it_uses_the_finish_reason_and_usage_it_is_given(scripted_model, provider):
    scripted_model.play(Answer("cut off", finish_reason="length", usage=Usage(input_tokens=10, output_tokens=20)))

    answer = provider.complete(request())

    assert (answer.finish_reason, answer.usage) == ("length", Usage(10, 20))


def test_it_estimates_usage_deterministically_and_prices_it(scripted_model, provider):
    scripted_model.play("A fairly short answer.", "A fairly short answer.")

    first, second = provider.complete(request()), provider.complete(request())

    assert first.usage == second.usage
    assert first.usage.input_tokens > 0 and first.usage.output_tokens == 6
    model = registry.get_model(scripted_model.key)
    assert model.cost(Usage(input_tokens=1_000_000, output_tokens=1_000_000)) == pytest.approx(3.0)


def test_it_raises_a_scripted_failure(scripted_model, provider):
    scripted_model.play(Fail(code="rate_limited", message="quota exceeded"))

    with pytest.raises(ProviderError, match="quota exceeded") as caught:
        provider.complete(request())

    assert (caught.value.code, caught.value.provider) == ("rate_limited", "scripted")


def test_it_says_so_when_the_script_runs_out(scripted_model, provider):
    scripted_model.play("only one")
    provider.complete(request())

    with pytest.raises(ProviderError, match=r"no answer left for request #2 \(the script had 1 entries\)") as caught:
        provider.complete(request())

    assert caught.value.code == "script_exhausted"


def test_it_says_so_when_no_script_was_installed(scripted_model, provider):
    with pytest.raises(ProviderError, match="has no script installed") as caught:
        provider.complete(request())

    assert caught.value.code == "script_exhausted"


def test_a_hang_blocks_until_released_then_times_out(scripted_model, provider):
    scripted_model.play(Hang())
    outcome = {}

    def call():
        try:
            provider.complete(request())
        except ProviderError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=call)
    worker.start()
    deadline = time.monotonic() + WAIT_SECONDS
    while not scripted_model.requests and time.monotonic() < deadline:
        time.sleep(0.005)
    assert worker.is_alive()

    scripted_model.release_hangs()
    worker.join(timeout=5)

    assert not worker.is_alive()
    assert outcome["error"].code == "timeout"
    assert "released" in str(outcome["error"])


def test_a_hang_gives_up_after_its_seconds(scripted_model, provider):
    scripted_model.play(Hang(seconds=0.01))

    with pytest.raises(ProviderError, match="gave up after 0.01s") as caught:
        provider.complete(request())

    assert caught.value.code == "timeout"


def test_it_answers_by_rule(scripted_model, provider):
    scripted_model.respond_with(lambda req: f"You said: {req.messages[-1]['content']}")

    assert provider.complete(request("hello")).text == "You said: hello"
    assert provider.complete(request("again")).text == "You said: again"


def test_playing_again_replaces_the_script(scripted_model, provider):
    scripted_model.play("first script")
    scripted_model.play("second script")

    assert provider.complete(request()).text == "second script"


def test_it_records_copies_of_the_requests_it_received(scripted_model, provider):
    scripted_model.play("ok")
    sent = request(turn=0)

    provider.complete(sent)
    sent.messages.append({"role": "user", "content": "changed afterwards"})

    assert [req.messages for req in scripted_model.requests] == [[{"role": "user", "content": "Where is order 1042?"}]]
    assert scripted_model.requests[0].metadata == {"turn": 0}


def test_recorded_requests_carry_no_api_key(scripted_model, provider, monkeypatch):
    secret = "sk-live-never-record-me-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    scripted_model.play("ok")

    provider.complete(request())

    recorded = scripted_model.requests
    assert secret not in repr(recorded)
    assert secret not in json.dumps([asdict(req) for req in recorded])
    assert "authorization" not in json.dumps([asdict(req) for req in recorded]).lower()


def test_it_serves_each_entry_once_across_threads(scripted_model, provider):
    scripted_model.play(*[Answer(tool_calls=[Call("lookup_order", {"order_id": str(n)})]) for n in range(20)])
    answers = []

    def call():
        answers.append(provider.complete(request()))

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    served = sorted(json.loads(answer.tool_calls[0].arguments)["order_id"] for answer in answers)
    assert served == sorted(str(n) for n in range(20))
    assert len({answer.tool_calls[0].id for answer in answers}) == 20


@pytest.fixture
def local_endpoint(settings):
    settings.AGENTTEST_PROVIDERS = {
        "local": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "models": [{"name": "m", "label": "Local m"}]}
    }


def test_the_fixture_keeps_the_other_providers(local_endpoint, scripted_model):
    assert registry.get_model("local:m").label == "Local m"
    assert scripted_model.key == "scripted:scripted"
    assert isinstance(registry.get_provider("scripted"), ScriptedProvider)


def test_scripts_are_kept_per_provider_name():
    ScriptedProvider.install("one", ["from one"])
    ScriptedProvider.install("two", ["from two"])
    try:
        one, two = ScriptedProvider("one", {}), ScriptedProvider("two", {})

        assert (two.complete(request()).text, one.complete(request()).text) == ("from two", "from one")
        assert len(ScriptedProvider.requests_for("one")) == 1
    finally:
        ScriptedProvider.reset()

    assert ScriptedProvider.requests_for("one") == []
