"""What a run executes, read once per run so executing a case costs no case queries: the suite's settings
(SuitePlan), each case (CasePlan) with its turns (TurnPlan) and assertions (AssertionPlan). Built by
runs/engine/planning.py, read by the case runner, the run loop and the trace tapes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agenthost.seams import Agent
from runs.engine.case_session import MockSpec
from runs.engine.simulated_user import SimulatedUserPlan


@dataclass
class AssertionPlan:
    type: str
    params: dict[str, Any]
    fatal: bool = False


@dataclass
class TurnPlan:
    user_message: str
    assertions: list[AssertionPlan] = field(default_factory=list)


@dataclass
class CasePlan:
    """Everything needed to run a case, read once per run so executing it costs no case queries."""

    id: int
    name: str
    type: str
    entry_agent: Agent
    history: list[dict[str, str]]
    initial_state: dict[str, Any]
    turns: list[TurnPlan]
    assertions: list[AssertionPlan]
    mocks: list[MockSpec]
    content_hash: str = ""
    # The records the stateful mocks read and update (runs/engine/tables.py); each execution starts from these.
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # After the scripted turns (or instead of them): a user played by a model (runs/engine/simulated_user.py).
    simulated_user: SimulatedUserPlan | None = None


@dataclass
class SuitePlan:
    extra_allowed: frozenset[str]
    force_blocked: frozenset[str]
    judge_model: str
    timeout_seconds: float
    tags: tuple[str, ...] = ()
    # The run the cases belong to: named by the seal of each test conversation.
    run_id: int | None = None
    # The run's per-provider concurrency limits (runs/engine/throttle.py), shared by its cases.
    throttles: Any = None
    # The run's live MCP listings (agenthost LiveListings), shared by its cases: each server listed once per run.
    mcp_live: Any = None
    # The agents that have rules (whose calls only the transcript knows); None: unknown, so every turn reads it.
    rule_agents: frozenset[str] | None = None
    # Hosts the suite's extra-allowed effect-free tools may reach; the case's seal refuses every other connection.
    network_allow: frozenset[str] = frozenset()
    # The run rewrites the snapshots its cases compare with (`agenttest run --update-snapshots`, Run.update_snapshots).
    update_snapshots: bool = False
