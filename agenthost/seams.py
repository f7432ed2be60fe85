"""The host's public surface for the harness (and any other plugin). The harness apps import the host only here.

- executor providers: asked first by the function-executor factory (ascending `order`, ties by name); one that
  takes a call may let that call only through to its real implementation by returning `PassThrough`;
- agent-load hooks: run each time an agent is loaded into a conversation, may rewrite its LLM config for it only;
- the conversation service: start, send, invoke_function (a conversation started with `seal=` refuses every send
  or invoke that does not present its `seal_key`);
- MCP tools: `declared_functions` expands an agent's declarations of MCP servers' tools, from the cached listings;
- the conversation browser: `conversation_list` (what a person may see, filtered) and `conversation_page_register`,
  which makes the host's list open each conversation on a page of the registering app instead of the chat;
- the model layer: configured models and providers, and runtime providers a plugin registers by name.
"""

from agenthost.browser import conversation_page_register
from agenthost.builtins.control import CONTROL_FLOW_FUNCTIONS
from agenthost.executor import (
    FIRST_ORDER,
    InvalidFunctionName,
    PassThrough,
    executor_providers,
    register_executor_provider,
    unregister_executor_provider,
)
from agenthost.functions import (
    Executor,
    ExecutorProvider,
    FunctionContext,
    FunctionResult,
    function_is_effect_free,
    get_function,
    register_function,
    registered_functions,
)
from agenthost.held import HeldConversation
from agenthost.llm.base import (
    DEADLINE,
    ModelConfig,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
    response_problem,
    unfinished_answer,
)
from agenthost.llm.registry import (
    UnknownModel,
    configured_models,
    get_model,
    get_provider,
    parse_model_key,
    register_provider_kind,
    register_runtime_provider,
    unregister_runtime_provider,
)
from agenthost.loading import (
    LoadedAgent,
    agent_as_stored,
    agent_callable_functions,
    callable_function_names,
    register_agent_load_hook,
    unregister_agent_load_hook,
)
from agenthost.mcp.tools import (
    LiveListings,
    cached_listings,
    declared_functions,
    listing_store,
    refresh,
    servers_named,
)
from agenthost.models import Agent, Conversation, Message, StateChange
from agenthost.redaction import redact, redact_text
from agenthost.runtimes.base import runtime_tool_names
from agenthost.selectors import (
    conversation_list,
    conversation_messages,
    conversation_state,
    conversation_state_timeline,
    sealed_filter,
)
from agenthost.services import (
    agent_create,
    agent_update,
    conversation_invoke_function,
    conversation_open,
    conversation_send,
    conversation_start,
)
from agenthost.turns import (
    ConcurrentTurn,
    ConversationError,
    ConversationGone,
    ConversationSealed,
    InvalidInput,
    ModelCallFailed,
    StepLimitExceeded,
    ToolCallRecord,
    TurnResult,
)
from agenthost.validation import (
    MAX_STEPS_MAX,
    MAX_STEPS_MESSAGE,
    MAX_STEPS_MIN,
    TEMPERATURE_MAX,
    TEMPERATURE_MESSAGE,
    TEMPERATURE_MIN,
    agent_problems,
    unstorable_paths,
)

start = conversation_start
# MCP listings for the harness: cache one (refused on a name clash), list servers now, the servers an agent names.
mcp_listing_store = listing_store
mcp_cached_listings = cached_listings
mcp_refresh = refresh
mcp_servers_named = servers_named
send = conversation_send
invoke_function = conversation_invoke_function

__all__ = [
    "CONTROL_FLOW_FUNCTIONS",
    "DEADLINE",
    "MAX_STEPS_MAX",
    "MAX_STEPS_MESSAGE",
    "MAX_STEPS_MIN",
    "TEMPERATURE_MAX",
    "TEMPERATURE_MESSAGE",
    "TEMPERATURE_MIN",
    "FIRST_ORDER",
    "Agent",
    "ConcurrentTurn",
    "Conversation",
    "ConversationError",
    "ConversationGone",
    "ConversationSealed",
    "Executor",
    "ExecutorProvider",
    "FunctionContext",
    "FunctionResult",
    "HeldConversation",
    "InvalidFunctionName",
    "InvalidInput",
    "LiveListings",
    "LoadedAgent",
    "Message",
    "ModelCallFailed",
    "ModelConfig",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "PassThrough",
    "ProviderError",
    "StateChange",
    "StepLimitExceeded",
    "ToolCall",
    "ToolCallRecord",
    "TurnResult",
    "UnknownModel",
    "Usage",
    "agent_as_stored",
    "agent_callable_functions",
    "runtime_tool_names",
    "agent_create",
    "agent_problems",
    "agent_update",
    "callable_function_names",
    "configured_models",
    "conversation_list",
    "conversation_messages",
    "conversation_state",
    "conversation_state_timeline",
    "conversation_invoke_function",
    "conversation_open",
    "conversation_page_register",
    "conversation_send",
    "conversation_start",
    "declared_functions",
    "function_is_effect_free",
    "executor_providers",
    "get_function",
    "get_model",
    "get_provider",
    "invoke_function",
    "mcp_cached_listings",
    "mcp_listing_store",
    "mcp_refresh",
    "mcp_servers_named",
    "parse_model_key",
    "redact",
    "unstorable_paths",
    "redact_text",
    "register_agent_load_hook",
    "register_executor_provider",
    "register_function",
    "register_provider_kind",
    "register_runtime_provider",
    "registered_functions",
    "response_problem",
    "sealed_filter",
    "send",
    "start",
    "unfinished_answer",
    "unregister_agent_load_hook",
    "unregister_executor_provider",
    "unregister_runtime_provider",
]
