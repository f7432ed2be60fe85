"""A streamed call answered by the model layer (issue 33 item 3: an openai client in the team's code is routed
"streaming or not").

The model layer answers a request whole — recorded, replayed, held by the ledger, budgeted — so a streamed call is
asked of it as the same call unstreamed (`stream` and `stream_options` are transport: not part of the recorded
request), and its complete answer is handed back to the openai SDK as the server-sent events the API would have sent
for it: chat-completion chunks for `chat.completions.create(stream=True)`, the Responses API's events for
`responses.create(stream=True)` and `responses.stream(...)`. The SDK reads them with its own `Stream`/`AsyncStream`
classes, so the team's code gets the SDK's own chunk and event types.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

# The base URL of the openai client that reads a stream handed back by one of agenttest's own clients: never contacted.
_NOWHERE = "http://agenttest.invalid/v1/"

# Fields of a request that only say how its answer travels.
TRANSPORT = ("stream", "stream_options")


def unstreamed(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request as the model layer answers it: without its transport fields."""
    return {key: value for key, value in body.items() if key not in TRANSPORT}


def chat_chunks(completion: Mapping[str, Any], *, include_usage: bool) -> Iterator[dict[str, Any]]:
    """A chat completion (as JSON) as the chunks the API streams for it: the message and its tool calls in one delta,
    then the finish reason, then (asked for with stream_options.include_usage) the usage."""
    base = {key: completion.get(key) for key in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    for choice in completion.get("choices") or []:
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("refusal"):
            delta["refusal"] = message["refusal"]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": index, **call} for index, call in enumerate(message["tool_calls"])]
        yield {**base, "choices": [{"index": choice.get("index", 0), "delta": delta, "finish_reason": None}]}
        yield {**base, "choices": [{"index": choice.get("index", 0), "delta": {},
                                    "finish_reason": choice.get("finish_reason")}]}
    if include_usage:
        yield {**base, "choices": [], "usage": completion.get("usage")}


def response_events(payload: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """A Responses API `response` (as JSON) as the events the API streams for it, each output item added, its text,
    refusal or arguments given as one delta, and done, between `response.created` and `response.completed`."""
    number = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(number), **fields}

    yield event("response.created", response={**payload, "status": "in_progress", "output": [], "usage": None})
    for index, item in enumerate(payload.get("output") or []):
        item_id = item.get("id", "")
        at = {"item_id": item_id, "output_index": index}
        if item.get("type") == "message":
            yield event("response.output_item.added", output_index=index,
                        item={**item, "content": [], "status": "in_progress"})
            for part_index, part in enumerate(item.get("content") or []):
                where = {**at, "content_index": part_index}
                if part.get("type") == "refusal":
                    yield event("response.content_part.added", **where, part={"type": "refusal", "refusal": ""})
                    yield event("response.refusal.delta", **where, delta=part.get("refusal", ""))
                    yield event("response.refusal.done", **where, refusal=part.get("refusal", ""))
                else:
                    empty = {"type": "output_text", "text": "", "annotations": []}
                    yield event("response.content_part.added", **where, part=empty)
                    yield event("response.output_text.delta", **where, delta=part.get("text", ""), logprobs=[])
                    yield event("response.output_text.done", **where, text=part.get("text", ""), logprobs=[])
                yield event("response.content_part.done", **where, part=part)
        elif item.get("type") == "function_call":
            yield event("response.output_item.added", output_index=index,
                        item={**item, "arguments": "", "status": "in_progress"})
            yield event("response.function_call_arguments.delta", **at, delta=item.get("arguments", ""))
            yield event("response.function_call_arguments.done", **at, name=item.get("name", ""),
                        arguments=item.get("arguments", ""))
        else:
            yield event("response.output_item.added", output_index=index, item=item)
        yield event("response.output_item.done", output_index=index, item=item)
    finished = "response.incomplete" if payload.get("status") == "incomplete" else "response.completed"
    yield event(finished, response=dict(payload))


def sse_body(events: Iterable[dict[str, Any]], *, done: bool = True) -> bytes:
    """`events` as the body of a server-sent-events response: a Responses API event under its type (`event:`), a chat
    chunk (no such type) as data alone; `done` ends it with chat completions' `[DONE]`."""
    lines = []
    for item in events:
        kind = item.get("type") if isinstance(item.get("type"), str) and "." in item["type"] else None
        lines.append((f"event: {kind}\n" if kind else "") + f"data: {json.dumps(item)}\n\n")
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def as_stream(events: Iterator[dict[str, Any]], *, client: Any, options: Any, cast_to: Any, stream_cls: Any) -> Any:
    """`events` as the openai SDK's answer to the streamed request `options` of `client`: a response of server-sent
    events to the request the client built, processed by the client itself — a `Stream`/`AsyncStream` of
    `stream_cls`, or the raw or streaming response wrapper its `with_raw_response`/`with_streaming_response` ask for
    (the Agents SDK streams that way). Awaitable for an async client."""
    import httpx2

    # The request as far as the client reads it back: its URL, and its headers (whether a raw or streaming response
    # wrapper was asked for). Not the client's own _build_request, which reads the platform (a process) for headers.
    headers = {key: value for key, value in options.headers.items() if isinstance(value, str)} if isinstance(
        options.headers, Mapping) else {}
    url = str(client.base_url).rstrip("/") + "/" + str(options.url).lstrip("/")
    response = httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=sse_body(events),
        request=httpx2.Request(str(options.method).upper(), url, headers=headers),
    )
    return client._process_response(cast_to=cast_to, options=options, response=response, stream=True,
                                    stream_cls=stream_cls)


@functools.cache
def _reader(asynchronous: bool) -> Any:
    import openai

    kind = openai.AsyncOpenAI if asynchronous else openai.OpenAI
    return kind(api_key="agenttest-answers-in-process", base_url=_NOWHERE, max_retries=0)


def as_own_stream(events: Iterator[dict[str, Any]], *, path: str, cast_to: Any, event_type: Any,
                  asynchronous: bool) -> Any:
    """`events` as the openai SDK's `Stream`/`AsyncStream` of `event_type`, for a client of agenttest's own that is
    not an openai client (the python runtime's given client, the Agents SDK's chat-completions client): read, as
    `as_stream` does, by an openai client that sends nothing. Awaitable when `asynchronous`."""
    import openai
    from openai._models import FinalRequestOptions

    stream_cls = (openai.AsyncStream if asynchronous else openai.Stream)[event_type]
    options = FinalRequestOptions.construct(method="post", url=path, headers={})
    return as_stream(events, client=_reader(asynchronous), options=options, cast_to=cast_to, stream_cls=stream_cls)
