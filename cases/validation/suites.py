"""A suite: its shape from the JSON Schema `suite-document` of cases/schema.py, then what needs the database (the
functions its agents can call, their declared effects), and whether it is hermetic (may run cases side by side)."""

from __future__ import annotations

from typing import Any

from agenthost.seams import Agent, configured_models, get_function
from cases.models import Assertion, Case, Suite
from cases.schema import SuiteDocument, schema_problems
from cases.validation.callable_functions import CallableFunctions, suite_callable_functions
from cases.validation.parts import _Prepared
from cases.validation.problems import Problem, SuiteValidationError, _Problems, _storable
from common.inputs import path_join
from common.schemas import defaults

SUITE_DOCUMENT_FIELDS = tuple(SuiteDocument.model_fields)
SUITE_DEFAULTS = defaults(SuiteDocument)
SUITE_KIND = "suite-document"


def _clean_suite(data: Any, *, instance: Suite | None) -> tuple[dict[str, Any], list[Problem]]:
    """Shape from the schema (cases/schema.py's SuiteDocument), then what needs the database: the name free, the
    agent there, the judge model configured, and every function name one the suite's agents can call."""
    problems = _Problems()
    data = _storable(data, what="a suite", problems=problems)
    if data is None:
        return {}, problems.items
    prepared = _Prepared(problems)
    data = {**SUITE_DEFAULTS, "name": None, "agent": None, **data}
    for key in ("extra_allowed_functions", "force_blocked_functions", "network_allow"):
        prepared.field(data, key, at=key, expected=list)
    shape = dict(data)
    if isinstance(data["agent"], Agent):
        # The admin hands over the agent itself; its shape is its name's.
        shape["agent"] = data["agent"].name
    if isinstance(data["name"], str):
        # Stored stripped, so measured stripped.
        shape["name"] = data["name"].strip()
    prepared.add_schema_problems(schema_problems(SUITE_KIND, shape))
    wrong = {problem.field.split("[")[0] for problem in problems.items}

    name = data["name"].strip() if isinstance(data["name"], str) else data["name"]
    if "name" not in wrong:
        _check_name_free(name, instance=instance, problems=problems)
    agent = data["agent"]
    if "agent" not in wrong and not isinstance(agent, Agent):
        agent = Agent.objects.filter(name=agent.strip()).first() or agent
        if not isinstance(agent, Agent):
            problems.add("agent", f"no agent named {data['agent']!r}")
    judge_model = data["judge_model"] or ""
    if "judge_model" not in wrong:
        _check_judge_model(judge_model, instance=instance, problems=problems)
    functions = suite_callable_functions(agent=agent, suite=instance) if isinstance(agent, Agent) else None
    extra_allowed = _function_names(data, "extra_allowed_functions", functions=functions, problems=problems)
    _check_effects(extra_allowed, functions, problems=problems)
    force_blocked = _function_names(data, "force_blocked_functions", functions=functions, problems=problems)
    network_allow = _network_allow(data, wrong, extra_allowed, functions, problems)
    if functions is not None:
        _check_rules_and_concurrency(data, wrong, extra_allowed, functions, problems=problems)
    cleaned = {
        **{key: data.get(key) for key in SUITE_DOCUMENT_FIELDS},
        "name": name,
        "agent": agent,
        "judge_model": judge_model,
        "extra_allowed_functions": extra_allowed,
        "force_blocked_functions": force_blocked,
        "network_allow": network_allow,
    }
    return cleaned, problems.items


def _check_name_free(name: Any, *, instance: Suite | None, problems: _Problems) -> None:
    taken = Suite.objects.filter(name=name)
    if instance is not None and instance.pk is not None:
        taken = taken.exclude(pk=instance.pk)
    if taken.exists():
        problems.add("name", f"a suite named {name!r} already exists")


def _check_judge_model(judge_model: str, *, instance: Suite | None, problems: _Problems) -> None:
    """A judge model is a configured one; without one, no enabled case of the suite may need it."""
    if judge_model:
        configured = [config.key for config in configured_models()]
        if judge_model not in configured:
            problems.add(
                "judge_model",
                f"{judge_model!r} is not a configured model; configured: {', '.join(configured) or 'none'}",
            )
    elif instance is not None and instance.pk is not None:
        judged = list(
            Case.objects.filter(suite=instance, enabled=True, assertions__type=Assertion.Type.LLM_JUDGE)
            .values_list("name", flat=True)
            .distinct()[:5]
        )
        if judged:
            problems.add(
                "judge_model",
                f"enabled cases use llmJudge assertions ({', '.join(judged)}); they need a judge model",
            )


def _check_effects(extra_allowed: list[Any], functions: CallableFunctions | None, *, problems: _Problems) -> None:
    """Every extra-allowed function is declared free of effects outside agenttest: the others are to be mocked."""
    for index, function in enumerate(extra_allowed):
        # A name the schema refused (not a string) cannot name a function, nor be hashed.
        if (
            functions is not None
            and isinstance(function, str)
            and function in functions.names
            and not functions.effect_free(function)
        ):
            problems.add(
                path_join("extra_allowed_functions", index),
                _effects_message(function, functions.declarations.get(function, ())),
            )


