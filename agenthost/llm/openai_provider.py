"""The `openai` provider: the official SDK against any OpenAI-compatible base URL (OpenAI, Azure, vLLM, Ollama,
LiteLLM).

Retries on 429/5xx and connection errors are the SDK's own (max_retries, honouring Retry-After); this module only turns
what is left into a ProviderError whose message never carries the key or request headers.
"""

from __future__ import annotations

import os
import time
from typing import Any

import openai

from agenthost.llm.base import ModelProvider, ModelRequest, ModelResponse, ProviderError, ToolCall, Usage
from agenthost.llm.config import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, OPENAI_BASE_URL

# Local servers (vLLM, Ollama, the test stub) ignore the key, but the SDK insists on having one.
_PLACEHOLDER_KEY = "not-needed"
_MAX_SERVER_MESSAGE = 300


class OpenAIProvider(ModelProvider):
    kind = "openai"

    @classmethod
    def validate_options(cls, spec: dict[str, Any]) -> list[str]:
        base_url = str(spec.get("base_url") or "").rstrip("/")
        if not spec.get("api_key_env") and base_url in ("", OPENAI_BASE_URL):
            return [f"field 'api_key_env' is required for {OPENAI_BASE_URL} (name the env var)"]
        return []

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        super().__init__(name, options)
        self.base_url = options.get("base_url") or OPENAI_BASE_URL
        self.api_key_env = options.get("api_key_env", "")
        # Read once, when the provider is built: the registry rebuilds providers when the settings change.
        self._api_key = os.environ.get(self.api_key_env, "").strip() if self.api_key_env else _PLACEHOLDER_KEY
        self._client = (
            openai.OpenAI(
                base_url=self.base_url,
                api_key=self._api_key,
                timeout=float(options.get("timeout", DEFAULT_TIMEOUT)),
                max_retries=int(options.get("max_retries", DEFAULT_MAX_RETRIES)),
            )
            if self._api_key
            else None
        )

    def __repr__(self) -> str:
        return f"<OpenAIProvider {self.name!r} {self.base_url}>"

    def complete(self, request: ModelRequest) -> ModelResponse:
        if self._client is None:
            raise self._error(
                f"the environment variable {self.api_key_env} is empty or not set; it must hold the API key for "
                f"{self.base_url}",
                "missing_api_key",
                request,
            )
        params: dict[str, Any] = {"model": request.model, "messages": request.messages}
        if request.tools:
            params["tools"] = request.tools
        if request.temperature is not None:
            params["temperature"] = request.temperature
        started = time.perf_counter()
        try:
            completion = self._client.chat.completions.create(**params)
        except openai.APITimeoutError:
            raise self._error(f"{self.base_url} did not answer within the timeout", "timeout", request) from None
        except openai.APIConnectionError:
            raise self._error(f"cannot connect to {self.base_url}", "connection", request) from None
        except openai.RateLimitError as exc:
            message = f"rate limited (HTTP 429) by {self.base_url}: {self._server_message(exc)}"
            raise self._error(message, "rate_limited", request) from None
        except openai.APIStatusError as exc:
            raise self._error(
                f"HTTP {exc.status_code} from {self.base_url}: {self._server_message(exc)}",
                f"http_{exc.status_code}",
                request,
            ) from None
        except openai.OpenAIError as exc:
            message = f"unexpected answer from {self.base_url}: {self._scrub(str(exc))}"
            raise self._error(message, "provider_error", request) from None
        latency_ms = (time.perf_counter() - started) * 1000
        if not completion.choices:
            raise self._error(f"{self.base_url} answered without any choice", "empty_response", request)
        choice = completion.choices[0]
        message = choice.message
        tool_calls = [
            ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "")
            for call in message.tool_calls or []
            if call.type == "function"
        ]
        usage = completion.usage
        return ModelResponse(
            text=message.content or "",
            tool_calls=tool_calls,
            finish_reason=choice.finish_reason or ("tool_calls" if tool_calls else "stop"),
            usage=Usage(
                input_tokens=(usage.prompt_tokens or 0) if usage else 0,
                output_tokens=(usage.completion_tokens or 0) if usage else 0,
            ),
            latency_ms=latency_ms,
            model=completion.model or request.model,
        )

    def _error(self, message: str, code: str, request: ModelRequest) -> ProviderError:
        return ProviderError(f"provider {self.name!r}: {message}", code=code, provider=self.name, model=request.model)

    def _server_message(self, exc: openai.APIStatusError) -> str:
        # Only the server's own error text: the SDK's message and the response may echo request headers.
        body = exc.body
        text = body.get("message") if isinstance(body, dict) else body
        if not isinstance(text, str) or not text.strip():
            return "no error message"
        return self._scrub(text.strip())[:_MAX_SERVER_MESSAGE]

    def _scrub(self, text: str) -> str:
        # Some servers quote the key they rejected; it never leaves this object.
        if self._api_key and self._api_key != _PLACEHOLDER_KEY:
            text = text.replace(self._api_key, "[redacted]")
        return text
