"""What a turn returns (TurnResult, with a ToolCallRecord per call) and how a turn fails (ConversationError and its
kinds, each carrying what happened before it stopped)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agenthost.llm.base import Usage


class ConversationError(Exception):
    """A turn could not complete. `partial` holds what happened before it stopped."""

    code = "conversation_error"

    def __init__(self, message: str, *, partial: TurnResult | None = None) -> None:
        super().__init__(message)
        self.partial = partial


class StepLimitExceeded(ConversationError):
    code = "step_limit"


class ModelCallFailed(ConversationError):
    code = "model_error"

    def __init__(self, message: str, *, provider_code: str = "", partial: TurnResult | None = None) -> None:
        super().__init__(message, partial=partial)
        self.provider_code = provider_code


class InvalidInput(ConversationError):
    code = "invalid_input"


class ConversationGone(ConversationError):
    """The conversation was deleted while a turn ran in it: what the turn did has nowhere to be written."""

    code = "conversation_gone"


@dataclass
class ToolCallRecord:
    name: str
    arguments: Any
    result: str
    outcome: str
    agent: str
    tool_call_id: str = ""
    error: bool = False
    trigger: str = "model"
    stop: bool = False


@dataclass
class TurnResult:
    conversation_id: int
    turn: int
    output: str = ""
    finish: str = ""
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    agent_chain: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model_latency_ms: float = 0.0
    steps: int = 0
    models: list[str] = field(default_factory=list)
    # The graph nodes the turn ran, in order (a langgraph runtime agent's; "subgraph/node" for a subgraph's).
    nodes_visited: list[str] = field(default_factory=list)
    # The conversation state when the turn ended.
    state: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["usage"] = {**asdict(self.usage), "total_tokens": self.usage.total_tokens}
        return data


class ConcurrentTurn(ConversationError):
    code = "concurrent_turn"


class TurnClaimLost(ConcurrentTurn):
    """The turn ran past its claim (AGENTTEST_REQUEST_TIMEOUT) and another turn took the conversation over, so it
    stopped before starting anything more. What it did before is written all the same (after the other turn's)."""

    code = "turn_claim_lost"


class ConversationSealed(ConversationError):
    """The conversation was sealed by whoever started it, and the caller does not hold its key."""

    code = "sealed"
