"""Every URL the app serves, found from the resolver — so a new endpoint is checked the day it is added: anonymous
users get nothing, members can't do admin things, admins can, and every form and API write needs its CSRF token."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from agenthost.models import Agent, Conversation
from cases.models import Case, Suite, Turn
from runs.models import CaseResult, Run

pytestmark = pytest.mark.django_db

# The favicon is a static picture the login page itself shows.
PUBLIC = {"accounts/login/", "accounts/logout/", "favicon.ico"}
# Routes whose writes (POST/PUT/PATCH/DELETE) only staff may make; reading them is open to any signed-in user.
ADMIN_WRITES = {
    "api/agents/",
    "api/agents/<int:agent_id>/",
    "api/suites/",
    "api/suites/<int:suite_id>/",
    "api/cases/",
    "api/cases/<int:case_id>/",
    "api/cases/<int:case_id>/copy/",
    "api/cases/<int:case_id>/enable/",
    "api/cases/<int:case_id>/disable/",
    "api/runs/",
    "api/runs/delete/",
    "api/runs/<int:run_id>/",
    "api/runs/<int:run_id>/cancel/",
    "api/runs/<int:run_id>/resume/",
    "api/runs/<int:run_id>/results/<int:result_id>/freeze/",
    "api/recordings/",
    "api/extractions/",
    "runs/new/",
    "runs/<int:run_id>/cancel/",
    "runs/<int:run_id>/resume/",
    "runs/<int:run_id>/results/<int:result_id>/freeze/",
    "conversations/<int:conversation_id>/record/",
    "conversations/<int:conversation_id>/extract/",
}
# Pages only staff may even open.
ADMIN_PAGES = {"runs/new/"}


def _routes(patterns=None, prefix=""):
    for pattern in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


def app_routes() -> list[str]:
    # Django's admin guards itself (tested separately below); its routes are many and generated.
    return sorted({route for route in _routes() if not route.startswith("admin/")})


@pytest.fixture
def world(admin_user, member, scripted_model):
    agent = Agent.objects.create(name="a", instruction="x", provider="scripted", model="scripted")
    conversation = Conversation.objects.create(agent=agent, owner=member)
    suite = Suite.objects.create(name="s", agent=agent)
    case = Case.objects.create(suite=suite, name="c")
    Turn.objects.create(case=case, user_message="hi")
    run = Run.objects.create(
        suite=suite, model_keys=[scripted_model.key], case_ids=[case.pk], total=1, status=Run.Status.FAILED
    )
    result = CaseResult.objects.create(
        run=run, case=case, case_name="c", model=scripted_model.key, status="failed"
    )
    return {
        "agent_id": agent.pk,
        "conversation_id": conversation.pk,
        "suite_id": suite.pk,
        "case_id": case.pk,
        "run_id": run.pk,
        "result_id": result.pk,
    }


# Query strings some routes need to answer at all.
QUERIES = {"runs/cases-count.json": "?suite={suite_id}"}


def concrete(route: str, ids: dict[str, int]) -> str:
    def fill(match: re.Match) -> str:
        return str(ids[match.group(1)])

    return "/" + re.sub(r"<int:(\w+)>", fill, route) + QUERIES.get(route, "").format(**ids)


def test_it_knows_every_route():
    routes = app_routes()
    assert len(routes) > 30
    unknown_kwargs = {name for route in routes for name in re.findall(r"<(?:\w+:)?(\w+)>", route)} - {
        "agent_id",
        "conversation_id",
        "suite_id",
        "case_id",
        "run_id",
        "result_id",
    }
    assert unknown_kwargs == set(), "teach this test how to build these URLs"


@pytest.mark.parametrize("method", ["get", "post"])
def test_it_gives_anonymous_users_nothing_on_any_route(world, method):
    client = Client()
    for route in app_routes():
        if route in PUBLIC:
            continue
        response = getattr(client, method)(concrete(route, world))
        # 405: a method the route does not take at all, which tells nothing either.
        allowed = {401, 403, 405} | ({302} if response.get("Location", "").startswith("/accounts/login/") else set())
        assert response.status_code in allowed, f"{method.upper()} /{route} answered {response.status_code}"


def test_it_lets_members_read_but_not_make_admin_changes(world, member):
    client = Client()
    client.force_login(member)
    for route in app_routes():
        url = concrete(route, world)
        response = client.get(url)
        if route in ADMIN_PAGES:
            assert response.status_code == 403, route
        else:
            assert response.status_code < 500 and response.status_code not in (401,), (route, response.status_code)
        if route in ADMIN_WRITES:
            for method in ("post", "put", "patch", "delete"):
                answer = getattr(client, method)(url, data={}, content_type="application/json")
                assert answer.status_code in (403, 405), f"member {method.upper()} /{route}: {answer.status_code}"
            assert Run.objects.filter(pk=world["run_id"]).exists()


def test_it_lets_admins_open_every_route(world, admin_user):
    client = Client()
    client.force_login(admin_user)
    for route in app_routes():
        if route.startswith("accounts/logout"):
            continue
        response = client.get(concrete(route, world))
        assert response.status_code in (200, 302, 405), f"admin GET /{route}: {response.status_code}"


def test_it_requires_a_csrf_token_for_every_session_write(world, admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    for route in app_routes():
        if route in PUBLIC:
            continue
        response = client.post(concrete(route, world), data={})
        assert response.status_code in (403, 405), f"POST /{route} without a CSRF token: {response.status_code}"
        if response.status_code == 403 and not route.startswith(("api/schema", "api/docs")):
            assert b"CSRF" in response.content, route


def test_it_guards_the_django_admin(member):
    anonymous = Client().get("/admin/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/")
    client = Client()
    client.force_login(member)
    assert client.get("/admin/cases/case/").status_code == 302
