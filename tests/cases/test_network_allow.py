"""A suite's `network_allow` (issue 33): hosts its extra-allowed, effect-free tools may reach while a case runs.
Stored lower-cased and trimmed, shown by the API; refused with a 400 naming the field when it is not a host, when
the suite allows no tool to reach it, or when an extra-allowed tool is not free of outside effects."""

from __future__ import annotations

from typing import Any

import pytest

from cases.models import Suite
from cases.services import suite_to_document

pytestmark = pytest.mark.django_db


def _body(**fields: Any) -> dict[str, Any]:
    return {"name": "Rates", "agent": "support", **fields}


def _errors(response) -> dict[str, str]:
    assert response.status_code == 400, response.content
    return {error["field"]: error["message"] for error in response.json()["errors"]}


def test_it_stores_the_hosts_an_allowed_effect_free_tool_may_reach(admin_client_api, agent):
    response = admin_client_api.post(
        "/api/suites/",
        _body(extra_allowed_functions=["track_order"], network_allow=[" Rates.Example.com", "10.0.0.7"]),
        format="json",
    )

    assert response.status_code == 201, response.content
    assert response.json()["network_allow"] == ["rates.example.com", "10.0.0.7"]
    suite = Suite.objects.get(name="Rates")
    assert suite.network_allow == ["rates.example.com", "10.0.0.7"]
    # What the files and the export write.
    assert suite_to_document(suite=suite)["network_allow"] == ["rates.example.com", "10.0.0.7"]


def test_it_refuses_hosts_for_a_suite_that_allows_no_tool(admin_client_api, agent):
    response = admin_client_api.post("/api/suites/", _body(network_allow=["rates.example.com"]), format="json")

    assert _errors(response) == {
        "network_allow": "names hosts for the suite's extra-allowed tools, and the suite allows none; mock the tools "
                         "instead"
    }
    assert not Suite.objects.filter(name="Rates").exists()


@pytest.mark.parametrize("host", ["https://rates.example.com", "rates.example.com:443", "rates.example.com/v1", ""])
def test_it_refuses_what_is_not_a_host_naming_the_entry(admin_client_api, agent, host):
    response = admin_client_api.post(
        "/api/suites/", _body(extra_allowed_functions=["track_order"], network_allow=[host]), format="json"
    )

    problems = _errors(response)
    assert list(problems) == ["network_allow[0]"]
    assert "must be a host name or an IPv4 address" in problems["network_allow[0]"]


def test_it_refuses_hosts_beside_an_extra_allowed_tool_with_outside_effects(admin_client_api, suite):
    response = admin_client_api.patch(
        f"/api/suites/{suite.pk}/", {"extra_allowed_functions": ["void_order"], "network_allow": ["10.0.0.7"]},
        format="json",
    )

    problems = _errors(response)
    assert "void_order is not" in problems["network_allow"]
    suite.refresh_from_db()
    assert suite.network_allow == []


def test_it_saves_the_hosts_from_the_admin_and_refuses_them_there_without_an_allowed_tool(admin_client, suite):
    data = {
        "name": suite.name, "agent": suite.agent_id, "judge_model": "", "case_timeout_seconds": 120, "enabled": "on",
        "extra_allowed_functions": "[]", "force_blocked_functions": "[]", "network_allow": '["10.0.0.7"]',
    }

    refused = admin_client.post(f"/admin/cases/suite/{suite.pk}/change/", data)
    saved = admin_client.post(f"/admin/cases/suite/{suite.pk}/change/",
                              {**data, "extra_allowed_functions": '["track_order"]'})

    assert refused.status_code == 200
    assert "the suite allows none" in refused.content.decode().replace("&#x27;", "'")
    assert saved.status_code == 302
    suite.refresh_from_db()
    assert suite.network_allow == ["10.0.0.7"]
