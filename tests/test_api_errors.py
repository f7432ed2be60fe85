"""What every REST endpoint shares: a body that cannot be read is a JSON 400, never a 500 or Django's HTML page."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

LONE_SURROGATE = '{"name": "x\\ud800", "agent": "order-router"}'


@pytest.mark.parametrize("url", ["/api/agents/", "/api/suites/", "/api/runs/"])
def test_it_answers_400_to_json_text_that_is_not_unicode(admin_client_api, url):
    # Python parses an escaped lone surrogate; the database cannot encode it: a 500 at the first query before.
    response = admin_client_api.generic("POST", url, LONE_SURROGATE, content_type="application/json")

    assert response.status_code == 400
    assert "not valid Unicode" in str(response.json())


def test_it_answers_a_form_with_too_many_fields_in_json(admin_client_api, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 10

    response = admin_client_api.post("/api/agents/", {f"field{index}": "x" for index in range(11)})

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in response.json()["detail"]
