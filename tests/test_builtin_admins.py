"""Django's own admins answer a changelist action or filter with a bad id like agenttest's do: no 500."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/admin/auth/user/", "/admin/auth/group/", "/admin/authtoken/tokenproxy/"])
@pytest.mark.parametrize("bad", ["³", "٣", "99999999999999999999999"])
def test_it_refuses_an_action_on_a_bad_id_in_djangos_own_admins(client, admin_user, path, bad):
    client.force_login(admin_user)

    response = client.post(path, {"action": "delete_selected", "_selected_action": [bad]})

    assert response.status_code in (200, 302)
    assert admin_user.__class__.objects.filter(pk=admin_user.pk).exists()


@pytest.mark.parametrize("bad", ["³", "99999999999999999999999"])
def test_it_answers_a_bad_id_filter_in_the_user_admin_without_a_500(client, admin_user, bad):
    client.force_login(admin_user)

    response = client.get("/admin/auth/user/", {"id__exact": bad})

    assert response.status_code in (200, 302)
