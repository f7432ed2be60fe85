"""Freezing (issue 24): a result of a case with a simulated user becomes a scripted case — the user model's lines
become turns — landing as a disabled draft for review, like a recording's drafts.

The draft is made from what the result ran (its case snapshot, runs.models.CaseSnapshot), not from the case as it is
now, so the lines and the mocks, history and assertions they were written against belong together. A goalReached
assertion keeps the simulated user's goal as its own `goal`, so it judges the same thing without a simulated user.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agenthost.seams import Conversation
from cases.models import Case
from cases.schema import NAME_MAX_LENGTH
from cases.services import case_create
from cases.validation.problems import CaseValidationError
from runs.engine.errors import RunConflict
from runs.engine.simulated_user import BY_CONDITION, BY_USER
from runs.models import CaseResult, CaseSnapshot


@transaction.atomic
def result_freeze(*, result: CaseResult) -> Case:
    """A disabled scripted draft of `result`'s case in the same suite: its scripted turns, then one turn per line the
    simulated user wrote. Raises RunConflict saying why the result cannot be frozen."""
    simulation = result.simulation or {}
    lines = [m["content"] for m in result.transcript or [] if m.get("role") == "user" and m.get("simulated")]
    if not simulation.get("turns") or not lines:
        raise RunConflict(
            f"result #{result.pk} has no line of a simulated user to freeze: only a result of a case with a simulated "
            "user that took at least one turn can be frozen"
        )
    if result.case_id is None:
        raise RunConflict(f"the case of result #{result.pk} was deleted, so there is no suite to freeze it into")
    snapshot = CaseSnapshot.objects.filter(content_hash=result.case_hash).first() if result.case_hash else None
    if snapshot is None or not isinstance(snapshot.content.get("simulated_user"), dict):
        raise RunConflict(
            f"what result #{result.pk} ran was not kept (no snapshot of its case), so its lines cannot be paired "
            "with the case they answered; run the case again and freeze that result"
        )
    case = Case.objects.select_related("suite").get(pk=result.case_id)
    document = _frozen_document(result, case, snapshot.content, lines)
    try:
        return case_create(suite=case.suite, document=document)
    except CaseValidationError as exc:
        raise RunConflict(
            f"the frozen case would not be valid in suite {case.suite.name!r} as it is now: {exc}"
        ) from None


def _frozen_document(result: CaseResult, case: Case, content: dict[str, Any], lines: list[str]) -> dict[str, Any]:
    user = content["simulated_user"]
    scripted = list(content.get("turns") or [])
    turns = [*scripted, *({"user_message": line, "assertions": []} for line in lines)]
    first, last = len(scripted), len(turns) - 1
    span = f"turn {first}" if first == last else f"turns {first}–{last}"
    warnings = [
        f"frozen from result #{result.pk}: the simulated user's {len(lines)} line(s) are now fixed as {span}; each "
        f"answered what {result.model} said then, so if the agent answers differently a line may no longer fit — "
        "review them before enabling"
    ]
    stop = simulation_stop(result)
    if stop.get("by") not in (BY_USER, BY_CONDITION):
        warnings.append(f"the simulated conversation did not finish: {stop.get('text') or 'it was cut off'}")
    conversation = result.conversation_id
    if conversation is not None and not Conversation.objects.filter(pk=conversation).exists():
        conversation = None
    return {
        "name": _free_name(case, f" (frozen from result #{result.pk})"),
        "description": f"Frozen from result #{result.pk} (run #{result.run_id}, {result.model}) of {case.name!r}: "
        f"the simulated user's lines are {span}.",
        "enabled": False,
        "source": Case.Source.RECORDED,
        "source_conversation": conversation,
        "type": content.get("type") or Case.Type.AGENT,
        "entry_agent": content.get("entry_agent"),
        "initial_state": content.get("initial_state") or {},
        "priority": case.priority,
        "tags": list(case.tags),
        "unmocked_policy": content.get("unmocked_policy") or Case.UnmockedPolicy.BLOCK,
        "warnings": warnings,
        "history": content.get("history") or [],
        "turns": turns,
        "assertions": [_with_goal(item, user.get("goal", "")) for item in content.get("assertions") or []],
        "mocks": content.get("mocks") or [],
        "simulated_user": None,
    }


def simulation_stop(result: CaseResult) -> dict[str, Any]:
    return (result.simulation or {}).get("stop") or {}


def _with_goal(assertion: dict[str, Any], goal: str) -> dict[str, Any]:
    if assertion.get("type") != "goalReached" or (assertion.get("params") or {}).get("goal"):
        return assertion
    return {**assertion, "params": {**(assertion.get("params") or {}), "goal": goal}}


def _free_name(case: Case, suffix: str) -> str:
    base = case.name[: NAME_MAX_LENGTH - len(suffix) - 4] + suffix
    taken = set(Case.objects.filter(suite_id=case.suite_id, name__startswith=base).values_list("name", flat=True))
    name, number = base, 2
    while name in taken:
        name, number = f"{base} {number}", number + 1
    return name
