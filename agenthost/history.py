"""Stored messages as the model reads them (OpenAI chat messages)."""

from __future__ import annotations

from typing import Any

from agenthost.models import Message


def history_as_model_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Stored messages → OpenAI chat messages. An assistant row and the tool calls/results after it form one block."""
    result: list[dict[str, Any]] = []
    block_calls: list[dict[str, Any]] = []
    block_results: list[dict[str, Any]] = []
    block_text: str | None = None
    in_block = False

    def flush() -> None:
        nonlocal block_calls, block_results, block_text, in_block
        if in_block:
            # Beside tool calls an empty content is sent as "": the spec allows null or no key there too, but
            # llama.cpp's chat templates read message.content and answer both with HTTP 500.
            entry: dict[str, Any] = {"role": "assistant", "content": block_text or ""}
            if block_calls:
                entry["tool_calls"] = block_calls
            if block_text or block_calls:
                result.append(entry)
            result.extend(block_results)
        block_calls, block_results, block_text, in_block = [], [], None, False

    for message in messages:
        if message.role == Message.Role.USER:
            flush()
            result.append({"role": "user", "content": message.content})
        elif message.role == Message.Role.ASSISTANT:
            flush()
            in_block, block_text = True, message.content
        elif message.role == Message.Role.TOOL_CALL:
            if block_results:
                flush()
            in_block = True
            block_calls.append(
                {
                    "id": message.tool_call_id,
                    "type": "function",
                    "function": {"name": message.function_name, "arguments": message.raw_arguments or "{}"},
                }
            )
        elif message.role == Message.Role.TOOL_RESULT:
            in_block = True
            block_results.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
    flush()
    return result
