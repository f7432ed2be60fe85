"""The function-executor factory: the one place that decides who executes a function name.

Resolution order (ARCHITECTURE.md, a contract):
  1. a blank or missing name is rejected before anything else sees it;
  2. registered executor providers, ascending `order`, ties broken by provider name; first non-None wins;
  2b. the team's own implementation of a tool of an agent whose runtime is the team's code (agenthost/runtimes):
      the function its framework would have called, so nothing registered under the same name answers for it;
  3. a registered Python function with exactly that name;
  4. a function the agent declares with a static output;
  4b. an MCP tool the agent declares (agenthost/mcp): called on its server, for real — the last stage, so a provider
      (the test harness's mocks) always answers first;
  5. nothing: "Can't find function implementation of {name}", and the turn stops.
With no provider registered, steps 3–5 are exactly the pre-seam behaviour.

A provider that takes a call may still let it through to its real implementation (the harness does for control flow
and extra-allowed effect-free functions): its executor returns `PassThrough`, and the factory runs steps 3–5 for that
call, under the name being resolved. Nothing else can run a registered function past the providers.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from agenthost.functions import (
    Executor,
    ExecutorProvider,
    FunctionContext,
    FunctionError,
    FunctionResult,
    PassThrough,
    ProvidedExecutor,
    get_function,
    validate_arguments,
)
from agenthost.mcp import tools as mcp_tools
from agenthost.seal import exempt
from common.inputs import json_value_problem

logger = logging.getLogger(__name__)

_providers: list[ExecutorProvider] = []
_providers_lock = threading.Lock()


class InvalidFunctionName(ValueError):
    pass


# The order of the one provider that must be asked before every other: the test harness's mock provider, which owns
# every call of a conversation under test. A provider below it could answer — and run for real — calls a test must
# mock or block, so no order may be lower and only one provider may hold it.
FIRST_ORDER = -1_000_000


def register_executor_provider(provider: ExecutorProvider) -> None:
    name = getattr(provider, "name", "")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("an executor provider needs a unique, non-empty name (it breaks ties between equal orders)")
    order = getattr(provider, "order", None)
    if isinstance(order, bool) or not isinstance(order, int):
        raise ValueError(f"executor provider {provider.name!r} needs an integer order, got {order!r}")
    if order < FIRST_ORDER:
        raise ValueError(
            f"executor provider {provider.name!r} has order {order}; orders below {FIRST_ORDER} do not exist, so "
            "that the test harness's mock provider is always asked first"
        )
    with _providers_lock:
        if any(existing.name == provider.name for existing in _providers):
            raise ValueError(f"an executor provider named {provider.name!r} is already registered")
        first = next((existing for existing in _providers if existing.order == FIRST_ORDER), None)
        if order == FIRST_ORDER and first is not None:
            raise ValueError(
                f"executor provider {provider.name!r} asks for order {FIRST_ORDER}, which {first.name!r} holds: "
                "only one provider is asked before every other"
            )
        _providers.append(provider)


def unregister_executor_provider(provider: ExecutorProvider) -> None:
    with _providers_lock:
        _providers[:] = [existing for existing in _providers if existing.name != provider.name]


def executor_providers() -> list[ExecutorProvider]:
    """Providers in the order they are asked: ascending order, then name, never registration order."""
    with _providers_lock:
        return sorted(_providers, key=lambda provider: (provider.order, provider.name))


def mocked_by_name(name: str, conversation_id: int | None) -> bool:
    """Whether a provider says a call of `name` in this conversation would be answered by a mock (the harness's
    provider does for a case that mocks `name`). A provider asks this of itself through an optional
    `mocks(name, conversation_id) -> bool`; a runtime asks it before offering a tool its framework would otherwise
    run itself (a hosted tool), since such a tool can only be answered, never executed, through the seam."""
    for provider in executor_providers():
        mocks = getattr(provider, "mocks", None)
        if callable(mocks) and mocks(name, conversation_id):
            return True
    return False


def mocked_names(conversation_id: int | None) -> frozenset[str]:
    """Every name the providers say a call in this conversation would be answered by a mock (the names a case under
    test mocks), asked through an optional `mocked_names(conversation_id) -> Iterable[str]`. A runtime asks it for the
    tools of an MCP server its framework would connect to itself: their names are known only by connecting, which a
    test never does, so the ones a case mocks are offered in the server's place."""
    names: set[str] = set()
    for provider in executor_providers():
        listed = getattr(provider, "mocked_names", None)
        if callable(listed):
            names.update(name for name in listed(conversation_id) if isinstance(name, str) and name)
    return frozenset(names)


def case_deadline(conversation_id: int | None) -> float | None:
    """When (time.monotonic()) the case running this conversation times out, as a provider says through an optional
    `deadline(conversation_id) -> float | None` (the harness's, from the case session); None outside a case. A
    runtime that waits on a program of the team's stops waiting there."""
    deadlines = []
    for provider in executor_providers():
        deadline = getattr(provider, "deadline", None)
        if callable(deadline) and isinstance(found := deadline(conversation_id), int | float):
            deadlines.append(float(found))
    return min(deadlines, default=None)


def case_stopped(conversation_id: int | None, note: str) -> None:
    """Tell the case running this conversation how its agent took being stopped at the deadline, through a
    provider's optional `stopped(conversation_id, note)` (the harness's says it with the case's timeout)."""
    for provider in executor_providers():
        stopped = getattr(provider, "stopped", None)
        if callable(stopped):
            stopped(conversation_id, note)


