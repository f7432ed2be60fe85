"""What the property tests of the case seal (issue 33) compose a team's agent from, in every framework: the bodies a
team's tool may have, the model that calls every tool it is offered, and the check of what a case did.

A tool's body is one of:
- `effect`: acts on the outside world — asks the bank (a POST to the listener), then writes down locally that it did
  (a marker file). Not declared effect-free: mocked or blocked under test; run any other way (a loop calling it
  itself, an allowed tool calling it), its POST is refused by the network seal, so nothing is written either;
- `own:<api>` / `own_async:<api>` / `own_stream:<api>`: asks a model through the tool's own `openai.OpenAI()` /
  `AsyncOpenAI()` client (`chat` completions or `responses`; streamed), the client's base URL the listener — a request
  that bypassed the model layer would arrive there. Declared effect-free;
- `socket`: opens a socket to the listener by hand and sends it a request. Declared effect-free;
- `loop`: a hand-written loop over the team's own side-effecting functions, calling them directly beside the
  framework's routing. Declared effect-free (wrongly: what the seal is for).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Answer, Call

BODIES = ("effect", "own:chat", "own:responses", "own_async:chat", "own_async:responses", "own_stream:chat",
          "own_stream:responses", "socket", "loop")
# Bodies that, allowed to run, reach the outside world: the case is an Error naming where.
BREACHING = ("socket", "loop")
# What the case does with a tool: mocks it, allows it to run (an effect-free one only), or neither (blocked).
CHOICES = ("mocked", "allowed", "neither")
OWN_QUESTION = "What is the exchange rate today?"
OWN_ANSWER = "1.08"
MOCKED = "acted (mock)"

# The team's helpers, at the top of its module. `happen` asks the bank first: what the seal refuses never happened.
HELPERS = '''
import asyncio
import json
import os
import socket
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from openai import AsyncOpenAI, OpenAI

MARKERS = Path(os.environ["SHOP_MARKERS"])
LISTENER = os.environ["SHOP_LISTENER"]


def _written(what, details):
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / f"{what}-{len(list(MARKERS.iterdir()))}").write_text(json.dumps(details))


def happen(what, **details):
    request = urllib.request.Request(LISTENER + "/" + what, data=json.dumps(details).encode(), method="POST")
    urllib.request.urlopen(request, timeout=10).read()
    _written(what, details)
    return "acted for real"


def knock(what):
    address = urlsplit(LISTENER)
    with socket.create_connection((address.hostname, address.port), timeout=5) as connection:
        connection.sendall(f"POST /{what} HTTP/1.0\\r\\nContent-Length: 0\\r\\n\\r\\n".encode())
        connection.recv(64)
    _written(what, {})
    return "knocked for real"


def run_by_hand(what):
    for step in ("reserve", "charge"):
        IMPLEMENTATIONS[step](f"{what}-{step}")
    return "done by hand"


IMPLEMENTATIONS = {"reserve": happen, "charge": happen}


def ask_own(api):
    client = OpenAI(api_key="sk-own", base_url=LISTENER + "/v1", max_retries=0)
    if api == "chat":
        answer = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "OWN_QUESTION"}]
        )
        return "rate: " + (answer.choices[0].message.content or "")
    return "rate: " + client.responses.create(model="gpt-4o-mini", input="OWN_QUESTION").output_text


def ask_own_streamed(api):
    client = OpenAI(api_key="sk-own", base_url=LISTENER + "/v1", max_retries=0)
    if api == "chat":
        stream = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "OWN_QUESTION"}], stream=True
        )
        return "rate: " + "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    with client.responses.stream(model="gpt-4o-mini", input="OWN_QUESTION") as stream:
        return "rate: " + stream.get_final_response().output_text


async def ask_own_async(api):
    client = AsyncOpenAI(api_key="sk-own", base_url=LISTENER + "/v1", max_retries=0)
    if api == "chat":
        answer = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "OWN_QUESTION"}]
        )
        return "rate: " + (answer.choices[0].message.content or "")
    return "rate: " + (await client.responses.create(model="gpt-4o-mini", input="OWN_QUESTION")).output_text
'''.replace("OWN_QUESTION", OWN_QUESTION)


def body_call(body: str, name: str, *, in_async: bool) -> str:
    """The expression a tool named `name` returns for its body (`in_async`: inside an `async def`)."""
    if body == "effect":
        return f'happen("{name}")'
    if body == "socket":
        return f'knock("{name}")'
    if body == "loop":
        return f'run_by_hand("{name}")'
    kind, api = body.split(":")
    if kind == "own":
        return f'ask_own("{api}")'
    if kind == "own_stream":
        return f'ask_own_streamed("{api}")'
    return f'(await ask_own_async("{api}"))' if in_async else f'asyncio.run(ask_own_async("{api}"))'


def bodies() -> st.SearchStrategy[str]:
    return st.sampled_from(BODIES)


def choices() -> st.SearchStrategy[str]:
    return st.sampled_from(CHOICES)


def effect_free(body: str) -> bool:
    return body != "effect"


def case_choice(body: str, choice: str) -> str:
    """What the case does with a tool of `body`: only an effect-free tool may be allowed to run (as at save)."""
    return "neither" if choice == "allowed" and not effect_free(body) else choice


def tool_name(tool: dict[str, Any]) -> str:
    return tool.get("name") or tool.get("function", {}).get("name", "")


def _called(request: ModelRequest) -> set[str]:
    return {call["function"]["name"] for message in request.chat_messages() if message["role"] == "assistant"
            for call in message.get("tool_calls") or []}


def every_tool_once(issued: list[str]) -> Callable[[ModelRequest], Answer | str]:
    """The model: a tool's own question answered OWN_ANSWER; otherwise calls each tool it is offered once, last offered
    first, then says it is done. Each call it makes is appended to `issued`."""

    def answer(request: ModelRequest) -> Answer | str:
        messages = request.chat_messages()
        if messages and messages[-1].get("content") == OWN_QUESTION:
            return OWN_ANSWER
        called = _called(request)
        for tool in reversed(request.tools):
            name = tool_name(tool)
            if name and name not in called:
                issued.append(name)
                parameters = tool.get("parameters") or tool.get("function", {}).get("parameters") or {}
                return Answer(tool_calls=[Call(name, {key: "go" for key in parameters.get("properties", {})})])
        return "done"

    return answer


def own_requests(requests: list[ModelRequest]) -> int:
    return sum(1 for request in requests
               if (messages := request.chat_messages()) and messages[-1].get("content") == OWN_QUESTION)


def check_case(
    *, status: str, reason: str, answered: list[tuple[str, str, str]], tools: dict[str, tuple[str, str]],
    issued: list[str], outside: set[str], host_port: str, model_requests: list[ModelRequest], context: str,
) -> None:
    """What must hold of a case whose side effects, at the listener and in marker files, were zero (checked by the
    caller): each tool call the seam answered was answered by the case's choice for it (`answered`: function, outcome,
    result); an allowed own-client tool got the model layer's answer, one model request per run; and a case that
    would have had an effect or a model call bypassing the layer is an Error or a Failed naming it.

    `tools`: name → (body, choice). `issued`: the calls the model made, in order. `outside`: the tools the team's code
    runs itself, beyond the seam (a loop calling its functions directly)."""
    for name, outcome, result in answered:
        body, choice = tools[name]
        expected = {"mocked": "mocked", "allowed": "allowed", "neither": "blocked"}[choice]
        assert outcome == expected, (name, outcome, context)
        if outcome == "mocked":
            assert result == MOCKED, (name, result, context)
        if outcome == "allowed" and body.startswith("own"):
            assert result == f"rate: {OWN_ANSWER}", (name, result, context)
    allowed_own = sum(1 for name, outcome, _ in answered if outcome == "allowed" and tools[name][0].startswith("own"))
    # Calls of no tool of the team's (a framework's hand-off) are issued too.
    kinds = {name: tools.get(name, ("", "")) for name in issued}
    direct_own = sum(1 for name in issued if name in outside and kinds[name][0].startswith("own"))
    # Every own-client request reached the model under test through the layer: none more (nothing answered twice),
    # none less (the listener, their base URL, saw none — checked by the caller).
    assert allowed_own <= own_requests(model_requests) <= allowed_own + direct_own, (
        allowed_own, own_requests(model_requests), len(model_requests), answered, context)

    breaches = [name for name in issued
                if name in outside or (kinds[name][1] == "allowed" and kinds[name][0] in BREACHING)]
    if breaches:
        first = breaches[0]
        assert status == "error", (status, reason, context)
        assert f"'{first}'" in reason or host_port in reason, (first, reason, context)
    elif any(outcome == "blocked" for _, outcome, _ in answered):
        assert status in ("failed", "error"), (status, reason, context)
        assert any(f"'{name}'" in reason or name in reason for name, outcome, _ in answered if outcome == "blocked"), (
            reason, context)
    else:
        assert status == "passed", (status, reason, context)
        # A passed case ran each call the model made to a tool (none lost in a nested or streamed run).
        ran = {name for name, _, _ in answered}
        assert [name for name in issued if name in tools and name not in outside and name not in ran] == [], (
            issued, answered, context)
