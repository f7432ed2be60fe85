"""A model provider is only a model (issue 26, item 5): a provider kind that runs a framework's agent inside
`complete()` would have the framework execute the team's tools itself — outside the function-executor factory, so
under test an email is sent for real and the case still passes.

While a provider answers a model call (loop.call_model), the calling thread is marked as inside that provider. A
framework that reports what it runs is refused there, before it runs anything: for the OpenAI Agents SDK, a trace
processor refuses the start of a run (its trace) and of a function tool's span. The refusal is a BaseException, so
the framework's own error handling (which catches Exception) cannot swallow it; call_model turns it into the turn's
model failure. A framework agent is brought in as a runtime instead (agenthost/runtimes/base.py).

What this cannot see: a framework run on another thread than the provider's, or one with its tracing switched off.

The guard is registered when the SDK is imported, by whoever imports it first (a plugin, a runtime, the team's code):
importing it costs ~2 s of CPU, which a process that never touches the SDK (migrate, check, the web server) should
not pay.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_inside: dict[int, str] = {}
_lock = threading.Lock()
_installed = False


class ProviderRanTools(BaseException):  # noqa: N818 — a refusal through the framework's loop, not an error in it
    def __init__(self, provider: str, what: str) -> None:
        super().__init__(
            f"its provider is only a model provider, yet it started {what}, which would run tools itself, "
            "outside agenttest's seam: refused before it ran anything. A model provider is only a model; bring a "
            "framework's agent in as a runtime (the agent's `runtime` and `entry`), never wrapped in a provider"
        )
        self.provider = provider


@contextmanager
def provider_call(provider: str) -> Iterator[None]:
    """Mark the calling thread as inside `provider`'s complete() for the block."""
    ident = threading.get_ident()
    with _lock:
        before = _inside.get(ident)
        _inside[ident] = provider
    try:
        yield
    finally:
        with _lock:
            if before is None:
                _inside.pop(ident, None)
            else:
                _inside[ident] = before


def refuse_inside_provider(what: str) -> None:
    """Raise ProviderRanTools when the calling thread is inside a provider's complete()."""
    with _lock:
        provider = _inside.get(threading.get_ident())
    if provider is not None:
        raise ProviderRanTools(provider, what)


class _AgentsSdkGuard:
    """A trace processor of the OpenAI Agents SDK (its TracingProcessor interface) that refuses a run inside a
    provider."""

    def on_trace_start(self, trace: Any) -> None:
        refuse_inside_provider(f"an OpenAI Agents SDK run ({getattr(trace, 'name', 'workflow')!r})")

    def on_trace_end(self, trace: Any) -> None:
        pass

    def on_span_start(self, span: Any) -> None:
        data = getattr(span, "span_data", None)
        if getattr(data, "type", "") == "function":
            refuse_inside_provider(f"the OpenAI Agents SDK's tool {getattr(data, 'name', '')!r}")

    def on_span_end(self, span: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


def install_guards() -> None:
    """Register the guards of the installed frameworks, once per process: now if the SDK is imported already, else
    the moment it is imported."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    if SDK in sys.modules:
        _register(sys.modules[SDK])
    else:
        sys.meta_path.insert(0, _RegisterOnImport())


SDK = "agents"


def _register(sdk: Any) -> None:
    from agents.tracing import TracingProcessor

    sdk.add_trace_processor(type("AgentsSdkGuard", (_AgentsSdkGuard, TracingProcessor), {})())


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Finds the SDK's package as the path finder does and registers the guard once its `__init__` has run, before
    the importer gets the module: no code can run the SDK unguarded."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != SDK:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run_module = loader.exec_module

        def exec_module(module: Any) -> None:
            run_module(module)
            _register(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
