"""The case and suite rules: each rule refuses one bad input and names the field; a valid document passes."""

from __future__ import annotations

import pytest

from cases.models import Case, Suite
from cases.validation.case_documents import clean_case_document, validate_case_document
from cases.validation.problems import CaseValidationError
from cases.validation.suites import validate_suite

pytestmark = pytest.mark.django_db


def problems_by_field(problems) -> dict[str, str]:
    return {problem.field: problem.message for problem in problems}


def with_turn_assertion(case_document, assertion: dict) -> dict:
    document = case_document()
    document["turns"][0]["assertions"] = [assertion]
    return document


def test_it_accepts_a_valid_document(suite, case_document):
    assert validate_case_document(case_document(), suite=suite) == []


def test_it_fills_in_the_defaults_of_a_minimal_document(suite):
    cleaned = clean_case_document({"name": " Smallest ", "turns": [{"user_message": "Hi"}]}, suite=suite)

    assert cleaned["name"] == "Smallest"
    assert cleaned["enabled"] is True
    assert cleaned["source"] == "manual"
    assert cleaned["type"] == "agent"
    assert cleaned["unmocked_policy"] == "block"
    assert cleaned["initial_state"] == {}
    assert cleaned["turns"] == [{"user_message": "Hi", "assertions": []}]
    assert cleaned["history"] == cleaned["mocks"] == cleaned["assertions"] == []


def test_it_raises_with_every_problem_at_once(suite, case_document):
    document = case_document(name="", initial_state=[], unmocked_policy="execute")

    with pytest.raises(CaseValidationError) as raised:
        clean_case_document(document, suite=suite)

    assert {"name", "initial_state", "unmocked_policy"} <= set(problems_by_field(raised.value.problems))


def test_it_requires_a_name(suite, case_document):
    problems = validate_case_document(case_document(name="  "), suite=suite)
    assert problems_by_field(problems) == {"name": "is required"}


def test_it_refuses_a_name_longer_than_200_characters(suite, case_document):
    problems = validate_case_document(case_document(name="x" * 201), suite=suite)
    assert "at most 200" in problems_by_field(problems)["name"]


def test_it_refuses_a_name_the_suite_already_has(suite, make_case, case_document):
    make_case(name="Taken")

    problems = validate_case_document(case_document(name="Taken"), suite=suite)

    assert "already has a case named 'Taken'" in problems_by_field(problems)["name"]


def test_it_lets_a_case_keep_its_own_name_and_another_suite_reuse_it(suite, agent, make_case, case_document):
    case = make_case(name="Taken")
    other = Suite.objects.create(name="Other", agent=agent)

    assert validate_case_document(case_document(name="Taken"), suite=suite, instance=case) == []
    assert validate_case_document(case_document(name="Taken"), suite=other) == []


def test_it_refuses_unknown_fields_naming_them(suite, case_document):
    problems = validate_case_document(case_document(assertion=[]), suite=suite)
    assert "unknown field 'assertion'" in problems_by_field(problems)["assertion"]


def test_it_refuses_a_document_that_is_not_an_object(suite):
    problems = validate_case_document(["not", "a", "case"], suite=suite)
    assert "must be a case document" in problems_by_field(problems)["document"]


