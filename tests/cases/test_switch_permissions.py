"""One permission rule per action at every door (issue 37, item 8): enabling and disabling a case is for staff who may
change cases (a superuser may), through the admin's bulk actions, the review panel's buttons and the API alike; staff
who may only view cases, and members, are refused at each and nothing changes. On the old code the admin's bulk
actions enabled and disabled cases for view-only staff, whom the review panel refused."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from cases.models import Case

pytestmark = pytest.mark.django_db

KINDS = ("superuser", "staff who may change cases", "staff who may only view cases", "member")
ALLOWED = {"superuser", "staff who may change cases"}
DOORS = ("admin action", "review panel", "API")


def person(django_user_model, kind: str):
    if kind == "superuser":
        return django_user_model.objects.create_superuser("sue", "sue@example.com", "sue-password-123")
    user = django_user_model.objects.create_user(
        "pat", "pat@example.com", "pat-password-123", is_staff=kind != "member"
    )
    codenames = {"staff who may change cases": ["view_case", "change_case"],
                 "staff who may only view cases": ["view_case"]}.get(kind, [])
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="cases", codename__in=codenames))
    return user


def switch(client: Client, door: str, case: Case, action: str) -> int:
    if door == "admin action":
        response = client.post("/admin/cases/case/", {"action": f"{action}_selected", "_selected_action": [case.pk]})
    elif door == "review panel":
        response = client.post(f"/admin/cases/case/{case.pk}/{action}/")
    else:
        response = client.post(f"/api/cases/{case.pk}/{action}/", content_type="application/json")
    return response.status_code


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("kind", KINDS)
def test_it_applies_one_rule_to_enabling_and_disabling_at_every_door(django_user_model, make_case, kind, door):
    draft = make_case(name="A draft", enabled=False, source="recorded")
    live = make_case(name="A live one")
    client = Client()
    client.force_login(person(django_user_model, kind))

    enabling = switch(client, door, draft, "enable")
    disabling = switch(client, door, live, "disable")
    draft.refresh_from_db()
    live.refresh_from_db()

    if kind in ALLOWED:
        assert (draft.enabled, live.enabled) == (True, False)
        assert enabling < 400 and disabling < 400
    else:
        assert (draft.enabled, live.enabled) == (False, True)
        if door == "API":
            assert (enabling, disabling) == (403, 403)


def test_it_offers_view_only_staff_no_bulk_enable_or_disable(django_user_model, make_case):
    make_case(name="A draft", enabled=False)
    client = Client()
    client.force_login(person(django_user_model, "staff who may only view cases"))

    page = client.get("/admin/cases/case/").content.decode()

    assert "enable_selected" not in page and "disable_selected" not in page