def _check_rules_and_concurrency(
    data: dict[str, Any],
    wrong: set[str],
    extra_allowed: list[Any],
    functions: CallableFunctions,
    *,
    problems: _Problems,
) -> None:
    rules = data.get("mock_rules")
    if isinstance(rules, dict) and "mock_rules" not in wrong:
        # A rule for a function no case can call would compare nothing.
        for function in rules:
            if function not in functions.names:
                problems.add(
                    path_join("mock_rules", function), functions.not_callable(function), shared=functions.listing
                )
    concurrency = data["case_concurrency"]
    if "case_concurrency" not in wrong and concurrency > 1:
        problem = _hermetic_problem(extra_allowed, functions)
        if problem:
            problems.add("case_concurrency", f"{problem}; keep 1 or allow only functions declared free of them")


def _network_allow(
    data: dict[str, Any], wrong: set[str], extra_allowed: list[Any], functions: CallableFunctions | None,
    problems: _Problems,
) -> list[Any]:
    """The hosts stored lower-cased; refused for a suite that has no extra-allowed function to reach them, or one
    whose extra-allowed functions are not all free of outside effects (a host open to such a tool would let it act
    for real)."""
    hosts = data.get("network_allow")
    if "network_allow" in wrong or not isinstance(hosts, list):
        return hosts if isinstance(hosts, list) else []
    hosts = list(dict.fromkeys(host.strip().lower() for host in hosts if isinstance(host, str)))
    if not hosts:
        return []
    if not extra_allowed:
        problems.add("network_allow", "names hosts for the suite's extra-allowed tools, and the suite allows none; "
                                      "mock the tools instead")
    elif functions is not None:
        effectful = [name for name in extra_allowed
                     if isinstance(name, str) and name in functions.names and not functions.effect_free(name)]
        if effectful:
            problems.add("network_allow", f"only a suite whose extra-allowed functions are all free of effects "
                                          f"outside agenttest may open hosts to them; {', '.join(effectful)} is not")
    return hosts


def suite_hermetic_problem(*, suite: Suite, live: Any = None) -> str:
    """Why the suite's cases might reach something outside agenttest (so they must run one at a time); "" when every
    function is mocked or blocked and every extra-allowed one is declared free of outside effects. Asked again at
    run time: a registered function's declaration may have changed since the suite was saved, and an MCP tool's
    annotations are its server's to change — the cached listing is not trusted for them. An extra-allowed MCP tool
    counts as hermetic only as its server lists it now (`live`, the run's LiveListings); without `live` it cannot
    be verified, so it does not."""
    functions = suite_callable_functions(agent=suite.agent, suite=suite)
    extra_allowed = list(suite.extra_allowed_functions or [])
    problem = _hermetic_problem(extra_allowed, functions)
    if problem:
        return problem
    for name in extra_allowed:
        for declaration in functions.declarations.get(name, ()):
            if not isinstance((declaration or {}).get("mcp"), dict):
                continue
            if live is None:
                return f"{name} is an MCP tool whose annotations cannot be verified with its server here"
            if stale := live.problem(declaration):
                return stale
    return ""


def _hermetic_problem(extra_allowed: list[Any], functions: CallableFunctions) -> str:
    effectful = [
        name for name in extra_allowed
        if isinstance(name, str) and (name not in functions.names or not functions.effect_free(name))
    ]
    if not effectful:
        return ""
    return (
        "only a hermetic suite may run cases side by side, and extra_allowed_functions lets "
        f"{', '.join(effectful)} run, which may have effects outside agenttest"
    )


def _function_names(
    data: dict[str, Any], field: str, *, functions: CallableFunctions | None, problems: _Problems
) -> list[str]:
    """The names in `data[field]`, stripped as mock names are, each one a function the suite's agents can call: a name
    that matches nothing would silently allow or block nothing. Empty when the schema already refused the list (its
    problems are reported) or there is no agent to ask."""
    names = data.get(field)
    if not isinstance(names, list) or not all(isinstance(name, str) and name.strip() for name in names):
        return names if isinstance(names, list) else []
    names = [name.strip() for name in names]
    for index, name in enumerate(names):
        if functions is not None and name not in functions.names:
            problems.add(path_join(field, index), functions.not_callable(name), shared=functions.listing)
    return names


def _effects_message(name: str, declarations: tuple[dict[str, Any] | None, ...] = ()) -> str:
    registered = get_function(name)
    if registered is None and any(isinstance((item or {}).get("mcp"), dict) for item in declarations):
        why = ("is an MCP tool its server does not annotate read-only (readOnlyHint), so it counts as having effects "
               "outside agenttest")
    elif registered is not None and registered.outside_effects is None:
        why = "does not declare whether it has effects outside agenttest, so it counts as having them"
    elif registered is not None:
        why = "has effects outside agenttest"
    else:
        why = "has no implementation declared free of effects outside agenttest"
    return f"{name} {why}; mock it in the cases instead of allowing it"


def validate_suite(data: Any, *, instance: Suite | None = None) -> list[Problem]:
    """Every problem with a suite's fields; `agent` may be an Agent or its name."""
    return _clean_suite(data, instance=instance)[1]


def clean_suite_data(data: Any, *, instance: Suite | None = None) -> dict[str, Any]:
    """The suite fields with defaults filled in and `agent` resolved; raises SuiteValidationError."""
    cleaned, problems = _clean_suite(data, instance=instance)
    if problems:
        raise SuiteValidationError(problems)
    return cleaned


def suite_check(data: Any, *, instance: Suite | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """The cleaned suite fields (names stripped, `agent` resolved) and every problem: for forms that store what
    they were given only when there is no problem."""
    return _clean_suite(data, instance=instance)

