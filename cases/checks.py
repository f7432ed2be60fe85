"""`agenttest check --database default` (Django's system checks, with the database) lists the mocks their tools'
schemas refuse as the tools stand now — a tool whose schema changed since its mocks were written (issue 36) —, naming
suite, case and the mock's path, so a deploy of a changed tool shows which cases now answer with what the tool can no
longer say. Drafts are left out: their recorded misfits are the reviewer's warnings (`mock_schema_warnings`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Warning, register
from django.db import DatabaseError

MOCKS_REFUSED = "cases.W001"
MOCKS_TAG = "mocks"


@register(MOCKS_TAG)
def check_mocks_fit_their_tools(
    app_configs: Sequence[AppConfig] | None = None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    if not databases or "default" not in databases:
        # Reading every case is for `agenttest check --database default` (Django asks the database only then), not
        # for the checks every command runs as it starts.
        return []
    try:
        lines = mocks_refused_by_their_tools()
    except DatabaseError:
        # No database yet, or one not migrated yet (migrate runs the checks before it migrates): nothing to list.
        return []
    return [
        Warning(
            line, id=MOCKS_REFUSED,
            hint="Fix the mock to what the tool says now (in the admin or its case file), or let `agenttest mocks "
            "verify --update` rewrite an effect-free tool's result from the real tool.",
        )
        for line in lines
    ]


def mocks_refused_by_their_tools(*, suite: Any = None) -> list[str]:
    """`suite …, case …: mocks[i].path: message (mock of …)` for each mock of a case (drafts aside; of `suite` only
    when given) its tool's schemas refuse: the same check every door makes (cases/tool_schemas.py), against what the
    agents declare now. The check above and the suite's admin page list it."""
    from cases.models import Case
    from cases.tool_schemas import mock_schema_problems
    from cases.validation.callable_functions import case_callable_functions
    from cases.validation.case_documents import is_draft

    found = []
    functions_of: dict[tuple[int, int | None], Any] = {}
    cases = (
        Case.objects.filter(mocks__isnull=False, **({"suite": suite} if suite is not None else {})).distinct()
        .select_related("suite__agent", "entry_agent").prefetch_related("mocks").order_by("suite__name", "name")
    )
    for case in cases:
        if is_draft(case):
            continue
        key = (case.suite_id, case.entry_agent_id)
        if key not in functions_of:
            functions_of[key] = case_callable_functions(suite=case.suite, entry_agent=case.entry_agent)
        functions = functions_of[key]
        if functions is None:
            continue
        for index, mock in enumerate(case.mocks.all()):
            if mock.function_name not in functions.names:
                continue
            document = {"function_name": mock.function_name, "arguments": mock.arguments, "result": mock.result,
                        "call_index": mock.call_index, "stop": mock.stop, "state_writes": mock.state_writes,
                        "table": mock.table}
            for path, message in mock_schema_problems(document, functions.declarations[mock.function_name]):
                found.append(
                    f"suite {case.suite.name!r}, case {case.name!r}: mocks[{index}].{path}: {message} "
                    f"(mock of {mock.function_name})"
                )
    return found
