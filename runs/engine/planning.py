"""What a run will execute, read from the database once: its suite's settings, its models and its case plans — and, as
each case is planned, a snapshot of its content (runs.models.CaseSnapshot), so a comparison later shows what ran.

A plan costs no case queries while it runs; cases are read a chunk at a time, so memory stays flat however large
the suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agenthost.seams import Agent, LiveListings, ModelConfig, UnknownModel, get_model, parse_model_key
from cases.models import Case
from cases.services import case_content, case_content_hash, case_to_document
from runs.engine.case_session import MockSpec
from runs.engine.plans import AssertionPlan, CasePlan, SuitePlan, TurnPlan
from runs.engine.simulated_user import SimulatedUserPlan
from runs.engine.tags import run_tag
from runs.models import CaseSnapshot, Run

PLAN_CHUNK = 100


def run_suite_plan(*, run: Run) -> SuitePlan:
    suite = run.suite
    return SuitePlan(
        extra_allowed=frozenset(suite.extra_allowed_functions or []),
        force_blocked=frozenset(suite.force_blocked_functions or []),
        judge_model=suite.judge_model,
        timeout_seconds=float(suite.case_timeout_seconds),
        network_allow=frozenset(suite.network_allow or []),
        tags=(run_tag(run.pk),),
        run_id=run.pk,
        update_snapshots=run.update_snapshots,
        rule_agents=frozenset(name for name, rules in Agent.objects.values_list("name", "rules") if rules),
        # Listed only if a case really calls an extra-allowed MCP tool (or hermeticity needs it), once per run.
        mcp_live=LiveListings(),
    )


def model_config(*, key: str, mode: str) -> ModelConfig:
    """The configured model; in replay mode an unconfigured one too (nothing calls it, so it has no price)."""
    try:
        return get_model(key)
    except UnknownModel:
        if mode != Run.Mode.REPLAY:
            raise
        provider, model = parse_model_key(key)
        return ModelConfig(provider=provider, model=model)


def pending_pairs(
    *, run: Run, models: list[ModelConfig], done: set[tuple[int | None, str, int]]
) -> Iterator[tuple[CasePlan, ModelConfig, int]]:
    """The case × model × trial triples still to run, case-major."""
    agent = run.suite.agent
    for start in range(0, len(run.case_ids), PLAN_CHUNK):
        plans = case_plans(
            case_ids=run.case_ids[start : start + PLAN_CHUNK], default_agent=agent, judge_model=run.suite.judge_model
        )
        for plan in plans:
            for model in models:
                for trial in range(run.trials):
                    if (plan.id, model.key, trial) not in done:
                        yield plan, model, trial


def simulated_user_plan(document: Any, *, judge_model: str) -> SimulatedUserPlan | None:
    """The case's simulated user as it runs, its model resolved: its own, else the suite's judge model."""
    if not isinstance(document, dict):
        return None
    return SimulatedUserPlan(
        persona=document.get("persona") or "",
        goal=document.get("goal") or "",
        facts=dict(document.get("facts") or {}),
        max_turns=int(document.get("max_turns") or 1),
        model=document.get("model") or judge_model or "",
        end_when=[(item["type"], dict(item.get("params") or {})) for item in document.get("end_when") or []],
    )


def case_plans(*, case_ids: list[int], default_agent: Any, judge_model: str = "") -> list[CasePlan]:
    cases = (
        Case.objects.filter(pk__in=case_ids)
        .select_related("entry_agent")
        .prefetch_related("history", "turns__assertions", "assertions", "mocks", "entry_agent__sub_agents")
    )
    by_id = {case.pk: case for case in cases}
    plans = []
    snapshots: dict[str, dict[str, Any]] = {}
    for case_id in case_ids:
        case = by_id.get(case_id)
        if case is None:
            continue
        # Hashed from what is about to run, not taken from the case row: the hash its results keep names the
        # snapshot stored below, whatever path last edited the case.
        content = case_content(case_to_document(case=case))
        content_hash = case_content_hash(content)
        snapshots[content_hash] = content
        turns = sorted(case.turns.all(), key=lambda t: (t.position, t.pk))
        plans.append(
            CasePlan(
                id=case.pk,
                name=case.name,
                type=case.type,
                entry_agent=case.entry_agent or default_agent,
                history=[{"role": h.role, "content": h.content} for h in case.history.all()],
                initial_state=dict(case.initial_state or {}),
                tables=case.tables if isinstance(case.tables, dict) else {},
                content_hash=content_hash,
                turns=[
                    TurnPlan(
                        user_message=turn.user_message,
                        assertions=[
                            AssertionPlan(a.type, dict(a.params or {}), a.fatal)
                            for a in sorted(turn.assertions.all(), key=lambda a: (a.position, a.pk))
                        ],
                    )
                    for turn in turns
                ],
                assertions=[
                    AssertionPlan(a.type, dict(a.params or {}), a.fatal)
                    for a in case.assertions.all()
                    if a.turn_id is None
                ],
                mocks=[
                    MockSpec(
                        function_name=m.function_name,
                        result=m.result,
                        arguments=m.arguments,
                        call_index=m.call_index,
                        stop=m.stop,
                        state_writes=dict(m.state_writes or {}),
                        table=m.table if isinstance(m.table, dict) else None,
                    )
                    for m in case.mocks.all()
                ],
                simulated_user=simulated_user_plan(case.simulated_user, judge_model=judge_model),
            )
        )
    # Content-addressed, so a content another run (or an earlier chunk) already stored is left as it is.
    CaseSnapshot.objects.bulk_create(
        [CaseSnapshot(content_hash=key, content=content) for key, content in snapshots.items()], ignore_conflicts=True
    )
    return plans
