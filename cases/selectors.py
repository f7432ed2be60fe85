"""Reads of suites and cases. Case querysets come with their parts prefetched, so listing N cases as documents costs
the same number of queries as listing one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL

from agenthost.seams import Conversation
from cases.models import Case, MockVerification, Suite
from common.inputs import parse_id, text_is_storable

CASE_PARTS = ("history", "turns", "mocks", "assertions")
# What a member reads instead of the service, conversation key or trace ids of a case made from production traces.
HIDDEN_TRACE = "[production trace]"
TAG_FILTER_PREFIX = "tag:"


def suite_list(*, filters: dict[str, Any] | None = None) -> QuerySet[Suite]:
    """Suites with `case_count` and `enabled_case_count`. Filters: agent (id), enabled, search (name/description)."""
    filters = filters or {}
    queryset = Suite.objects.select_related("agent").annotate(
        case_count=Count("cases"), enabled_case_count=Count("cases", filter=Q(cases__enabled=True))
    )
    if filters.get("agent") is not None:
        queryset = queryset.filter(agent_id=filters["agent"])
    if filters.get("enabled") is not None:
        queryset = queryset.filter(enabled=filters["enabled"])
    if search := filters.get("search"):
        queryset = queryset.filter(Q(name__icontains=search) | Q(description__icontains=search))
    return queryset.order_by("name", "id")


def suite_by_reference(reference: Any, *, queryset: QuerySet[Suite] | None = None) -> Suite | None:
    """The suite a person names by name, or else by id; None when there is none. A name wins over an id ("2024" may
    be a suite's name), and text that can be no name or id (NUL, which PostgreSQL refuses) finds nothing."""
    if isinstance(reference, bool) or not isinstance(reference, int | str):
        return None
    text = str(reference).strip()
    if not text or not text_is_storable(text):
        return None
    suites = Suite.objects.all() if queryset is None else queryset
    suite = suites.filter(name=text).first()
    suite_id = parse_id(text)
    if suite is None and suite_id is not None:
        suite = suites.filter(pk=suite_id).first()
    return suite


def suite_detail(*, suite_id: int) -> Suite:
    """Raises Suite.DoesNotExist."""
    return suite_list().get(pk=suite_id)


def _with_parts(queryset: QuerySet[Case]) -> QuerySet[Case]:
    return queryset.select_related(
        "suite", "suite__agent", "entry_agent", "source_conversation"
    ).prefetch_related(*CASE_PARTS)


def _sees_production(user: Any) -> bool:
    return bool(user is not None and user.is_active and user.is_staff)


def cases_visible(queryset: QuerySet[Case], *, user: Any) -> QuerySet[Case]:
    """What of `queryset` `user` may see: staff every case; anyone else no draft made from production traces (the
    customer's messages and tool results), until a person has reviewed and enabled it (decision 0034)."""
    if _sees_production(user):
        return queryset
    return queryset.exclude(enabled=False, source_conversation__source=Conversation.Source.TRACE)


def case_hidden_from(case: Case, *, user: Any) -> bool:
    """Whether `case` is a draft from production traces that `user` may not see."""
    return not case.enabled and not _sees_production(user) and _from_traces(case)


def _from_traces(case: Case) -> bool:
    conversation = case.source_conversation
    return conversation is not None and conversation.source == Conversation.Source.TRACE


def trace_hider(case: Case, *, user: Any) -> Callable[[Any], Any]:
    """What `user` may read of a text about `case`: for anyone but staff, a case made from production traces names no
    service, conversation key or trace id (each read as HIDDEN_TRACE) — in its name, description or warnings."""
    if _sees_production(user) or not _from_traces(case):
        return lambda text: text
    conversation = case.source_conversation
    assert conversation is not None, "_from_traces(case) holds"
    identifiers = {conversation.trace_service, conversation.trace_key, *conversation.trace_ids}
    # Longest first: a trace id that holds a shorter key is hidden whole.
    ordered = sorted((item for item in identifiers if isinstance(item, str) and item), key=len, reverse=True)

    def hidden(text: Any) -> Any:
        if not isinstance(text, str):
            return text
        for identifier in ordered:
            text = text.replace(identifier, HIDDEN_TRACE)
        return text

    return hidden


def case_text_for(case: Case, *, user: Any) -> tuple[str, str, list[Any]]:
    """The case's name, description and warnings as `user` may read them (trace_hider)."""
    hidden = trace_hider(case, user=user)
    return hidden(case.name), hidden(case.description), [hidden(warning) for warning in case.warnings]


def _tagged(queryset: QuerySet[Case], tag: str) -> QuerySet[Case]:
    if connection.features.supports_json_field_contains:
        return queryset.filter(tags__contains=[tag])
    # SQLite has no JSON containment lookup; json_each compares list elements exactly, as containment would.
    table = Case._meta.db_table
    return queryset.filter(
        pk__in=RawSQL(f"SELECT {table}.id FROM {table}, json_each({table}.tags) WHERE json_each.value = %s", [tag])
    )


def case_list(*, filters: dict[str, Any] | None = None) -> QuerySet[Case]:
    """Cases with their parts. Filters: suite (id), agent (id: the suite's agent or the case's entry agent), enabled,
    source, tag (exact), search (name/description, case-insensitive)."""
    filters = filters or {}
    queryset = Case.objects.all()
    if filters.get("suite") is not None:
        queryset = queryset.filter(suite_id=filters["suite"])
    if filters.get("agent") is not None:
        queryset = queryset.filter(Q(suite__agent_id=filters["agent"]) | Q(entry_agent_id=filters["agent"]))
    if filters.get("enabled") is not None:
        queryset = queryset.filter(enabled=filters["enabled"])
    if filters.get("source"):
        queryset = queryset.filter(source=filters["source"])
    if filters.get("tag"):
        queryset = _tagged(queryset, filters["tag"])
    if search := filters.get("search"):
        queryset = queryset.filter(Q(name__icontains=search) | Q(description__icontains=search))
    return _with_parts(queryset).order_by("suite__name", "-priority", "name", "id")


def case_detail(*, case_id: int) -> Case:
    """One case with its parts; raises Case.DoesNotExist."""
    return _with_parts(Case.objects.all()).get(pk=case_id)


def enabled_cases(*, suite: Suite, case_filter: str = "") -> QuerySet[Case]:
    """The cases a run of `suite` executes, in execution order (-priority, name, id).

    `case_filter`: empty selects every enabled case; `tag:<tag>` those carrying that tag; anything else those whose
    name contains it, ignoring case. Disabled cases are never selected: drafts join a run only once enabled.
    """
    queryset = Case.objects.filter(suite=suite, enabled=True)
    case_filter = case_filter.strip()
    if case_filter.startswith(TAG_FILTER_PREFIX):
        queryset = _tagged(queryset, case_filter[len(TAG_FILTER_PREFIX):].strip())
    elif case_filter:
        queryset = queryset.filter(name__icontains=case_filter)
    return _with_parts(queryset).order_by("-priority", "name", "id")


# The verdicts that mark a case: one of its mocks no longer answers what the real tool does (`agenttest mocks verify`).
DRIFT_VERDICTS = (MockVerification.Verdict.DRIFTED, MockVerification.Verdict.FAILED)


def mock_drift_exists(*, case_hashes: Any) -> Exists:
    """For annotating a Case queryset in the same query: whether the case has a mock that drifted (or whose tool
    failed) when verified as the case was in one of `case_hashes` (a values queryset, may use OuterRef) — the content
    a run ran, so an edit since, which changes the hash, leaves no stale mark."""
    return Exists(
        MockVerification.objects.filter(case_id=OuterRef("pk"), case_hash__in=case_hashes, verdict__in=DRIFT_VERDICTS)
    )


def mock_drifted_now() -> Exists:
    """For annotating a Case queryset in the same query: whether a mock of the case as it stands now (its content
    hash) was last verified drifted, or its tool failed — what marks the case on its suite's page and in the case
    list. An edit since the verification changes the hash, so it leaves no stale mark."""
    return Exists(
        MockVerification.objects.filter(
            case_id=OuterRef("pk"), case_hash=OuterRef("content_hash"), verdict__in=DRIFT_VERDICTS
        )
    )


def suite_drifted_count() -> Count:
    """For annotating a Suite queryset: how many of its cases are marked by `mock_drifted_now`."""
    return Count("cases", distinct=True, filter=Q(Exists(
        MockVerification.objects.filter(
            case_id=OuterRef("cases__pk"), case_hash=OuterRef("cases__content_hash"), verdict__in=DRIFT_VERDICTS
        )
    )))


def suite_mock_drifts(*, suite: Suite) -> list[tuple[Case, list[MockVerification]]]:
    """Each case of the suite marked by `mock_drifted_now`, by name, with its drifted (or failed) verifications in
    mock order. One query."""
    found: dict[int, tuple[Case, list[MockVerification]]] = {}
    verifications = (
        MockVerification.objects.filter(
            case__suite=suite, case_hash=F("case__content_hash"), verdict__in=DRIFT_VERDICTS
        )
        .select_related("case")
        .order_by("case__name", "case_id", "position", "id")
    )
    for verification in verifications:
        found.setdefault(verification.case_id, (verification.case, []))[1].append(verification)
    return list(found.values())


def mock_verifications_of(*, case_id: int | None, case_hash: str) -> list[MockVerification]:
    """The last verification of each mock of the case as it was in `case_hash`, in mock order. One query."""
    if case_id is None or not case_hash:
        return []
    return list(MockVerification.objects.filter(case_id=case_id, case_hash=case_hash).order_by("position", "id"))
