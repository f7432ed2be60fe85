"""The public plugin module: the only import a plugin needs. Nothing else of agenttest is a plugin's to import.

A plugin is a module named in AGENTTEST_PLUGINS or by an installed `agenttest.plugins` entry point (see
agenttest/plugin_loading.py for how they load). It registers:

- tools — typed Python functions::

      from agenttest.plugin import tool

      @tool(outside_effects=False)
      def lookup_ticket(ticket_id: str, include_history: bool = False) -> dict:
          '''Look a support ticket up by its id.'''
          ...

      @tool(outside_effects=True)
      def send_ticket_note(ticket_id: str, text: str) -> str:
          '''Send a note to the ticket's owner.'''
          ...

  Name, description and JSON Schema come from the function; pydantic validates the model's arguments before the
  call. `outside_effects` says whether a call can change anything outside agenttest: only `False` lets a test suite
  extra-allow the tool; True or not saying (fail closed) means tests must mock it, or it is blocked. A first
  parameter annotated FunctionContext receives the call's context; raise FunctionError for a failure the model
  should read; return a str, a FunctionResult, or anything JSON-serialisable. `register_function` is the lower-level
  form with an explicit JSON Schema (`tool(parameters=...)` takes one too).
- the effects of a tool of a team's own agent code (an agent run by a runtime), declared without touching that code:
  `effects(find_order, outside_effects=False)` on the tool as the code defines it (an Agents SDK `FunctionTool`,
  the function behind a pydantic-ai tool, a plain function a `python` agent calls); the agent file's
  `outside_effects` mapping wins over it, and undeclared still counts as side-effecting.
- model-provider kinds — `register_provider_kind("acme-llm", AcmeProvider)` with a ModelProvider subclass
  (`complete(ModelRequest) -> ModelResponse`, raise ProviderError); it names its extra keys in `option_keys` /
  `model_option_keys` and checks them in the classmethod `validate_options(spec) -> list[str]` (`is_number` is the
  check every numeric option gets). A kind that answers offline with no key says `free = True`: a zero cost on its
  models then reads "$0", not "unpriced"; `estimate_usage(request, text, tool_calls)` gives such a kind the same
  deterministic token counts as the scripted kind. The providers file may then say `kind = "acme-llm"`. A provider
  is only a model: one that runs a framework's agent (which would run tools itself, outside the seam) is refused —
  bring such an agent in as a runtime (below).
- executor providers — objects with `name`, `order` and `resolve(name, context)`, asked before anything else which
  executor handles a function name (`register_executor_provider` / `unregister_executor_provider`).
- agent runtimes — `register_runtime(runtime)` with a `Runtime` subclass instance (agenthost/runtimes/base.py): an
  agent whose `runtime` is its name runs the team's code at its `entry` through it, every model call through
  `RuntimeTurn.complete` and every tool invocation through `RuntimeTurn.call_tool`; its `prepare(loaded_agent)`, if
  it has one, loads what a first turn would (a framework's modules) while a run sets up, before any case's clock
  starts. A model-provider kind is only a model: a framework that runs tools itself is brought in as a runtime, never
  wrapped in a provider.
- agent-load hooks — `hook(loaded_agent, conversation)`, run each time an agent enters a conversation
  (`register_agent_load_hook` / `unregister_agent_load_hook`).

A plugin that is also a Django app may bring a command that sets a deployment up (the demo's `demo_setup`): when
the harness apps are installed it applies a directory of agent, suite and case files (`files_apply(directory=...,
dry_run=False, prune=False)`, the service behind `agenttest apply`: all or nothing, raising FilesRejected with every
problem; its dry run returns the plan, each change's kind, name, action and file), plays sample conversations with
its agents (`Agent`; `conversation_start`, then `conversation_send` per user message, which returns a `TurnResult`
or raises ConversationError; `Conversation` to find those it made) and queues a suite's first run (`Suite`,
`run_trigger`, which raises RunError when it cannot queue one). `suite_create` with the agent by name and
`case_create` per case document create a suite in code; `split_model_key` reads a model key (`provider:model`) by
the one rule every reader of one applies. These are the services the web pages, the API and the
commands use, with their validation: a plugin goes through them, never around them.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker and an editor see; at run time each name is imported when first asked for
    from agenthost.executor import register_executor_provider, unregister_executor_provider
    from agenthost.functions import FunctionContext, FunctionError, FunctionResult, effects, register_function, tool
    from agenthost.llm.base import (
        ModelConfig,
        ModelProvider,
        ModelRequest,
        ModelResponse,
        ProviderError,
        ToolCall,
        Usage,
    )
    from agenthost.llm.registry import register_provider_kind
    from agenthost.llm.scripted import estimate_usage
    from agenthost.loading import register_agent_load_hook, unregister_agent_load_hook
    from agenthost.models import Agent, Conversation
    from agenthost.runtimes.base import Runtime, RuntimeTurn, TurnStopped, register_runtime, unregister_runtime
    from agenthost.runtimes.direct import DirectTools
    from agenthost.services import conversation_send, conversation_start
    from agenthost.turns import ConversationError, TurnResult
    from cases.files import FilesRejected, files_apply
    from cases.models import Suite
    from cases.services import case_create, suite_create
    from common.model_keys import split_model_key
    from common.provider_config import is_number
    from runs.services import RunError, run_trigger

# Where each public name lives. Imported when first asked for, so that importing this module needs no Django
# settings: the guide's stand-alone `from agenttest.plugin import DirectTools` runs in a plain script, where
# importing the host's models would raise ImproperlyConfigured / AppRegistryNotReady.
_HOMES = {
    "register_executor_provider": "agenthost.executor",
    "unregister_executor_provider": "agenthost.executor",
    "FunctionContext": "agenthost.functions",
    "FunctionError": "agenthost.functions",
    "FunctionResult": "agenthost.functions",
    "effects": "agenthost.functions",
    "register_function": "agenthost.functions",
    "tool": "agenthost.functions",
    "ModelConfig": "agenthost.llm.base",
    "ModelProvider": "agenthost.llm.base",
    "ModelRequest": "agenthost.llm.base",
    "ModelResponse": "agenthost.llm.base",
    "ProviderError": "agenthost.llm.base",
    "ToolCall": "agenthost.llm.base",
    "Usage": "agenthost.llm.base",
    "register_provider_kind": "agenthost.llm.registry",
    "register_agent_load_hook": "agenthost.loading",
    "unregister_agent_load_hook": "agenthost.loading",
    "Runtime": "agenthost.runtimes.base",
    "RuntimeTurn": "agenthost.runtimes.base",
    "TurnStopped": "agenthost.runtimes.base",
    "register_runtime": "agenthost.runtimes.base",
    "unregister_runtime": "agenthost.runtimes.base",
    "DirectTools": "agenthost.runtimes.direct",
    "estimate_usage": "agenthost.llm.scripted",
    "is_number": "common.provider_config",
    "split_model_key": "common.model_keys",
    # Setting a deployment up; the harness's names need the harness apps installed.
    "Agent": "agenthost.models",
    "Conversation": "agenthost.models",
    "conversation_send": "agenthost.services",
    "conversation_start": "agenthost.services",
    "ConversationError": "agenthost.turns",
    "TurnResult": "agenthost.turns",
    "Suite": "cases.models",
    "FilesRejected": "cases.files",
    "files_apply": "cases.files",
    "case_create": "cases.services",
    "suite_create": "cases.services",
    "RunError": "runs.services",
    "run_trigger": "runs.services",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


__all__ = [
    "Agent",
    "Conversation",
    "ConversationError",
    "DirectTools",
    "FilesRejected",
    "Runtime",
    "RuntimeTurn",
    "TurnStopped",
    "FunctionContext",
    "FunctionError",
    "FunctionResult",
    "ModelConfig",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "ProviderError",
    "ToolCall",
    "RunError",
    "Suite",
    "TurnResult",
    "Usage",
    "case_create",
    "conversation_send",
    "conversation_start",
    "effects",
    "estimate_usage",
    "files_apply",
    "is_number",
    "register_agent_load_hook",
    "register_executor_provider",
    "register_function",
    "register_provider_kind",
    "register_runtime",
    "run_trigger",
    "split_model_key",
    "suite_create",
    "tool",
    "unregister_agent_load_hook",
    "unregister_executor_provider",
    "unregister_runtime",
]
