"""The host's public surface for the harness. The harness apps import the host only here, and it exports only what
they use (tests/test_architecture.py holds it to that); plugins have `agenttest.plugin`.

- executor providers: asked first by the function-executor factory (ascending `order`, ties by name); one that
  takes a call may let that call only through to its real implementation by returning `PassThrough`;
- agent-load hooks: run each time an agent is loaded into a conversation, may rewrite its LLM config for it only;
- the conversation service: `conversation_open` gives a held test conversation (sealed: outside its case nothing
  can be sent to it), whose turns run in memory and are written once, with the case's result; `conversation_import`
  writes a conversation a team's service had (read from its traces) from plain data, bound to one of our agents;
- MCP tools: `declared_functions` expands an agent's declarations of MCP servers' tools, from the cached listings;
- the conversation browser: `conversation_for_user` (a conversation, if a person may see it), the conversation
  page (`conversation_panel_register` adds a panel to it, `conversation_page_render` shows it again with what a
  panel's refused form should say) and the links to the host's pages (`conversation_page_url`,
  `conversation_list_url`, `conversation_admin_url`), so no harness page names a host URL;
- the model layer: configured models and providers, and runtime providers the harness registers by name;
- the transcript: `transcript_load` reads a conversation, `transcript_from_stored` a stored transcript (a case
  result's), into the one shape the host's transcript partials draw (`agenthost/templates/agenthost/transcript/`);
- `function_execute`: a function run for real outside any conversation, as the factory resolves it (verifying a
  mock of an effect-free tool against it, `agenttest mocks verify`).
"""

from agenthost.browser import (
    conversation_admin_url,
    conversation_list_url,
    conversation_page_url,
    conversation_panel_register,
)
from agenthost.builtins.control import CONTROL_FLOW_FUNCTIONS
from agenthost.document import AgentDocument
from agenthost.executor import (
    FIRST_ORDER,
    executor_providers,
    register_executor_provider,
)
from agenthost.executor import execute as function_execute
from agenthost.functions import (
    FunctionContext,
    FunctionResult,
    PassThrough,
    function_is_effect_free,
    get_function,
)
from agenthost.held import HeldConversation
from agenthost.imported import PROVIDER_EXECUTED
from agenthost.llm.base import (
    DEADLINE,
    ModelConfig,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
    api_problem,
    response_problem,
    unfinished_answer,
)
from agenthost.llm.registry import (
    UnknownModel,
    configured_models,
    get_model,
    get_provider,
    parse_model_key,
    provider_is_free,
    providers_prepare,
    register_runtime_provider,
)
from agenthost.loading import (
    LoadedAgent,
    agent_as_stored,
    agent_callable_functions,
    register_agent_load_hook,
)
from agenthost.mcp.tools import (
    LiveListings,
    cached_listings,
    declared_functions,
    listing_store,
    refresh,
    servers_named,
)
from agenthost.models import Agent, Conversation, Message
from agenthost.redaction import redact, redact_text
from agenthost.runtimes.base import return_schema, runtime_prepare
from agenthost.runtimes.child import runtime_tool_declarations
from agenthost.runtimes.entry import team_code_refused
from agenthost.selectors import (
    conversation_for_user,
    conversation_messages,
)
from agenthost.services import (
    agent_create,
    agent_update,
    conversation_import,
    conversation_messages_append,
    conversation_open,
)
from agenthost.transcripts import START as TRANSCRIPT_START
from agenthost.transcripts import (
    Transcript,
    TranscriptCall,
    TranscriptEntry,
    TranscriptTurn,
    transcript_from_stored,
    transcript_load,
)
from agenthost.turns import (
    ConversationError,
    ConversationGone,
    InvalidInput,
    ModelCallFailed,
    StepLimitExceeded,
    TurnResult,
)
from agenthost.validation import agent_problems, unstorable_paths
from agenthost.views import conversation_page_render

# MCP listings for the harness: cache one (refused on a name clash), list servers now, the servers an agent names.
mcp_listing_store = listing_store
mcp_cached_listings = cached_listings
mcp_refresh = refresh
mcp_servers_named = servers_named

__all__ = [
    "AgentDocument",
    "CONTROL_FLOW_FUNCTIONS",
    "DEADLINE",
    "FIRST_ORDER",
    "Agent",
    "Conversation",
    "ConversationError",
    "ConversationGone",
    "FunctionContext",
    "FunctionResult",
    "function_execute",
    "HeldConversation",
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
    "PROVIDER_EXECUTED",
    "ProviderError",
    "api_problem",
    "StepLimitExceeded",
    "ToolCall",
    "TurnResult",
    "UnknownModel",
    "Usage",
    "agent_as_stored",
    "agent_callable_functions",
    "agent_create",
    "agent_problems",
    "agent_update",
    "configured_models",
    "conversation_messages",
    "conversation_import",
    "conversation_messages_append",
    "conversation_open",
    "conversation_panel_register",
    "conversation_page_render",
    "conversation_for_user",
    "conversation_page_url",
    "conversation_admin_url",
    "conversation_list_url",
    "declared_functions",
    "function_is_effect_free",
    "executor_providers",
    "get_function",
    "get_model",
    "get_provider",
    "mcp_cached_listings",
    "mcp_listing_store",
    "mcp_refresh",
    "mcp_servers_named",
    "parse_model_key",
    "provider_is_free",
    "providers_prepare",
    "redact",
    "unstorable_paths",
    "redact_text",
    "register_agent_load_hook",
    "register_executor_provider",
    "register_runtime_provider",
    "runtime_prepare",
    "runtime_tool_declarations",
    "team_code_refused",
    "response_problem",
    "unfinished_answer",
    "return_schema",
    "TRANSCRIPT_START",
    "Transcript",
    "TranscriptCall",
    "TranscriptEntry",
    "TranscriptTurn",
    "transcript_from_stored",
    "transcript_load",
]
