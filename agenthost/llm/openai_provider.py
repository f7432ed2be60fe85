"""The `openai` provider: the official SDK against any OpenAI-compatible base URL (OpenAI, Azure OpenAI, vLLM, Ollama,
llama.cpp, LiteLLM).

Retries on 429/5xx and connection errors are the SDK's own (max_retries, honouring Retry-After) — except for a request
with a deadline (a test case's timeout): its attempts are made here, by the same rules, each one's timeout capped at
the time left and none started past the deadline, since the SDK gives every attempt the whole timeout and a case
would wait timeout × attempts. What is left becomes a ProviderError whose message never carries the key or request
headers.

What each model accepts differs (a reasoning model refuses `temperature`, takes `reasoning_effort` and
`max_completion_tokens`), so every request is built from the model's own options in the providers file.
"""

from __future__ import annotations

import os
import random
import re
import time
from typing import TYPE_CHECKING, Any

from agenthost.llm.base import (
    DEADLINE,
    RESPONSES,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
)
from agenthost.llm.responses import parse_payload
from common.inputs import is_env_name, json_value_issue
from common.provider_config import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, OPENAI_BASE_URL, is_number

if TYPE_CHECKING:
    # The SDK is imported by what calls a model, not with the registry: its import is about half a CPU second, which
    # every process (migrate, check, apply, the web server) paid before its first line.
    import openai
    from openai.types.responses import Response

# Local servers (vLLM, Ollama, the test stub) ignore the key, but the SDK insists on having one.
_PLACEHOLDER_KEY = "not-needed"
# A server's error: its first line, then one line per problem it lists, each kept readable.
_MAX_FIRST_LINE = 300
_MAX_PROBLEM_LINE = 200
_MAX_PROBLEMS = 8
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
# The SDK's retry rules, for the attempts made here: statuses worth another attempt, the back-off between attempts
# (0.5, 1, 2 … s up to 8 s, less up to a quarter at random) and the longest Retry-After that is waited for.
_RETRY_STATUSES = frozenset({408, 409, 429})
_FIRST_RETRY_WAIT = 0.5
_MAX_RETRY_WAIT = 8.0
_MAX_RETRY_AFTER = 120.0
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# Request fields an OpenAI-compatible server may read as the answer's length limit, when set through extra_body.
_LENGTH_FIELDS = ("max_tokens", "max_completion_tokens", "n_predict")
# The model option that changes a request parameter an endpoint may refuse as unsupported.
_OPTION_FOR_PARAMETER = {
    "temperature": ("accepts_temperature = false", "the model accepts only its default temperature"),
    "max_tokens": ("max_completion_tokens", "set it instead of max_tokens"),
    "max_completion_tokens": ("max_completion_tokens", "remove or lower it"),
    "reasoning_effort": ("reasoning_effort", "remove it or pick a level the model supports"),
    "response_format": ("structured_output = false", "the model does not support structured output"),
}


def _table_problems(where: str, value: Any, *, env: bool) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where} must be a table"]
    problems = []
    for key, item in value.items():
        if env and not _HEADER_NAME.match(str(key)):
            problems.append(f"{where}: {key!r} is not a valid HTTP header name")
        elif env and not is_env_name(item):
            problems.append(
                f"{where}: header {key!r} must name the environment variable that holds its value, got {item!r}"
            )
    return problems


def _model_option_problems(where: str, model: dict[str, Any]) -> list[str]:
    problems = []
    for field in ("accepts_temperature", "structured_output"):
        if field in model and not isinstance(model[field], bool):
            problems.append(f"{where}: field {field!r} must be true or false, got {model[field]!r}")
    effort = model.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        levels = ", ".join(REASONING_EFFORTS)
        problems.append(f"{where}: field 'reasoning_effort' must be one of {levels}, got {effort!r}")
    limit = model.get("max_completion_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        problems.append(f"{where}: field 'max_completion_tokens' must be a whole number ≥ 1, got {limit!r}")
    if "extra_body" in model:
        problems.extend(_table_problems(f"{where}: field 'extra_body'", model["extra_body"], env=False))
        # Sent as JSON with every request: NaN or Infinity there would make every call on this model fail.
        if isinstance(model["extra_body"], dict) and (issue := json_value_issue(
            model["extra_body"], nul=False, int_range=False
        )) is not None:
            problems.append(f"{where}: field 'extra_body.{issue[0]}': {issue[1]}")
    if "headers_env" in model:
        problems.extend(_table_problems(f"{where}: field 'headers_env'", model["headers_env"], env=True))
    return problems


def readable_server_message(body: Any) -> str:
    """A server's error as a person reads it: the first line, then one line per problem it lists — a pydantic
    validation list (FastAPI's `detail`, or its text in `message`) is the decisive part, so it is never cut off."""
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, list):
            lines = [_problem_line(item) for item in detail]
            return _join("the server refused the request:", [line for line in lines if line])
        text = body.get("message") if isinstance(body.get("message"), str) else detail
    else:
        text = body
    if not isinstance(text, str) or not text.strip():
        return "no error message"
    first, *rest = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    problems: list[str] = []
    for line in rest:
        if line.strip().lower().startswith("for further information"):
            continue
        if line.startswith((" ", "\t")) and problems:
            problems[-1] = f"{problems[-1]}: {_without_input(line.strip())}"
        else:
            problems.append(line.strip())
    return _join(first, problems)