@pytest.mark.parametrize(
    ("assertion", "field", "message"),
    [
        ({"type": "outputContains", "params": {}}, "params.text", "is required for outputContains"),
        ({"type": "outputContains", "params": {"text": ""}}, "params.text", "non-empty string"),
        (
            {"type": "outputNotContains", "params": {"text": "sorry", "case_sensitive": "yes"}},
            "params.case_sensitive", "true or false",
        ),
        ({"type": "outputRegex", "params": {"pattern": "(unclosed"}}, "params.pattern", "does not compile"),
        ({"type": "outputRegex", "params": {}}, "params.pattern", "is required"),
        ({"type": "outputRegex", "params": {"pattern": "(a|aa)+$"}}, "params.pattern", "backtracks catastrophically"),
        ({"type": "outputRegex", "params": {"pattern": "(a|a)*$"}}, "params.pattern", "backtracks catastrophically"),
        (
            {"type": "outputRegex", "params": {"pattern": r"order ((ab|a)(bc|c))+\.$"}},
            "params.pattern", "backtracks catastrophically",
        ),
        (
            {"type": "toolCalled", "params": {"function": "track_order", "arguments": ["1042"]}},
            "params.arguments", "JSON object",
        ),
        ({"type": "toolNotCalled", "params": {}}, "params.function", "is required"),
        ({"type": "stateEquals", "params": {"key": "status"}}, "params.value", "is required"),
        ({"type": "stateEquals", "params": {"key": "", "value": 1}}, "params.key", "non-empty"),
        ({"type": "routedToAgent", "params": {}}, "params.agent", "is required"),
        ({"type": "agentChain", "params": {"agents": [], "mode": "exact"}}, "params.agents", "non-empty list"),
        ({"type": "agentChain", "params": {"agents": ["billing"]}}, "params.mode", "is required"),
        (
            {"type": "agentChain", "params": {"agents": ["billing"], "mode": "roughly"}},
            "params.mode", "contains, ordered, exact",
        ),
        ({"type": "llmJudge", "params": {"criterion": "Polite", "min_score": 6}}, "params.min_score", "1 to 5"),
        ({"type": "llmJudge", "params": {"criterion": "Polite", "min_score": True}}, "params.min_score", "1 to 5"),
        ({"type": "llmJudge", "params": {}}, "params.criterion", "is required"),
        ({"type": "noBlockedTools", "params": {"strict": True}}, "params.strict", "not a parameter of noBlockedTools"),
        (
            {"type": "outputContains", "params": {"text": "hi", "txt": "hi"}},
            "params.txt", "its parameters: text, case_sensitive",
        ),
        ({"type": "outputEquals", "params": {}}, "type", "must be one of outputContains"),
        ({"type": "noBlockedTools", "params": {}, "fatal": "yes"}, "fatal", "true or false"),
        ({"type": "noBlockedTools", "params": {}, "weight": 2}, "weight", "unknown field 'weight'"),
    ],
)
def test_it_refuses_bad_assertion_params(judged_suite, case_document, assertion, field, message):
    problems = validate_case_document(with_turn_assertion(case_document, assertion), suite=judged_suite)

    found = problems_by_field(problems)
    assert list(found) == [f"turns[0].assertions[0].{field}"]
    assert message in found[f"turns[0].assertions[0].{field}"]


@pytest.mark.parametrize(
    "assertion",
    [
        {"type": "outputContains", "params": {"text": "shipped", "case_sensitive": True}},
        {"type": "outputNotContains", "params": {"text": "sorry"}},
        {"type": "outputRegex", "params": {"pattern": r"\border \d+"}},
        {"type": "outputRegex", "params": {"pattern": r"^(\w+\s?)*$"}},
        {"type": "outputRegex", "params": {"pattern": r"(shipped|on its way|delivered)+\.?$"}},
        {"type": "outputRegex", "params": {"pattern": r"\p{Lu}\w+ (a|aa)"}},
        {"type": "toolCalled", "params": {"function": "track_order"}},
        {"type": "toolNotCalled", "params": {"function": "util-email-handle_email_sender"}},
        {"type": "stateEquals", "params": {"key": "refund", "value": None}},
        {"type": "routedToAgent", "params": {"agent": "billing"}},
        {"type": "agentChain", "params": {"agents": ["support", "billing"], "mode": "ordered"}},
        {"type": "llmJudge", "params": {"criterion": "Answers politely", "min_score": 3}},
        {"type": "noBlockedTools", "params": {}},
    ],
)
def test_it_accepts_each_assertion_type_with_its_params(judged_suite, case_document, assertion):
    assert validate_case_document(with_turn_assertion(case_document, assertion), suite=judged_suite) == []


def test_it_requires_the_suite_to_have_a_judge_model_for_llm_judge(suite, case_document):
    document = case_document(assertions=[{"type": "llmJudge", "params": {"criterion": "Polite"}}])

    problems = problems_by_field(validate_case_document(document, suite=suite))

    assert "suite.judge_model" in problems["assertions[0].type"]


def test_it_parses_json_fields_given_as_text(suite, case_document):
    document = with_turn_assertion(case_document, {"type": "outputContains", "params": '{"text": "shipped"}'})
    document["initial_state"] = '{"customer": "Ada"}'

    cleaned = clean_case_document(document, suite=suite)

    assert cleaned["initial_state"] == {"customer": "Ada"}
    assert cleaned["turns"][0]["assertions"][0]["params"] == {"text": "shipped"}


