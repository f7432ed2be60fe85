"""Issue 10, items 12–15 and 17, over real HTTP (live server, httpx): deeply nested JSON, non-finite numbers,
non-ASCII and huge ids, unknown fields and a wrong provider each get a 400 (or the page's own error) naming what is
wrong, never a 500, and nothing is stored."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.bad_input import (
    HUGE_ID,
    LONG_DIGITS,
    MODEL,
    NON_ASCII_DIGITS,
    World,
    database_fingerprint,
    deep_json,
    fingerprint_changes,
    session_client,
    token_client,
    world_create,
)

pytestmark = pytest.mark.django_db(transaction=True)

DEEP = 1000  # Python's recursive decoder fails from about 950
# A body refused before anything is stored (too deep, a non-finite number, an unknown field) is refused the same on
# either engine, and a refusal that stopped working would show on PostgreSQL, which rejects such values itself (a 500):
# these run in the PostgreSQL pass only.
ENGINE_NEUTRAL = pytest.mark.production_engine


@pytest.fixture
def world(admin_user, scripted_model) -> World:
    return world_create(owner=admin_user)


@pytest.fixture
def staff_api(live_server, admin_user) -> Iterator[httpx.Client]:
    with token_client(live_server.url, admin_user) as client:
        yield client


@pytest.fixture
def member_api(live_server, member) -> Iterator[httpx.Client]:
    with token_client(live_server.url, member) as client:
        yield client


@pytest.fixture
def staff_pages(live_server, admin_user) -> Iterator[httpx.Client]:
    with session_client(live_server.url, admin_user) as client:
        yield client


def _agent_body(**overrides) -> dict:
    return {"name": "probe", "instruction": "Help.", "provider": "scripted", "model": "scripted", **overrides}


def _fields(response: httpx.Response) -> set[str]:
    """The fields a 400 names, as paths, in either shape the APIs answer: {"errors": [{"field"}]} or DRF's nested
    {field: [...] | {key: ...}} (whose digit keys are list items)."""
    body = response.json()
    if isinstance(body, dict) and isinstance(body.get("errors"), list):
        return {error["field"] for error in body["errors"]}

    def paths(detail, prefix: str) -> set[str]:
        if not isinstance(detail, dict):
            return {prefix}
        return set().union(*(
            paths(value, f"{prefix}[{key}]" if key.isdigit() and prefix else f"{prefix}.{key}" if prefix else key)
            for key, value in detail.items()
        ))

    return paths(body, "")


# Every endpoint that takes a JSON body, with the path of a real object.
JSON_WRITES = [
    ("POST", "/api/agents/"),
    ("PATCH", "/api/agents/{agent_id}/"),
    ("POST", "/api/conversations/"),
    ("POST", "/api/conversations/{conversation_id}/messages/"),
    ("POST", "/api/suites/"),
    ("PATCH", "/api/suites/{suite_id}/"),
    ("POST", "/api/cases/"),
    ("PUT", "/api/cases/{case_id}/"),
    ("PATCH", "/api/cases/{case_id}/"),
    ("POST", "/api/runs/"),
    ("POST", "/api/runs/delete/"),
    ("POST", "/api/recordings/"),
    ("POST", "/api/extractions/"),
]


def _path(template: str, world: World) -> str:
    return template.format(**vars(world))


# --- 12: nesting ---------------------------------------------------------------------------------------------------


@ENGINE_NEUTRAL
@pytest.mark.parametrize(("method", "path"), JSON_WRITES)
def test_it_refuses_json_nested_too_deep_at_every_json_write_endpoint(staff_api, world, method, path):
    before = database_fingerprint()

    response = staff_api.request(
        method, _path(path, world), content=f'{{"name": {deep_json(DEEP)}}}',
        headers={"Content-Type": "application/json"},
    )

    assert response.status_code == 400, response.text
    assert "nested more than 64 levels deep" in response.text
    # Named by the field the nesting went too deep in, as every 400 is (it once answered {"detail": ...}).
    assert _fields(response) == {"name"}, response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


@pytest.mark.parametrize(("content", "field"), [
    (f'{{"name": "probe", "description": {{"a": [{deep_json(DEEP)}]}}}}', "description"),
    (f'{{"name": "probe", "tags": ["a", {deep_json(DEEP)}]}}', "tags"),
    (f'{{"na\\"me[": {deep_json(DEEP)}}}', 'na"me['),
])
def test_it_names_the_field_a_body_nests_too_deep_in(staff_api, world, content, field):
    response = staff_api.post("/api/agents/", content=content, headers={"Content-Type": "application/json"})

    assert response.status_code == 400, response.text
    assert _fields(response) == {field}, response.text
    assert "nested more than 64 levels deep" in response.text


def test_it_names_the_body_when_the_body_itself_nests_too_deep(staff_api, world):
    response = staff_api.post("/api/agents/", content=deep_json(DEEP), headers={"Content-Type": "application/json"})

    assert response.status_code == 400, response.text
    assert response.json() == {"non_field_errors": ["the body is nested more than 64 levels deep"]}


@pytest.mark.parametrize("path", ["/api/conversations/", "/api/conversations/{conversation_id}/messages/"])
def test_it_refuses_deep_json_from_a_member_too(member_api, world, member, path):
    conversation = member_api.post("/api/conversations/", json={"agent": world.agent_name}).json()
    before = database_fingerprint()

    response = member_api.post(
        path.format(conversation_id=conversation["id"]), content=deep_json(DEEP),
        headers={"Content-Type": "application/json"},
    )

    assert response.status_code == 400, response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


@pytest.mark.parametrize("encoding", ["form", "multipart"])
def test_it_refuses_deep_json_text_in_a_form_field(staff_api, world, encoding):
    fields = {**_agent_body(), "functions": deep_json(DEEP)}
    before = database_fingerprint()

    if encoding == "form":
        response = staff_api.post("/api/agents/", data=fields)
    else:
        # Parts without a file name are plain fields of a multipart body.
        response = staff_api.post("/api/agents/", files={key: (None, value) for key, value in fields.items()})

    assert response.status_code == 400, response.text
    assert "functions" in _fields(response)
    assert "nested more than 64 levels deep" in response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


@pytest.mark.parametrize(
    ("functions", "message"),
    [
        (deep_json(DEEP), "Nested more than 64 levels deep"),
        ('[{"name": "x", "parameters": {"type": "object", "maximum": NaN}}]', "numbers must be finite"),
        ('[{"name": "x", "parameters": {"type": "object", "maximum": 1e999}}]', "numbers must be finite"),
    ],
)
def test_it_shows_a_form_error_for_deep_or_non_finite_json_in_the_admin(staff_pages, world, functions, message):
    before = database_fingerprint()

    response = staff_pages.post(
        "/admin/agenthost/agent/add/",
        data={**_agent_body(), "temperature": "0", "functions": functions, "rules": "[]", "description": ""},
    )

    assert response.status_code == 200, response.text[:2000]
    errors = re.search(r'<div class="form-row[^"]*errors[^"]*field-functions.*?</ul>', response.text, re.DOTALL)
    assert errors and message in errors.group(0), response.text[:3000]
    assert fingerprint_changes(before, database_fingerprint()) == []


def test_it_shows_a_form_error_for_deep_json_in_the_conversation_admin(staff_pages, world):
    before = database_fingerprint()

    response = staff_pages.post(
        f"/admin/agenthost/conversation/{world.conversation_id}/change/",
        data={"title": "renamed", "tags": deep_json(DEEP)},
    )

    assert response.status_code == 200, response.text[:2000]
    assert "Nested more than 64 levels deep" in response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


# --- 13: non-finite numbers ----------------------------------------------------------------------------------------


@ENGINE_NEUTRAL
@pytest.mark.parametrize("number", ["1e999", "-1e999", "NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/api/conversations/", '{{"agent": "{agent_name}", "initial_state": {{"total": {n}}}}}',
         "initial_state.total"),
        ("POST", "/api/agents/",
         '{{"name": "probe", "instruction": "Help.", "provider": "scripted", "model": "scripted", '
         '"functions": [{{"name": "x", "parameters": {{"type": "object", "maximum": {n}}}}}]}}',
         "functions[0].parameters.maximum"),
        ("PATCH", "/api/agents/{agent_id}/",
         '{{"rules": [{{"trigger": "conversation_started", "function": "x", "arguments": {{"n": {n}}}}}]}}',
         "rules[0].arguments.n"),
        ("POST", "/api/cases/",
         '{{"suite": {suite_id}, "name": "probe", "turns": [{{"user_message": "hi"}}], '
         '"mocks": [{{"function_name": "lookup_order", "state_writes": {{"total": {n}}}}}]}}',
         "mocks[0].state_writes.total"),
        ("POST", "/api/runs/", '{{"suite": {suite_id}, "models": ["scripted:scripted"], "budget_cost": {n}}}',
         "budget_cost"),
    ],
)
def test_it_refuses_non_finite_numbers_naming_the_field(staff_api, world, number, method, path, body, field):
    before = database_fingerprint()

    response = staff_api.request(
        method, _path(path, world), content=body.format(n=number, **vars(world)),
        headers={"Content-Type": "application/json"},
    )

    assert response.status_code == 400, response.text
    assert field in _fields(response), response.text
    assert f"{field}: numbers must be finite" in response.text
    # SQLite's JSON_VALID check failed on the stored infinity, and the IntegrityError was answered as a name clash.
    assert "already exists" not in response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


def test_it_refuses_a_non_finite_number_as_the_whole_body(staff_api, world):
    response = staff_api.post("/api/runs/", content="1e999", headers={"Content-Type": "application/json"})

    assert response.status_code == 400, response.text
    assert "numbers must be finite" in response.text


# --- 14: ids in bodies and query strings ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [*NON_ASCII_DIGITS, str(HUGE_ID), HUGE_ID, LONG_DIGITS, -1, 0, 1.0, True, "1 2", ""])
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/recordings/", {"conversation": "{bad}"}, "conversation"),
        ("/api/extractions/", {"conversation": "{bad}"}, "conversation"),
        ("/api/runs/", {"suite": "{bad}", "models": [MODEL]}, "suite"),
        ("/api/runs/delete/", {"ids": ["{bad}"]}, "ids"),
    ],
)
def test_it_refuses_an_id_that_is_no_id_in_a_body(staff_api, world, bad, path, body, field):
    before = database_fingerprint()

    filled = {key: [bad] if value == ["{bad}"] else bad if value == "{bad}" else value for key, value in body.items()}
    response = staff_api.post(path, json=filled)

    assert response.status_code == 400, response.text
    assert any(name == field or name.startswith(f"{field}[") for name in _fields(response)), response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


@pytest.mark.parametrize("bad", [*NON_ASCII_DIGITS, str(HUGE_ID), LONG_DIGITS])
@pytest.mark.parametrize("path", ["/api/recordings/", "/api/extractions/"])
def test_it_refuses_a_suite_named_by_an_id_that_is_no_id(staff_api, world, bad, path):
    before = database_fingerprint()

    response = staff_api.post(path, json={"conversation": world.conversation_id, "suite": bad})

    assert response.status_code == 400, response.text
    assert response.json()["errors"] == [{"field": "suite", "message": f"no suite {bad!r} (give a suite id or name)"}]
    assert fingerprint_changes(before, database_fingerprint()) == []


def test_it_reads_a_huge_id_as_no_such_object(staff_api, world):
    response = staff_api.post("/api/recordings/", json={"conversation": HUGE_ID})

    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "conversation", "message": f"no conversation with id {HUGE_ID}"}]


@pytest.mark.parametrize("bad", [*NON_ASCII_DIGITS, str(HUGE_ID)])
@pytest.mark.parametrize(("path", "field"), [("/api/runs/", "suite"), ("/api/runs/", "agent"),
                                              ("/api/conversations/", "agent")])
def test_it_refuses_an_id_that_is_no_id_in_a_query_string(staff_api, world, bad, path, field):
    response = staff_api.get(path, params={field: bad})

    assert response.status_code == 400, response.text
    assert field in _fields(response)


def test_it_starts_no_conversation_for_an_agent_named_by_a_huge_or_non_ascii_id(staff_api, world):
    before = database_fingerprint()

    for bad in (*NON_ASCII_DIGITS, str(HUGE_ID)):
        response = staff_api.post("/api/conversations/", json={"agent": bad})
        assert response.status_code == 400, response.text
        assert "agent" in _fields(response)
    assert fingerprint_changes(before, database_fingerprint()) == []


def test_it_answers_a_huge_message_seq_with_a_400(staff_api, world):
    response = staff_api.get(f"/api/conversations/{world.conversation_id}/state/", params={"at": str(HUGE_ID)})

    assert response.status_code == 400, response.text
    assert "at" in _fields(response)


@pytest.mark.parametrize("bad", [*NON_ASCII_DIGITS, str(HUGE_ID)])
@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/runs/?suite={bad}", 200),
        ("/runs/new/?suite={bad}", 200),
        ("/runs/cases-count.json?suite={bad}", 400),
        ("/runs/{run_id}/compare/?baseline={bad}", 400),
        ("/conversations/?agent={bad}", 200),
        ("/chat/?conversation={bad}", 404),
    ],
)
def test_it_answers_pages_given_an_id_that_is_no_id(staff_pages, world, bad, path, status):
    response = staff_pages.get(path.format(bad=bad, run_id=world.run_id))

    assert response.status_code == status, response.text[:2000]


@pytest.mark.parametrize("bad", [*NON_ASCII_DIGITS, str(HUGE_ID)])
def test_it_refuses_a_trigger_form_whose_suite_is_no_id(staff_pages, world, bad):
    before = database_fingerprint()

    response = staff_pages.post("/runs/new/", data={"suite": bad, "models": MODEL, "csrfmiddlewaretoken": "t" * 32})

    assert response.status_code == 400, response.text[:2000]
    assert "That suite does not exist" in response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


@pytest.mark.parametrize("bad", NON_ASCII_DIGITS)
def test_it_refuses_a_recording_page_post_whose_suite_is_no_id(staff_pages, world, bad):
    before = database_fingerprint()

    response = staff_pages.post(f"/conversations/{world.conversation_id}/record/", data={"suite": bad})

    assert response.status_code == 400, response.text[:2000]
    assert f"no suite {bad!r}" in response.text.replace("&#x27;", "'")
    assert fingerprint_changes(before, database_fingerprint()) == []


# --- Issue 27, item 18: one integer parser at every door ---------------------------------------------------------


@pytest.mark.parametrize("bad", [*NON_ASCII_DIGITS, "٣.٥", "1 2", "3.5", 3.5, True, ""])
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/runs/", {"trials": "{bad}"}, "trials"),
        ("/api/runs/", {"budget_tokens": "{bad}"}, "budget_tokens"),
        ("/api/agents/", {"max_steps": "{bad}"}, "max_steps"),
    ],
)
def test_it_reads_every_whole_number_as_ids_are_read(staff_api, world, bad, path, body, field):
    # "trials": "٣" started a run of 3 trials and "budget_tokens": "١٠" a budget of 10, where ids and
    # case_concurrency refuse digits other than 0-9.
    before = database_fingerprint()
    base = {"suite": world.suite_id, "models": [MODEL]} if path == "/api/runs/" else _agent_body()
    filled = {**base, **{key: bad for key in body}}

    response = staff_api.post(path, json=filled)

    assert response.status_code == 400, response.text
    assert _fields(response) == {field}, response.text
    assert "whole number written with the digits 0-9" in response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


@pytest.mark.parametrize(("path", "field", "bad"), [
    ("/api/runs/", "budget_cost", "١٠"), ("/api/agents/", "temperature", "٠٫٥"), ("/api/agents/", "temperature", "１"),
])
def test_it_refuses_a_number_written_with_other_digits(staff_api, world, path, field, bad):
    before = database_fingerprint()
    base = {"suite": world.suite_id, "models": [MODEL]} if path == "/api/runs/" else _agent_body()

    response = staff_api.post(path, json={**base, field: bad})

    assert response.status_code == 400, response.text
    assert _fields(response) == {field} and "digits 0-9" in response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


@pytest.mark.parametrize(("field", "bad"), [("trials", "٣"), ("budget_tokens", "١٠"), ("budget_cost", "١")])
def test_it_refuses_other_digits_in_the_trigger_form(staff_pages, world, field, bad):
    before = database_fingerprint()

    response = staff_pages.post("/runs/new/", data={
        "suite": world.suite_id, "models": MODEL, field: bad, "csrfmiddlewaretoken": "t" * 32,
    })

    assert response.status_code == 400, response.text[:2000]
    assert "written with the digits 0-9" in response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


def test_it_still_reads_ascii_digits_as_whole_numbers(staff_api, world):
    response = staff_api.post("/api/runs/", json={
        "suite": world.suite_id, "models": [MODEL], "trials": " 2 ", "budget_tokens": "+100000",
    })

    assert response.status_code == 201, response.text
    assert (response.json()["trials"], response.json()["budget_tokens"]) == (2, 100000)


# --- 15: unknown fields --------------------------------------------------------------------------------------------


@ENGINE_NEUTRAL
@pytest.mark.parametrize(
    ("method", "path", "body", "unknown"),
    [
        ("POST", "/api/runs/", {"suite": "{suite_id}", "models": [MODEL], "budget_token": 5, "trial": 3},
         {"budget_token", "trial"}),
        ("POST", "/api/agents/", {**_agent_body(), "temprature": 1}, {"temprature"}),
        ("PATCH", "/api/agents/{agent_id}/", {"descripton": "x"}, {"descripton"}),
        ("POST", "/api/conversations/", {"agent": "{agent_name}", "intial_state": {"a": 1}}, {"intial_state"}),
        ("POST", "/api/conversations/", {"agent": "{agent_name}", "history": [{"role": "user", "content": "hi",
                                                                               "name": "x"}]}, {"history[0].name"}),
        ("POST", "/api/conversations/{conversation_id}/messages/", {"text": "hi", "model": MODEL}, {"model"}),
        ("POST", "/api/runs/delete/", {"ids": ["{run_id}"], "force": True}, {"force"}),
        ("POST", "/api/runs/{run_id}/cancel/", {"now": True}, {"now"}),
        ("POST", "/api/runs/{run_id}/resume/", {"now": True}, {"now"}),
        ("POST", "/api/recordings/", {"conversation": "{conversation_id}", "sute": "x"}, {"sute"}),
        ("POST", "/api/extractions/", {"conversation": "{conversation_id}", "model": MODEL}, {"model"}),
    ],
)
def test_it_refuses_unknown_fields_naming_them(staff_api, world, method, path, body, unknown):
    def fill(value):
        if isinstance(value, str) and value.startswith("{"):
            filled = value.format(**vars(world))
            return int(filled) if filled.isdigit() else filled
        return [fill(item) for item in value] if isinstance(value, list) else value

    before = database_fingerprint()

    response = staff_api.request(method, _path(path, world), json={key: fill(value) for key, value in body.items()})

    assert response.status_code == 400, response.text
    assert unknown <= _fields(response), response.text
    assert "unknown field" in response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


def test_it_refuses_unknown_fields_in_a_form_too(staff_api, world):
    before = database_fingerprint()

    response = staff_api.post("/api/agents/", data={**_agent_body(), "temprature": "1"})

    assert response.status_code == 400, response.text
    assert _fields(response) == {"temprature"}
    assert fingerprint_changes(before, database_fingerprint()) == []


# --- 17: the field at fault ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/api/agents/", _agent_body(provider="nowhere"), "provider"),
        ("PATCH", "/api/agents/{agent_id}/", {"provider": "nowhere"}, "provider"),
        ("POST", "/api/agents/", _agent_body(model="sim-imaginary"), "model"),
    ],
)
def test_it_names_the_provider_or_the_model_whichever_is_wrong(staff_api, world, method, path, body, field):
    response = staff_api.request(method, _path(path, world), json=body)

    assert response.status_code == 400, response.text
    assert _fields(response) == {field}, response.text


# --- NUL in query strings: PostgreSQL refuses it in any text it is sent -------------------------------------------


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/conversations/?search=a%00b", 200),
        ("/conversations/?tag=a%00b", 200),
        ("/runs/cases-count.json?suite={suite_id}&case_filter=a%00b", 200),
        ("/runs/new/?suite={suite_id}&case_filter=a%00b", 200),
        ("/chat/?conversation=1%00", 404),
    ],
)
def test_it_answers_pages_given_a_nul_in_the_query_string(staff_pages, world, path, status):
    response = staff_pages.get(path.format(**vars(world)))

    assert response.status_code == status, response.text[:2000]


def test_it_refuses_a_trigger_form_whose_case_filter_holds_a_nul(staff_pages, world):
    before = database_fingerprint()

    response = staff_pages.post(
        "/runs/new/", data={"suite": world.suite_id, "models": MODEL, "case_filter": "a\x00"}
    )

    assert response.status_code == 400, response.text[:2000]
    assert "Null characters are not allowed" in response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


def test_it_refuses_a_recording_page_post_whose_suite_holds_a_nul(staff_pages, world):
    before = database_fingerprint()

    response = staff_pages.post(f"/conversations/{world.conversation_id}/record/", data={"suite": "a\x00"})

    assert response.status_code == 400, response.text[:2000]
    assert fingerprint_changes(before, database_fingerprint()) == []


@pytest.mark.parametrize("path", ["/admin/agenthost/agent/", "/admin/agenthost/conversation/", "/admin/runs/run/",
                                  "/admin/runs/caseresult/"])
def test_it_answers_an_admin_search_holding_a_nul(staff_pages, world, path):
    response = staff_pages.get(path, params={"q": "a\x00b"})

    assert response.status_code == 200, response.text[:2000]



@pytest.mark.parametrize(
    "path",
    [
        "/runs/{huge}/", "/runs/{huge}/progress.json", "/runs/{huge}/results/{huge}/", "/runs/{run_id}/results/{huge}/",
        "/runs/{huge}/results/1/", "/runs/{huge}/compare/", "/runs/{huge}/matrix.csv", "/runs/{huge}/junit.xml",
        "/runs/{huge}/results/{huge}/side-by-side/", "/runs/{run_id}/results/{huge}/models/",
        "/conversations/{huge}/", "/admin/agenthost/agent/{huge}/change/", "/admin/runs/run/{huge}/change/",
        "/admin/runs/caseresult/{huge}/change/", "/admin/agenthost/conversation/{huge}/change/",
    ],
)
def test_it_answers_404_to_a_page_whose_path_id_is_beyond_any_id(staff_pages, world, path):
    response = staff_pages.get(path.format(huge=HUGE_ID, run_id=world.run_id), follow_redirects=True)

    assert response.status_code in (200, 404), response.text[:2000]
    assert response.status_code == 404 or "doesn’t exist" in response.text


@pytest.mark.parametrize("path", ["/runs/{huge}/cancel/", "/runs/{huge}/resume/", "/conversations/{huge}/record/",
                                  "/conversations/{huge}/extract/"])
def test_it_answers_404_to_a_post_whose_path_id_is_beyond_any_id(staff_pages, world, path):
    before = database_fingerprint()

    response = staff_pages.post(path.format(huge=HUGE_ID), data={})

    assert response.status_code == 404, response.text[:2000]
    assert fingerprint_changes(before, database_fingerprint()) == []