def case_protocol(conversation_id: int | None, entries: list[dict[str, Any]]) -> None:
    """Hand what a process agent's program said in one turn, normalised (runtimes/protocol_transcript.py), to the
    case running this conversation, through a provider's optional `protocol(conversation_id, entries)` (the
    harness's keeps it for a `snapshotMatches` assertion)."""
    for provider in executor_providers():
        protocol = getattr(provider, "protocol", None)
        if callable(protocol):
            protocol(conversation_id, entries)


def missing_function_result(name: str) -> FunctionResult:
    return FunctionResult(content=f"Can't find function implementation of {name}", stop=True, outcome="missing")


def create_executor(name: str | None, context: FunctionContext) -> Executor:
    if name is None or not str(name).strip():
        raise InvalidFunctionName("a function call needs a function name; got a blank or missing name")
    for provider in executor_providers():
        # The providers are agenttest's (the harness's mocks) or a plugin's: not the team's code under the seal.
        with exempt():
            executor = provider.resolve(name, context)
        if executor is not None:
            return _provided(name, executor)
    return _pre_seam_executor(name, context)


def _provided(name: str, executor: ProvidedExecutor) -> Executor:
    def run(context: FunctionContext) -> FunctionResult:
        with exempt():
            result = executor(context)
        if isinstance(result, PassThrough):
            # The real implementation runs as the team's code: inside the case's seal again.
            # Bound to the name being resolved: a provider can let its own call through, never run another function.
            outcome = _pre_seam_executor(name, context)(context)
            with exempt():
                return result.then(outcome)
        return result

    return run


def _pre_seam_executor(name: str, context: FunctionContext) -> Executor:
    """Steps 3–5: exactly what resolution was before providers existed (2b only for a runtime's own tool)."""
    if context.implementation is not None:
        return _implementation_executor(name, context.implementation)
    registered = get_function(name)
    if registered is not None:
        return _registered_executor(name)
    declaration = context.declaration
    if declaration is not None and declaration.get("name") == name and "output" in declaration:
        return _static_executor(declaration["output"])
    if declaration is not None and declaration.get("name") == name and isinstance(declaration.get("mcp"), dict):
        return _mcp_executor
    return lambda _context: missing_function_result(name)


def _mcp_executor(context: FunctionContext) -> FunctionResult:
    # agenttest's own MCP client, reaching the server the seam decided to call: not sealed (loopback or not, the
    # team's code reaches an MCP server only through here).
    with exempt():
        return mcp_tools.execute(context)


def execute(name: str | None, context: FunctionContext) -> FunctionResult:
    try:
        executor = create_executor(name, context)
    except InvalidFunctionName as exc:
        return FunctionResult(content=str(exc), error=True, outcome="invalid")
    return executor(context)


def _run_registered_function(name: str, context: FunctionContext) -> FunctionResult:
    """Run the Python function registered under `name`: validated arguments in, errors out as tool results."""
    registered = get_function(name)
    if registered is None:
        return missing_function_result(name)
    problem = validate_arguments(registered.parameters, context.arguments)
    if problem:
        return FunctionResult(content=f"Invalid arguments for {name}: {problem}", error=True, outcome="invalid")
    try:
        result = registered.func(context, **context.arguments)
    except FunctionError as exc:
        return FunctionResult(content=f"{name} failed: {exc}", error=True)
    except (Exception, SystemExit) as exc:  # a broken tool must not crash the loop, nor exit the web worker
        logger.exception("function %s raised", name)
        return FunctionResult(content=f"{name} failed: {type(exc).__name__}: {exc}", error=True)
    if isinstance(result, str):
        return FunctionResult(content=result)
    problem = _result_problem(result)
    if problem:
        return FunctionResult(content=f"{name} failed: it returned {problem}", error=True)
    return result


def _result_problem(result: object) -> str:
    """What keeps a function's answer from being stored and sent to the model, or "". A plugin's function is code
    agenttest did not write: a set in its state writes must be its error, not the conversation's crash."""
    if not isinstance(result, FunctionResult):
        return f"a {type(result).__name__}, not text or a FunctionResult"
    if not isinstance(result.content, str):
        return f"content of type {type(result.content).__name__}, not text"
    if not isinstance(result.state_writes, dict) or not all(isinstance(key, str) for key in result.state_writes):
        return "state_writes that are not an object of name → value"
    try:
        json.dumps(result.state_writes, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return f"state_writes that are not JSON ({exc})"
    problem = json_value_problem(result.state_writes)
    return f"state_writes that cannot be stored ({problem})" if problem else ""


def _implementation_executor(name: str, implementation: Executor) -> Executor:
    def run(context: FunctionContext) -> FunctionResult:
        try:
            result = implementation(context)
        except FunctionError as exc:
            return FunctionResult(content=f"{name} failed: {exc}", error=True)
        except (Exception, SystemExit) as exc:  # the team's tool must not crash the turn, nor exit the web worker
            logger.exception("function %s raised", name)
            return FunctionResult(content=f"{name} failed: {type(exc).__name__}: {exc}", error=True)
        problem = _result_problem(result)
        return FunctionResult(content=f"{name} failed: it returned {problem}", error=True) if problem else result

    return run


def _registered_executor(name: str) -> Executor:
    return lambda context: _run_registered_function(name, context)


def _static_executor(output: object) -> Executor:
    content = output if isinstance(output, str) else json.dumps(output)
    return lambda _context: FunctionResult(content=content, outcome="static")