def test_it_refuses_json_text_that_does_not_parse(suite, case_document):
    problems = problems_by_field(validate_case_document(case_document(initial_state='{"customer": '), suite=suite))
    assert "is not valid JSON" in problems["initial_state"]


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"initial_state": ["customer"]}, "initial_state", "must be a JSON object, not a list"),
        ({"tags": "smoke"}, "tags", "must be a JSON list"),
        ({"tags": ["smoke", ""]}, "tags[1]", "non-empty string"),
        ({"priority": "high"}, "priority", "whole number"),
        ({"enabled": "yes"}, "enabled", "true or false"),
        ({"source": "imported"}, "source", "must be one of manual, recorded, extracted"),
        ({"type": "chat"}, "type", "must be one of agent, routing"),
        ({"history": {"role": "user"}}, "history", "must be a JSON list"),
        ({"entry_agent": "nobody"}, "entry_agent", "no agent named 'nobody'"),
        ({"source_conversation": 999999}, "source_conversation", "no conversation with id 999999"),
        # Beyond what the database column holds, or text PostgreSQL cannot store (not even look up): 500s before.
        ({"priority": 2**31}, "priority", "must be 2147483647 or less"),
        ({"priority": -(2**31) - 1}, "priority", "must be -2147483648 or more"),
        ({"tags": ["smoke", "a\x00b"]}, "tags[1]", "must not contain NUL"),
        ({"entry_agent": "a\x00b"}, "entry_agent", "must not contain NUL"),
        ({"initial_state": {"customer": {"a\x00b": 1}}}, "initial_state.customer", "has a key that must not"),
        # JSON text escapes what the document check cannot see.
        ({"initial_state": '{"customer": "a\\u0000b"}'}, "initial_state.customer", "must not contain NUL"),
        ({"initial_state": '{"customer": "\\ud800"}'}, "initial_state.customer", "a lone surrogate"),
    ],
)
def test_it_refuses_case_fields_of_the_wrong_kind(suite, case_document, overrides, field, message):
    problems = problems_by_field(validate_case_document(case_document(**overrides), suite=suite))

    assert list(problems) == [field]
    assert message in problems[field]


def test_it_accepts_an_existing_entry_agent(suite, billing_agent, case_document):
    assert validate_case_document(case_document(entry_agent="billing"), suite=suite) == []


def test_it_allows_only_the_block_policy_and_says_why(suite, case_document):
    problems = problems_by_field(validate_case_document(case_document(unmocked_policy="execute"), suite=suite))

    message = problems["unmocked_policy"]
    assert "only policy" in message
    assert "must never run a real tool" in message


@pytest.mark.parametrize(
    ("message", "field", "text"),
    [
        ({"role": "system", "content": "You are terse."}, "history[0].role", "must be one of user, assistant"),
        ({"role": "user", "content": "  "}, "history[0].content", "non-empty"),
        ({"role": "user"}, "history[0].content", "non-empty"),
    ],
)
def test_it_refuses_bad_history_messages(suite, case_document, message, field, text):
    problems = problems_by_field(validate_case_document(case_document(history=[message]), suite=suite))

    assert list(problems) == [field]
    assert text in problems[field]


def test_it_requires_at_least_one_turn(suite, case_document):
    problems = problems_by_field(validate_case_document(case_document(turns=[]), suite=suite))
    assert problems == {"turns": "at least one turn with a user message is required (or a simulated_user)"}


def test_it_refuses_a_turn_without_a_user_message(suite, case_document):
    document = case_document()
    document["turns"][1]["user_message"] = ""

    problems = problems_by_field(validate_case_document(document, suite=suite))

    assert list(problems) == ["turns[1].user_message"]


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [
        ({"function_name": " "}, "mocks[0].function_name", "non-empty function name"),
        ({"call_index": -1}, "mocks[0].call_index", "0 or more"),
        ({"call_index": 1.5}, "mocks[0].call_index", "whole number"),
        ({"arguments": ["1042"]}, "mocks[0].arguments", "JSON object or null"),
        ({"state_writes": ["shipped"]}, "mocks[0].state_writes", "JSON object"),
        ({"result": {"status": "shipped"}}, "mocks[0].result", "must be a string"),
        ({"stop": 1}, "mocks[0].stop", "true or false"),
        ({"call_index": 2**31}, "mocks[0].call_index", "must be 2147483647 or less"),
        ({"result": "a\x00b"}, "mocks[0].result", "must not contain NUL"),
    ],
)
def test_it_refuses_bad_mocks(suite, case_document, changes, field, text):
    document = case_document()
    document["mocks"][0].update(changes)

    problems = problems_by_field(validate_case_document(document, suite=suite))

    assert list(problems) == [field]
    assert text in problems[field]


def test_it_accepts_a_mock_for_any_arguments_and_any_call(suite, case_document):
    document = case_document(mocks=[{"function_name": "track_order", "arguments": None, "call_index": None}])
    assert validate_case_document(document, suite=suite) == []


def routing_document(case_document, **overrides):
    routed = {"type": "routedToAgent", "params": {"agent": "billing"}}
    turn = {"user_message": "I was charged twice", "assertions": [routed]}
    return case_document(**{"type": "routing", "turns": [turn], "assertions": [], **overrides})


