"""`ModelLayerClient`: the `AsyncOpenAI` a runtime hands to a framework's own Responses model, its requests answered
in the process by the turn's model layer (agenthost/runtimes/responses.py says how). A module of its own, imported by
the runtimes when they build a model: the openai SDK is imported then, not when the runtimes register."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
from asgiref.sync import sync_to_async

from agenthost.llm.responses import as_response, is_responses, request_body
from agenthost.llm.streams import as_stream, response_events, unstreamed
from agenthost.runtimes.responses import NOWHERE


class ModelLayerClient(openai.AsyncOpenAI):
    """An `AsyncOpenAI` whose Responses API calls are answered by `answer` (responses_create bound to a turn and an
    agent), through the openai SDK's own request building: the framework's Responses model uses it unchanged. Any
    other endpoint is refused naming it; nothing goes to the network."""

    def __init__(self, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        super().__init__(api_key="agenttest-answers-in-process", base_url=NOWHERE, max_retries=0)
        self._answer = answer

    def copy(self, **_options: Any) -> ModelLayerClient:
        # A framework's per-request options (max_retries, timeout, headers) mean nothing to an answer made here.
        return self

    with_options = copy

    async def request(self, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None) -> Any:
        if not is_responses(options):
            raise TypeError(
                f"agenttest's model layer answers the Responses API here, not {str(options.method).upper()} "
                f"{options.url}"
            )
        body = request_body(options)
        if stream:
            # A streamed run (Runner.run_streamed, agent.run_stream): asked whole, handed back as the API's events.
            payload = await sync_to_async(self._answer, thread_sensitive=True)(unstreamed(body))
            return await as_stream(response_events(payload), client=self, options=options, cast_to=cast_to,
                                   stream_cls=stream_cls)
        payload = await sync_to_async(self._answer, thread_sensitive=True)(body)
        return as_response(payload, cast_to, options)