def _problem_line(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    location = ".".join(str(part) for part in item.get("loc") or [])
    message = str(item.get("msg") or item.get("message") or item)
    return f"{location}: {message}" if location else message


def _without_input(line: str) -> str:
    # Pydantic appends "[type=…, input_value=…, input_type=…]": the input may be a whole message, the type is enough.
    match = re.search(r"\s*\[type=([^,\]]+)[^\]]*\]\s*$", line)
    return f"{line[: match.start()]} ({match.group(1)})" if match else line


def _join(first: str, problems: list[str]) -> str:
    lines = [_cut(first, _MAX_FIRST_LINE)]
    lines.extend(f"- {_cut(problem, _MAX_PROBLEM_LINE)}" for problem in problems[:_MAX_PROBLEMS])
    if len(problems) > _MAX_PROBLEMS:
        lines.append(f"- … and {len(problems) - _MAX_PROBLEMS} more")
    return "\n".join(lines)


def _cut(text: str, limit: int) -> str:
    # Whitespace collapsed: a control character a server sent must not start a line of its own.
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _retry_wait(exc: openai.OpenAIError, retry: int) -> float | None:
    """How long to wait before retry number `retry` (from 0) of a request that failed with `exc`, as the SDK would;
    None when the SDK would not retry it."""
    import openai
    if isinstance(exc, openai.APIStatusError):
        retry_after = _retry_after(exc)
        if retry_after is not None and retry_after > _MAX_RETRY_AFTER:
            return None
        should = exc.response.headers.get("x-should-retry")
        if should == "false" or (
            should != "true" and exc.status_code not in _RETRY_STATUSES and exc.status_code < 500
        ):
            return None
        if retry_after:
            return retry_after
    elif not isinstance(exc, openai.APIConnectionError):
        return None
    return float(min(_FIRST_RETRY_WAIT * 2**retry, _MAX_RETRY_WAIT) * (1 - 0.25 * random.random()))


def _retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers
    for name, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        try:
            value = float(headers.get(name, ""))
        except ValueError:
            continue
        if value >= 0:
            return value / divisor
    return None


class OpenAIProvider(ModelProvider):
    kind = "openai"
    # A request built for the Responses API is POSTed to /responses as built (agenthost/llm/responses.py).
    speaks_responses = True
    # api_version: the Azure OpenAI API version; set, the base_url is the Azure resource's endpoint.
    option_keys = frozenset({"api_version", "headers_env"})
    model_option_keys = frozenset(
        {"accepts_temperature", "reasoning_effort", "max_completion_tokens", "structured_output", "extra_body",
         "headers_env"}
    )

    @classmethod
    def prepare(cls) -> None:
        import openai.types.chat
        import openai.types.responses  # noqa: F401

    @classmethod
    def validate_options(cls, spec: dict[str, Any]) -> list[str]:
        problems = []
        base_url = str(spec.get("base_url") or "").rstrip("/")
        api_version = spec.get("api_version")
        if api_version is not None:
            if not isinstance(api_version, str) or not api_version.strip():
                problems.append(f"field 'api_version' must be an Azure OpenAI API version, got {api_version!r}")
            if base_url in ("", OPENAI_BASE_URL):
                problems.append(
                    "field 'base_url' must be the Azure resource's endpoint (https://<resource>.openai.azure.com) "
                    "when 'api_version' is set"
                )
            if not spec.get("api_key_env"):
                problems.append("field 'api_key_env' is required for Azure OpenAI (name the env var)")
        elif not spec.get("api_key_env") and base_url in ("", OPENAI_BASE_URL):
            problems.append(f"field 'api_key_env' is required for {OPENAI_BASE_URL} (name the env var)")
        if "headers_env" in spec:
            problems.extend(_table_problems("field 'headers_env'", spec["headers_env"], env=True))
        for index, model in enumerate(spec.get("models") or []):
            if isinstance(model, dict):
                problems.extend(_model_option_problems(f"models[{index}] (model {model.get('name')!r})", model))
        return problems

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        super().__init__(name, options)
        self.base_url = options.get("base_url") or OPENAI_BASE_URL
        self.api_key_env = options.get("api_key_env", "")
        self.api_version = options.get("api_version")
        # Read once, when the provider is built: the registry rebuilds providers when the settings change.
        self._api_key = os.environ.get(self.api_key_env, "").strip() if self.api_key_env else _PLACEHOLDER_KEY
        self._models = {model["name"]: model for model in options.get("models") or [] if isinstance(model, dict)}
        self._headers = {
            model: self._env_headers({**(options.get("headers_env") or {}), **(spec.get("headers_env") or {})})
            for model, spec in self._models.items()
        }
        self._default_headers = self._env_headers(options.get("headers_env") or {})
        self._timeout = float(options.get("timeout", DEFAULT_TIMEOUT))
        self._max_retries = int(options.get("max_retries", DEFAULT_MAX_RETRIES))
        self._client = self._build_client() if self._api_key else None

    def _build_client(self) -> openai.OpenAI:
        import openai
        if self.api_version:
            # Azure names the deployment in the URL; the SDK puts the request's model there.
            return openai.AzureOpenAI(
                azure_endpoint=self.base_url, api_version=self.api_version, api_key=self._api_key,
                timeout=self._timeout, max_retries=self._max_retries,
            )
        return openai.OpenAI(
            base_url=self.base_url, api_key=self._api_key, timeout=self._timeout, max_retries=self._max_retries
        )

    @staticmethod
    def _env_headers(names: dict[str, str]) -> dict[str, str | None]:
        # A header whose variable is unset stays None: the call naming it fails saying which variable is missing.
        return {header: (os.environ.get(env, "").strip() or None) for header, env in names.items()}

    def __repr__(self) -> str:
        return f"<OpenAIProvider {self.name!r} {self.base_url}>"

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The chat-completions (or Responses API) parameters for `request` on its model, as its options in the
        providers file say."""
        options = self._models.get(request.model, {})
        if request.api == RESPONSES:
            return self._responses_params(request, options)
        params: dict[str, Any] = {"model": request.model, "messages": request.messages}
        if request.tools:
            params["tools"] = request.tools
        if request.temperature is not None and options.get("accepts_temperature", True):
            params["temperature"] = request.temperature
        # The settings the caller's own code set are sent as it built them; the providers file's options for the
        # model fill in only what they leave unset.
        params.update(request.settings)
        if "reasoning_effort" in options:
            params.setdefault("reasoning_effort", options["reasoning_effort"])
        if "max_completion_tokens" in options and "max_tokens" not in params:
            params.setdefault("max_completion_tokens", options["max_completion_tokens"])
        if request.response_schema and options.get("structured_output", True):
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.response_schema["name"],
                    "schema": request.response_schema["schema"],
                    "strict": True,
                },
            }
        if options.get("extra_body"):
            params["extra_body"] = options["extra_body"]
        headers = self._headers.get(request.model, self._default_headers)
        if headers:
            params["extra_headers"] = headers
        return params

    def _responses_params(self, request: ModelRequest, options: dict[str, Any]) -> dict[str, Any]:
        """A Responses API body: the framework's request as it built it, the providers file's options for the model
        filling in only what it left unset (its `reasoning_effort` as `reasoning.effort`, `max_completion_tokens` as
        `max_output_tokens`)."""
        params: dict[str, Any] = {"model": request.model, "input": request.messages}
        if request.tools:
            params["tools"] = request.tools
        if request.temperature is not None and options.get("accepts_temperature", True):
            params["temperature"] = request.temperature
        params.update(request.settings)
        if "reasoning_effort" in options and not (params.get("reasoning") or {}).get("effort"):
            params["reasoning"] = {**(params.get("reasoning") or {}), "effort": options["reasoning_effort"]}
        if "max_completion_tokens" in options:
            params.setdefault("max_output_tokens", options["max_completion_tokens"])
        if request.response_schema and options.get("structured_output", True) and "text" not in params:
            params["text"] = {"format": {"type": "json_schema", "name": request.response_schema["name"],
                                         "schema": request.response_schema["schema"], "strict": True}}
        if options.get("extra_body"):
            params["extra_body"] = options["extra_body"]
        headers = self._headers.get(request.model, self._default_headers)
        if headers:
            params["extra_headers"] = headers
        return params

    def complete(self, request: ModelRequest) -> ModelResponse:
        import openai
        if self._client is None:
            raise self._error(
                f"the environment variable {self.api_key_env} is empty or not set; it must hold the API key for "
                f"{self.base_url}",
                "missing_api_key",
                request,
            )
        params = self.request_params(request)
        missing = [header for header, value in (params.get("extra_headers") or {}).items() if value is None]
        if missing:
            names = {**(self.options.get("headers_env") or {}),
                     **(self._models.get(request.model, {}).get("headers_env") or {})}
            raise self._error(
                "the environment variable "
                + ", ".join(f"{names[header]} (header {header!r})" for header in missing)
                + " is empty or not set",
                "missing_header",
                request,
            )
        # The request goes out through the SDK's own POST — its client, auth, retries, errors and response model —
        # without `chat.completions.create`'s parameter transform: for the plain JSON built here it changes nothing,
        # yet it walks every message of the history on every call (1.4 ms a call at 13 messages; most of what a
        # short turn costs the process, and CPU that cases running side by side share under the GIL).
        options: dict[str, Any] = {}
        if "extra_body" in params:
            options["extra_json"] = params.pop("extra_body")
        if "extra_headers" in params:
            options["headers"] = params.pop("extra_headers")
        started = time.perf_counter()
        try:
            completion = self._post(params, options, request)
        except openai.APITimeoutError:
            raise self._error(f"{self.base_url} did not answer within the timeout", "timeout", request) from None
        except openai.APIConnectionError:
            raise self._error(f"cannot connect to {self.base_url}", "connection", request) from None
        except openai.RateLimitError as exc:
            message = f"rate limited (HTTP 429) by {self.base_url}: {self._server_message(exc)}"
            raise self._error(message, "rate_limited", request, retry_after=_retry_after(exc)) from None
        except openai.APIStatusError as exc:
            raise self._error(
                f"HTTP {exc.status_code} from {self.base_url}: {self._server_message(exc)}"
                + self._option_hint(exc, request),
                f"http_{exc.status_code}",
                request,
            ) from None
        except openai.OpenAIError as exc:
            message = f"unexpected answer from {self.base_url}: {self._scrub(str(exc))}"
            raise self._error(message, "provider_error", request) from None
        latency_ms = (time.perf_counter() - started) * 1000
        if request.api == RESPONSES:
            return self._responses_answer(completion, request, latency_ms)
        if not completion.choices:
            raise self._error(
                f"{self.base_url} answered with an empty 'choices' list (no answer at all)", "empty_response", request
            )
        choice = completion.choices[0]
        message = choice.message
        tool_calls = [
            ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "")
            for call in message.tool_calls or []
            if call.type == "function"
        ]
        return ModelResponse(
            text=message.content or "",
            tool_calls=tool_calls,
            finish_reason=choice.finish_reason or ("tool_calls" if tool_calls else "stop"),
            usage=_usage(completion.usage),
            latency_ms=latency_ms,
            model=completion.model or request.model,
            refusal=getattr(message, "refusal", None) or "",
            length_limit=self._length_limit(request) if choice.finish_reason == "length" else "",
        )

    def _responses_answer(self, answer: Response, request: ModelRequest, latency_ms: float) -> ModelResponse:
        if answer.error is not None or answer.status == "failed":
            error = answer.error
            raise self._error(
                f"{self.base_url} answered that the response failed: "
                f"{self._scrub(str(getattr(error, 'message', '') or 'no reason given'))}",
                str(getattr(error, "code", "") or "response_failed"),
                request,
            )
        payload = answer.model_dump(mode="json", exclude_unset=True, by_alias=True)
        if not payload.get("output"):
            raise self._error(
                f"{self.base_url} answered with an empty 'output' list (no answer at all)", "empty_response", request
            )
        response = parse_payload(payload, model=request.model, latency_ms=latency_ms)
        if response.finish_reason == "length":
            response.length_limit = self._length_limit(request)
        return response

    def _length_limit(self, request: ModelRequest) -> str:
        """What set the length limit an answer was cut off at, naming the options that were sent: some servers
        (llama-cpp-python) ignore max_completion_tokens and honour only extra_body's max_tokens."""
        options = self._models.get(request.model, {})
        extra = given if isinstance(given := options.get("extra_body"), dict) else {}
        sent = [f"extra_body.{key} (set to {extra[key]})" for key in _LENGTH_FIELDS if key in extra]
        if "max_completion_tokens" in options:
            sent.insert(0, f"max_completion_tokens (set to {options['max_completion_tokens']})")
        where = f"for model {request.model!r} of provider {self.name!r} in the providers file"
        if sent:
            return f"{' and '.join(sent)} {where}"
        return (
            f"the server's own limit (none is set {where}: set max_completion_tokens, or extra_body.max_tokens for a "
            "server that ignores it)"
        )

    def _post(self, params: dict[str, Any], options: dict[str, Any], request: ModelRequest) -> Any:
        """POST the request: the SDK's attempts, or — for a request with a deadline — attempts made here, each
        within the time left, none started once a wait for it would reach the deadline."""
        import openai
        from openai.types.chat import ChatCompletion
        from openai.types.responses import Response

        path, cast_to = ("/responses", Response) if request.api == RESPONSES else ("/chat/completions", ChatCompletion)
        assert self._client is not None, "complete() answers a provider without a key before anything is posted"
        # The SDK's overloads take one response class and its RequestOptions typed dict; the class is chosen per API
        # and the options are built as a plain dict of the same keys.
        if request.deadline is None:
            return self._client.post(path, cast_to=cast_to, body=params, options=options)  # type: ignore[call-overload]
        retry = 0
        while True:
            left = request.deadline - time.monotonic()
            if left <= 0:
                raise self._error("the caller's deadline passed before the request was sent; nothing was sent",
                                  DEADLINE, request)
            timeout = min(self._timeout, left)
            try:
                return self._client.post(  # type: ignore[call-overload]
                    path,
                    cast_to=cast_to,
                    body=params,
                    options={**options, "timeout": timeout, "max_retries": 0},
                )
            except openai.OpenAIError as exc:
                if isinstance(exc, openai.APITimeoutError) and timeout < self._timeout:
                    raise self._error(
                        f"{self.base_url} had not answered when the caller's deadline came ({timeout:.1f} s after "
                        "the request was sent)",
                        DEADLINE,
                        request,
                    ) from None
                wait = _retry_wait(exc, retry)
                if wait is None or retry >= self._max_retries or time.monotonic() + wait >= request.deadline:
                    raise
                retry += 1
                time.sleep(wait)

    def _error(
        self, message: str, code: str, request: ModelRequest, *, retry_after: float | None = None
    ) -> ProviderError:
        return ProviderError(
            f"provider {self.name!r}: {message}",
            code=code,
            provider=self.name,
            model=request.model,
            retry_after=retry_after,
        )

    def _server_message(self, exc: openai.APIStatusError) -> str:
        # Only the server's own error text: the SDK's message and the response may echo request headers.
        return self._scrub(readable_server_message(exc.body))

    def _option_hint(self, exc: openai.APIStatusError, request: ModelRequest) -> str:
        """For a 400 about a parameter the model does not support: which option of the providers file changes it."""
        if exc.status_code != 400:
            return ""
        body = exc.body if isinstance(exc.body, dict) else {}
        param = body.get("param") if isinstance(body.get("param"), str) else ""
        text = str(body.get("message") or "")
        if param not in _OPTION_FOR_PARAMETER:
            param = next((name for name in _OPTION_FOR_PARAMETER if re.search(rf"\b{name}\b", text)), param)
        where = f"for model {request.model!r} of provider {self.name!r} in the providers file"
        if param in _OPTION_FOR_PARAMETER:
            option, why = _OPTION_FOR_PARAMETER[param]
            return f"\n(the parameter {param!r} was refused: set {option} {where} — {why})"
        if param:
            return f"\n(the parameter {param!r} was refused: change it with the model's options or extra_body {where})"
        return ""

    def _scrub(self, text: str) -> str:
        # Some servers quote the key they rejected; it never leaves this object.
        if self._api_key and self._api_key != _PLACEHOLDER_KEY:
            text = text.replace(self._api_key, "[redacted]")
        return text


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    return Usage(
        input_tokens=_count(getattr(usage, "prompt_tokens", 0)),
        output_tokens=_count(getattr(usage, "completion_tokens", 0)),
        cached_input_tokens=_count(getattr(prompt_details, "cached_tokens", 0)),
        reasoning_tokens=_count(getattr(completion_details, "reasoning_tokens", 0)),
    )


def _count(value: Any) -> int:
    # Some servers send null, or a float, for a count they do not keep.
    return int(value) if is_number(value) and value >= 0 else 0
