"""The Responses API of the team's code, answered through the turn's model layer (issue 33 item 5).

The frameworks' default OpenAI models (the Agents SDK's `OpenAIResponsesModel`, pydantic-ai's) call
`client.responses.create`. Two ways lead here, both answering with the body the openai SDK built — what the framework
would send to `/responses` in production:

- `ModelLayerClient` (agenthost/runtimes/model_layer_client.py), an `AsyncOpenAI` whose requests never leave the
  process: a runtime hands it to the framework's own Responses model (model resolution), in chat and under test alike
  — a streamed run's requests answered whole and handed back as the API's events (agenthost/llm/streams.py);
- the case seal (agenthost/seal.py): any openai client the team's code makes itself during a case.

`responses_create` turns the body into a `ModelRequest` with `api="responses"` (recorded, replayed with stale
detection, budgeted, bound to the case's deadline, counted and written like every model call of the turn, on the
model under test) and the answer into the Responses API's `response` object.
"""

from __future__ import annotations

from typing import Any

from agenthost.llm.base import RESPONSES
from agenthost.llm.responses import (
    SERVER_STATE,
    carried_settings,
    response_payload,
)
from agenthost.runtimes.base import RuntimeTurn

# A base URL that is never contacted: the client's requests are answered in the process.
NOWHERE = "http://agenttest.invalid/v1/"
_OWN = ("model", "input", "tools", "temperature")


def responses_create(turn: RuntimeTurn, body: dict[str, Any], *, agent: str = "") -> dict[str, Any]:
    """A Responses API request (its JSON body) answered through the turn's model layer: the `response` object as
    JSON. A field the model layer cannot carry faithfully is refused by name (a TypeError, as the SDK raises for a
    bad argument), so no request is answered as another one."""
    if body.get("stream"):
        raise TypeError(
            "agenttest's model layer does not carry a streamed Responses API call (stream=True) yet: under agenttest "
            "the agent must call responses.create without streaming (Runner.run, agent.run do)"
        )
    refused = [name for name in SERVER_STATE if body.get(name) not in (None, False)]
    if refused:
        raise TypeError(
            f"agenttest's model layer does not carry {', '.join(refused)}: it asks the endpoint for state it kept "
            "from earlier requests, which a recording cannot replay — send the whole input instead"
        )
    carried = carried_settings()
    unknown = sorted(name for name in body if name not in _OWN and name not in carried and name != "stream")
    if unknown:
        raise TypeError(
            f"agenttest's model layer does not carry {', '.join(unknown)} (not a field of the Responses API this "
            "openai SDK knows): the request would not be the one the agent's code sends"
        )
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    temperature = body.get("temperature")
    settings = {name: body[name] for name in carried if name in body}
    if body.get("stream") is False:
        # Spelled out by some frameworks (pydantic-ai): sent as they send it.
        settings["stream"] = False
    response = turn.complete(
        messages=items,
        tools=list(body.get("tools") or []),
        temperature=float(temperature) if temperature is not None else None,
        settings=settings,
        agent=agent,
        api=RESPONSES,
    )
    return response_payload(
        response, model=turn.loaded.model, request_body=body,
        # No conversation id in it: the framework sends its output items (their ids built from this one) back in its
        # next request, which a replay in another conversation must find unchanged.
        response_id=f"resp_agenttest_{turn.turn}_{turn.steps}",
    )
