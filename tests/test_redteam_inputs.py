"""Red-team findings 3, 4 and 5 where they are shared: common.inputs refuses lone surrogates and integers beyond
what agenttest stores, and never hands int() a text of more than 4,300 digits; the API's JSON parser and the admin's
JSON fields (agents, conversations) refuse the same; every admin changelist reads action ids, id filters and
date-hierarchy parts as ASCII digits."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator

import httpx
import pytest
from django.contrib.messages import get_messages
from hypothesis import given
from hypothesis import strategies as st

from agenthost.models import Agent, Conversation
from common.admin_fields import PrettyJSONWidget, SafeJSONField
from common.inputs import (
    MAX_JSON_INT,
    TooLongInteger,
    json_loads,
    json_value_issue,
    json_value_problem,
)
from tests.bad_input import (
    LONG_DIGITS,
    NON_ASCII_DIGITS,
    World,
    database_fingerprint,
    fingerprint_changes,
    token_client,
    world_create,
)

LONG_INTEGER = "1" + "0" * 5000

# --- common.inputs ---------------------------------------------------------------------------------------------

json_leaves = st.none() | st.booleans() | st.integers(-MAX_JSON_INT, MAX_JSON_INT) | st.floats(
    allow_nan=False, allow_infinity=False
) | st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(st.characters(exclude_categories=("Cs", "Cc")), max_size=6), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_it_accepts_every_storable_json_value_after_a_round_trip(value):
    text = json.dumps(value)

    assert json_value_problem(json_loads(text), nul=False) is None


@given(
    value=json_values,
    bad=st.sampled_from(['"\\ud800"', '"x\\udfff"', LONG_INTEGER, "-" + LONG_INTEGER, str(MAX_JSON_INT + 1),
                         str(-MAX_JSON_INT - 1), "1" * 25]),
    as_key=st.booleans(),
)
def test_it_names_where_a_lone_surrogate_or_a_huge_integer_is(value, bad, as_key):
    if as_key and bad.startswith('"'):
        text = json.dumps({"inner": {"wrapped": value}})[:-2] + f', {bad}: 1}}}}'
        where = "inner"
    else:
        text = json.dumps({"inner": [value]})[:-2] + f", {bad}]}}"
        where = "inner["

    issue = json_value_issue(json_loads(text))

    assert issue is not None
    path, message = issue
    assert path.startswith(where)
    assert ("Unicode" in message or "surrogate" in message) if bad.startswith('"') else "integers must be" in message
    # The message can itself be shown on a page and stored.
    json_value_problem(json_loads(text)).encode("utf-8")


@given(st.text(alphabet="-0123456789.eE[]{},: \"", max_size=40) | st.integers(4200, 6000).map(lambda n: "9" * n))
def test_it_decodes_any_text_raising_only_a_json_decode_error(text):
    try:
        json_loads(text)
    except json.JSONDecodeError:
        pass


def test_it_never_gives_int_a_text_of_more_than_4300_digits():
    value = json_loads(f'{{"x": [{LONG_INTEGER}]}}')

    assert isinstance(value["x"][0], TooLongInteger)
    assert json_value_problem(value) == f"x[0]: integers must be between -{MAX_JSON_INT} and {MAX_JSON_INT}"


def test_it_keeps_the_edge_integers():
    assert json_value_problem(json_loads(f"[{MAX_JSON_INT}, -{MAX_JSON_INT}]")) is None


# --- The shared admin field and widget ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ['["\\ud800"]', '{"\\udfff": 1}', f"[{LONG_INTEGER}]", "[1e999]"])
def test_it_refuses_unstorable_json_in_the_safe_field_and_shows_it_as_typed(text):
    field = SafeJSONField()

    with pytest.raises(Exception, match="Cannot be stored"):
        field.clean(text)
    shown = field.prepare_value(field.bound_data(text, None))
    assert shown == text


def test_it_renders_a_stored_lone_surrogate_escaped_rather_than_failing():
    field = SafeJSONField()

    shown = PrettyJSONWidget().format_value(field.prepare_value(["\ud800", "é"]))

    assert "\\ud800" in shown
    shown.encode("utf-8")
    # Text without one stays readable.
    assert "é" in PrettyJSONWidget().format_value(field.prepare_value(["é"]))


# --- Over HTTP: the JSON parser -----------------------------------------------------------------------------------


@pytest.fixture
def world(admin_user, scripted_model) -> World:
    return world_create(owner=admin_user)


@pytest.fixture
def staff_api(live_server, admin_user) -> Iterator[httpx.Client]:
    with token_client(live_server.url, admin_user) as client:
        yield client


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ('{{"agent": "{agent}", "initial_state": {{"x": ' + LONG_INTEGER + "}}}}", "initial_state.x", "integers"),
        ('{{"agent": "{agent}", "initial_state": {{"x": "\\ud800"}}}}', "document", "not valid Unicode"),
        ('{{"agent": "{agent}", "initial_state": {{"\\udc00": 1}}}}', "document", "not valid Unicode"),
        ('{{"agent": "{agent}", "tags": ["ok", "\\udfff"]}}', "document", "not valid Unicode"),
    ],
)
def test_it_refuses_a_body_with_a_lone_surrogate_or_a_huge_integer(staff_api, world, body, field, words):
    before = database_fingerprint()

    response = staff_api.post(
        "/api/conversations/", content=body.format(agent=world.agent_name),
        headers={"Content-Type": "application/json"},
    )

    assert response.status_code == 400, response.text[:2000]
    assert words in response.text
    if field != "document":
        assert field in response.text
    assert fingerprint_changes(before, database_fingerprint()) == []


# --- The agenthost admin's JSON fields ----------------------------------------------------------------------------


def _agent_form(**overrides: str) -> dict[str, str]:
    return {
        "name": "probe", "description": "", "instruction": "Help.", "provider": "scripted", "model": "scripted",
        "temperature": "0", "max_steps": "", "functions": '[{"name": "lookup_order"}]', "rules": "[]", **overrides,
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("functions", '[{"name": "\\ud800"}]'),
        ("functions", '[{"name": "lookup_order", "output": "\\ud800"}]'),
        ("functions", f'[{{"name": "lookup_order", "output": {LONG_INTEGER}}}]'),
        ("rules", '[{"trigger": "conversation_started", "function": "lookup_order", "arguments": {"q": "\\udfff"}}]'),
    ],
)
def test_it_shows_a_form_error_for_unstorable_agent_json(admin_client, scripted_model, field, text):
    before = Agent.objects.count()

    response = admin_client.post("/admin/agenthost/agent/add/", _agent_form(**{field: text}))

    assert response.status_code == 200
    page = response.content.decode()
    assert "Cannot be stored" in page and html.escape(text[:60]) in page
    assert Agent.objects.count() == before


@pytest.mark.django_db
@pytest.mark.parametrize("tags", ['["\\ud800"]', '["a", {"\\udc00": 1}]', f"[{LONG_INTEGER}]"])
def test_it_shows_a_form_error_for_unstorable_conversation_tags(admin_client, admin_user, scripted_model, tags):
    world = world_create(owner=admin_user)
    conversation = Conversation.objects.get(pk=world.conversation_id)

    response = admin_client.post(
        f"/admin/agenthost/conversation/{conversation.pk}/change/", {"title": "renamed", "tags": tags}
    )

    assert response.status_code == 200
    assert "Cannot be stored" in response.content.decode()
    conversation.refresh_from_db()
    assert conversation.title != "renamed"
    assert admin_client.get("/api/conversations/").status_code == 200
    assert admin_client.get(f"/admin/agenthost/conversation/{conversation.pk}/change/").status_code == 200


# --- 5: every changelist ------------------------------------------------------------------------------------------

BAD_IDS = [*NON_ASCII_DIGITS, "99999999999999999999999", LONG_DIGITS, "-1", "0", "1e3"]


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "model"), [("/admin/agenthost/agent/", Agent),
                                             ("/admin/agenthost/conversation/", Conversation)])
@pytest.mark.parametrize("bad_id", BAD_IDS)
def test_it_refuses_the_delete_action_on_something_that_is_no_id(
    admin_client, admin_user, scripted_model, path, model, bad_id
):
    world_create(owner=admin_user)
    real = model.objects.order_by("pk").first()
    before = database_fingerprint()

    for extra in ({}, {"post": "yes"}):
        response = admin_client.post(
            path, {"action": "delete_selected", "_selected_action": [real.pk, bad_id], **extra}, follow=True
        )
        assert response.status_code == 200
        assert "is not an id" in {m.level_tag: str(m) for m in get_messages(response.wsgi_request)}["error"]
    assert fingerprint_changes(before, database_fingerprint()) == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/admin/agenthost/conversation/", "agent__id__exact"),
        ("/admin/agenthost/agent/", "id"),
        ("/admin/runs/run/", "suite__id__exact"),
        ("/admin/runs/caseresult/", "run__id__exact"),
        ("/admin/agenthost/conversation/", "created_at__year"),
        ("/admin/agenthost/conversation/", "created_at__month"),
    ],
)
@pytest.mark.parametrize("value", [*BAD_IDS, "10000000000000000000000000"])
def test_it_answers_a_filter_that_is_no_id_as_an_invalid_lookup(
    admin_client, admin_user, scripted_model, path, key, value
):
    world_create(owner=admin_user)
    params = {key: value, "created_at__year": "2026"} if key == "created_at__month" else {key: value}

    response = admin_client.get(path, params)

    assert (response.status_code, response["Location"]) == (302, f"{path}?e=1")
    assert admin_client.get(f"{path}?e=1").status_code == 200


@pytest.mark.django_db
def test_it_still_filters_a_changelist_by_a_real_id_and_year(admin_client, admin_user, scripted_model):
    world = world_create(owner=admin_user)

    by_agent = admin_client.get("/admin/agenthost/conversation/", {"agent__id__exact": str(world.agent_id)})
    by_year = admin_client.get("/admin/agenthost/conversation/", {"created_at__year": "2026"})

    assert by_agent.status_code == by_year.status_code == 200


# --- Pages that show stored JSON or a tool result's text ----------------------------------------------------------


@pytest.mark.parametrize(
    "text", [f'{{"n": {LONG_INTEGER}}}', '{"a": "\\ud800"}', '["\\udfff", "é"]', '{"ok": "é"}', "not json", ""]
)
def test_it_shows_any_tool_result_text_without_failing(text):
    from agenthost.templatetags.transcript_tags import readable_result
    from runs.web.readable import readable as _pretty

    for shown in (readable_result(text), _pretty(text)):
        shown.encode("utf-8")
        if "\\ud" not in text:
            # Readable text stays readable; only a value holding a surrogate is shown escaped whole.
            assert ("é" in shown) == ("é" in text)


def test_it_shows_a_stored_value_holding_a_lone_surrogate_escaped():
    from agenthost.templatetags.transcript_tags import as_json

    assert as_json({"k": "\ud800"}) == '{\n  "k": "\\ud800"\n}'
    assert as_json({"k": "é"}) == '{\n  "k": "é"\n}'