def test_it_accepts_a_routing_case_with_one_turn_and_a_routing_assertion(suite, case_document):
    assert validate_case_document(routing_document(case_document), suite=suite) == []


def test_it_refuses_a_routing_case_with_two_turns(suite, case_document):
    document = routing_document(case_document)
    document["turns"].append({"user_message": "Hello?"})

    problems = problems_by_field(validate_case_document(document, suite=suite))

    assert "exactly one turn (this one has 2)" in problems["turns"]


def test_it_refuses_a_routing_case_without_a_routing_assertion(suite, case_document):
    document = routing_document(case_document)
    document["turns"][0]["assertions"] = [{"type": "toolCalled", "params": {"function": "track_order"}}]

    problems = problems_by_field(validate_case_document(document, suite=suite))

    assert "routedToAgent or agentChain" in problems["assertions"]


def test_it_refuses_an_llm_judge_in_a_routing_case(judged_suite, case_document):
    document = routing_document(
        case_document, assertions=[{"type": "llmJudge", "params": {"criterion": "Routes politely"}}]
    )

    problems = problems_by_field(validate_case_document(document, suite=judged_suite))

    assert "not allowed in a routing case" in problems["assertions[0].type"]


# --- Suites -------------------------------------------------------------------------------------------------------


def suite_data(**overrides):
    return {"name": "Orders", "agent": "support", **overrides}


def test_it_accepts_a_valid_suite(agent, scripted_model):
    data = suite_data(
        judge_model=scripted_model.key, extra_allowed_functions=["track_order"], case_timeout_seconds=3600
    )
    assert validate_suite(data) == []


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"agent": ""}, "agent", "is required"),
        ({"agent": "nobody"}, "agent", "no agent named 'nobody'"),
        ({"name": ""}, "name", "is required"),
        ({"judge_model": "scripted:brilliant"}, "judge_model", "is not a configured model; configured: "),
        ({"extra_allowed_functions": "track_order"}, "extra_allowed_functions", "JSON list"),
        ({"force_blocked_functions": ["util-http-handle_http_request", ""]}, "force_blocked_functions[1]", "non-empty"),
        ({"case_timeout_seconds": 0}, "case_timeout_seconds", "between 1 and 3600"),
        ({"case_timeout_seconds": 3601}, "case_timeout_seconds", "between 1 and 3600"),
        ({"case_timeout_seconds": "60"}, "case_timeout_seconds", "whole number"),
        ({"case_concurrency": 65}, "case_concurrency", "must be between 1 and 64"),
        ({"isolation_group": "Night Batch"}, "isolation_group", "(it names the worker queue), got 'Night Batch'"),
        ({"enabled": "yes"}, "enabled", "must be true or false"),
        ({"judge_model": 5}, "judge_model", "must be a 'provider:model' key or empty"),
        ({"description": ["a"]}, "description", "must be text"),
        ({"owner": "mia"}, "owner", "unknown field"),
        ({"name": "a\x00b"}, "name", "must not contain NUL"),
        ({"agent": "a\x00b"}, "agent", "must not contain NUL"),
        ({"extra_allowed_functions": ["a\x00b"]}, "extra_allowed_functions[0]", "must not contain NUL"),
    ],
)
def test_it_refuses_bad_suite_fields(agent, overrides, field, text):
    problems = problems_by_field(validate_suite(suite_data(**overrides)))

    assert list(problems) == [field]
    assert text in problems[field]


def test_it_refuses_a_suite_name_already_taken(suite):
    problems = problems_by_field(validate_suite(suite_data(name=suite.name)))
    assert "already exists" in problems["name"]


def test_it_refuses_to_drop_the_judge_model_while_enabled_cases_use_it(judged_suite, make_case):
    make_case(judged_suite, name="Polite", assertions=[{"type": "llmJudge", "params": {"criterion": "Polite"}}])
    data = {"name": judged_suite.name, "agent": judged_suite.agent, "judge_model": ""}

    problems = problems_by_field(validate_suite(data, instance=judged_suite))

    assert "Polite" in problems["judge_model"]
    Case.objects.filter(suite=judged_suite).update(enabled=False)
    assert validate_suite(data, instance=judged_suite) == []


def test_it_refuses_an_assertion_type_that_is_not_text(suite, case_document):
    document = with_turn_assertion(case_document, {"type": ["outputContains"], "params": {}})

    problems = problems_by_field(validate_case_document(document, suite=suite))

    assert "must be one of outputContains" in problems["turns[0].assertions[0].type"]
