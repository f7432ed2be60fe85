"""The openai provider over real HTTP against the local OpenAI-compatible stub."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.parse
import urllib.request

import pytest

from agenthost.llm import registry
from agenthost.llm.base import ModelRequest, ProviderError, Usage
from agenthost.llm.scripted import Answer, Call
from agenthost.testing.openai_stub import HttpError, OpenAIStub, _hung_up
from tests.workers import WAIT_SECONDS

SECRET = "sk-test-local-secret-0123456789"
LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up an order by its number.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
}


def configure(settings, base_url, **options):
    settings.AGENTTEST_PROVIDERS = {
        "local": {
            "kind": "openai",
            "base_url": base_url,
            "api_key_env": "LOCAL_TEST_API_KEY",
            "timeout": WAIT_SECONDS,
            "max_retries": 2,
            "models": [{"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.6, "label": ""}],
            **options,
        }
    }
    return registry.get_provider("local")


@pytest.fixture
def provider(settings, openai_stub, monkeypatch):
    monkeypatch.setenv("LOCAL_TEST_API_KEY", SECRET)
    return configure(settings, openai_stub.base_url)


def ask(provider, *messages, tools=()):
    return provider.complete(ModelRequest(model="gpt-4o-mini", messages=list(messages), tools=list(tools)))


USER = {"role": "user", "content": "Where is order 1042?"}


def test_it_round_trips_a_tool_call(provider, openai_stub):
    openai_stub.queue(
        Answer(tool_calls=[Call("lookup_order", {"order_id": "1042"})]),
        Answer("Order 1042 has shipped.", usage=None),
    )

    first = ask(provider, USER, tools=[LOOKUP_TOOL])
    call = first.tool_calls[0]
    result = {"role": "tool", "tool_call_id": call.id, "content": '{"status": "shipped"}'}
    second = ask(provider, USER, {"role": "assistant", "content": "", "tool_calls": [call.as_openai()]}, result,
                 tools=[LOOKUP_TOOL])

    assert (call.name, json.loads(call.arguments), first.finish_reason) == (
        "lookup_order", {"order_id": "1042"}, "tool_calls"
    )
    assert call.id
    assert second.text == "Order 1042 has shipped."
    assert second.finish_reason == "stop"
    assert second.usage.input_tokens > 0 and second.usage.output_tokens > 0
    assert second.latency_ms > 0
    sent = openai_stub.requests
    assert sent[0]["tools"] == [LOOKUP_TOOL]
    assert sent[1]["messages"][-1] == result
    assert sent[1]["messages"][-2]["tool_calls"][0]["id"] == call.id
    assert openai_stub.headers[0]["authorization"] == f"Bearer {SECRET}"


def test_it_reports_the_usage_the_server_counted(provider, openai_stub):
    openai_stub.queue(Answer("hi", usage=Usage(input_tokens=123, output_tokens=45)))

    answer = ask(provider, USER)

    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (123, 45)
    assert answer.model == "gpt-4o-mini"


def test_it_retries_a_rate_limit_and_succeeds(provider, openai_stub):
    openai_stub.queue(429, "Recovered.")

    answer = ask(provider, USER)

    assert answer.text == "Recovered."
    assert len(openai_stub.requests) == 2


def test_it_gives_up_after_the_retries_on_server_errors(provider, openai_stub):
    openai_stub.queue(500, 500, 500, "never reached")

    with pytest.raises(ProviderError) as caught:
        ask(provider, USER)

    assert caught.value.code == "http_500"
    assert caught.value.provider == "local"
    assert len(openai_stub.requests) == 3


def test_it_reports_a_lasting_rate_limit(provider, openai_stub):
    openai_stub.queue(*[HttpError(429, "slow down")] * 3)

    with pytest.raises(ProviderError, match="slow down") as caught:
        ask(provider, USER)

    assert caught.value.code == "rate_limited"


def test_it_does_not_retry_a_bad_request(provider, openai_stub):
    openai_stub.queue(HttpError(400, "'messages' is required"), "never reached")

    with pytest.raises(ProviderError, match="'messages' is required") as caught:
        ask(provider, USER)

    assert caught.value.code == "http_400"
    assert len(openai_stub.requests) == 1


def test_it_never_repeats_the_key_a_server_quotes_back(provider, openai_stub):
    openai_stub.queue(HttpError(401, f"Incorrect API key provided: {SECRET}"))

    with pytest.raises(ProviderError) as caught:
        ask(provider, USER)

    assert caught.value.code == "http_401"
    assert "Incorrect API key provided" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(caught.value.__dict__)


def test_it_names_the_missing_key_variable_without_calling_the_server(settings, openai_stub, monkeypatch):
    monkeypatch.delenv("LOCAL_TEST_API_KEY", raising=False)
    provider = configure(settings, openai_stub.base_url)

    with pytest.raises(ProviderError, match="LOCAL_TEST_API_KEY") as caught:
        ask(provider, USER)

    assert caught.value.code == "missing_api_key"
    assert openai_stub.requests == []


def test_it_needs_no_key_for_a_local_server(settings, openai_stub):
    openai_stub.queue("Hello from a local model.")
    provider = configure(settings, openai_stub.base_url, api_key_env="")

    assert ask(provider, USER).text == "Hello from a local model."


def test_it_reports_a_server_that_is_not_there(settings, monkeypatch):
    monkeypatch.setenv("LOCAL_TEST_API_KEY", SECRET)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = configure(settings, f"http://127.0.0.1:{port}/v1", max_retries=0)

    with pytest.raises(ProviderError) as caught:
        ask(provider, USER)

    assert caught.value.code == "connection"
    assert f"127.0.0.1:{port}" in str(caught.value)


def test_it_reports_a_timeout(settings, openai_stub, monkeypatch):
    monkeypatch.setenv("LOCAL_TEST_API_KEY", SECRET)
    answered = threading.Event()
    openai_stub.respond_with(lambda body: answered.wait(5) and "too late")
    provider = configure(settings, openai_stub.base_url, timeout=0.2, max_retries=0)

    try:
        with pytest.raises(ProviderError) as caught:
            ask(provider, USER)
    finally:
        answered.set()

    assert caught.value.code == "timeout"


# The stub itself, as benchmarks use it


def test_the_stub_lists_its_models(openai_stub):
    with urllib.request.urlopen(f"{openai_stub.base_url}/models", timeout=5) as response:
        listing = json.load(response)

    assert [model["id"] for model in listing["data"]] == ["gpt-4o-mini"]


def test_the_stub_command_line_serves_echo_replies(settings, monkeypatch):
    server = subprocess.Popen(
        [sys.executable, "-m", "agenthost.testing.openai_stub", "--port", "0", "--echo"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=settings.BASE_DIR,
    )
    try:
        base_url = server.stdout.readline().split()[-2]
        provider = configure(settings, base_url, api_key_env="")

        echoed = ask(provider, {"role": "user", "content": "please lookup_order 1042"}, tools=[LOOKUP_TOOL])
        plain = ask(provider, {"role": "user", "content": "hello"})
    finally:
        server.terminate()
        server.wait(timeout=10)

    assert [call.name for call in echoed.tool_calls] == ["lookup_order"]
    assert plain.text == "echo: hello"


def test_it_sends_the_request_the_sdks_create_would_send(settings, openai_stub, monkeypatch):
    # The provider posts through the SDK without chat.completions.create's parameter transform: what reaches the
    # server — body, auth, the model's extra body and headers — must be what create() itself sends.
    import openai

    monkeypatch.setenv("LOCAL_TEST_API_KEY", SECRET)
    monkeypatch.setenv("ORG_HEADER", "team-blue")
    provider = configure(settings, openai_stub.base_url, models=[{
        "name": "gpt-5-mini", "accepts_temperature": False, "reasoning_effort": "low",
        "max_completion_tokens": 512, "extra_body": {"service_tier": "flex"}, "headers_env": {"X-Org": "ORG_HEADER"},
    }])
    request = ModelRequest(
        model="gpt-5-mini",
        messages=[
            {"role": "system", "content": "Help Ada."},
            USER,
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "lookup_order", "arguments": "{\"order_id\": \"1042\"}"},
            }]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"status\": \"shipped\"}"},
        ],
        tools=[LOOKUP_TOOL],
        temperature=0.3,
        response_schema={"name": "verdict", "schema": {
            "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
            "additionalProperties": False,
        }},
    )
    openai_stub.queue('{"ok": true}', '{"ok": true}')

    provider.complete(request)
    client = openai.OpenAI(base_url=openai_stub.base_url, api_key=SECRET, max_retries=0)
    client.chat.completions.create(**provider.request_params(request))

    ours, sdks = openai_stub.requests
    assert ours == sdks
    assert ours["service_tier"] == "flex" and "extra_body" not in ours
    assert "temperature" not in ours and ours["reasoning_effort"] == "low" and ours["tools"] == [LOOKUP_TOOL]
    header_names = ("authorization", "content-type", "x-org")
    assert [{name: h.get(name) for name in header_names} for h in openai_stub.headers] == [
        {"authorization": f"Bearer {SECRET}", "content-type": "application/json", "x-org": "team-blue"}
    ] * 2


CALLED = [{"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": "{}"}}]


@pytest.mark.parametrize(
    ("assistant", "words"),
    [
        ({"role": "assistant", "tool_calls": CALLED}, "'dict object' has no attribute 'content'"),
        ({"role": "assistant", "content": None, "tool_calls": CALLED}, "Input should be a valid string"),
    ],
)
def test_it_is_answered_http_500_by_the_stub_as_by_llama_cpp_without_a_string_content(provider, assistant, words):
    with pytest.raises(ProviderError) as raised:
        ask(provider, USER, assistant, {"role": "tool", "tool_call_id": "call_1", "content": "{}"}, tools=[LOOKUP_TOOL])

    assert "HTTP 500" in str(raised.value) and words in str(raised.value)


def test_it_is_answered_by_the_stub_with_an_empty_string_content_beside_tool_calls(provider, openai_stub):
    openai_stub.queue("It has shipped.")
    assistant = {"role": "assistant", "content": "", "tool_calls": CALLED}

    answer = ask(provider, USER, assistant, {"role": "tool", "tool_call_id": "call_1", "content": "{}"})

    assert answer.text == "It has shipped."


def test_it_lets_a_burst_of_clients_connect_to_the_stub_while_its_accept_loop_is_busy():
    # The accept loop not started stands for one that waits its turn on a loaded machine: the kernel must complete
    # every handshake of a burst by itself, or a client waits for its SYN to be sent again (1, 3, 7, 15 s) — the
    # timeout a run of eight cases side by side once met (tests/runs/test_concurrency.py).
    stub = OpenAIStub()
    address = urllib.parse.urlsplit(stub.base_url)
    clients: list[socket.socket] = []
    try:
        for _ in range(32):
            client = socket.create_connection((address.hostname, address.port), timeout=2.0)
            clients.append(client)
        assert len(clients) == 32
    finally:
        for client in clients:
            client.close()
        stub.stop()


def test_it_never_waits_on_a_connection_whose_bytes_its_own_handler_reads_meanwhile():
    # Each request's arrival asks, holding the stub's lock, whether the clients of the other requests in flight are
    # still there; a handler may read the bytes that made its connection readable between that select and the peek.
    # A blocking peek then waited for the client's next bytes: every request to the stub stalled 25 s (a run's judge
    # calls, tests/runs/test_judge_throttle.py, its cases Error). Here a reader thread takes each byte while this
    # thread asks, thousands of times: the old peek blocked within the first few thousand.
    ours, theirs = socket.socketpair()
    asked = threading.Event()

    def read_all() -> None:
        while theirs.recv(1):
            pass

    def ask_each_time() -> None:
        for _ in range(20_000):
            ours.send(b"x")
            assert _hung_up(theirs, 0) is False
        asked.set()

    reader = threading.Thread(target=read_all, daemon=True)
    asker = threading.Thread(target=ask_each_time, daemon=True)
    reader.start()
    asker.start()
    try:
        assert asked.wait(WAIT_SECONDS), "a question about a connection waited for its client's next bytes"
    finally:
        ours.close()
        asker.join(WAIT_SECONDS)
        theirs.close()

    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.close()
        assert _hung_up(theirs, 0) is True, "a client that hung up is still told apart"
