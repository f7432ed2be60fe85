"""What every REST endpoint shares: a body that cannot be read is a JSON 400, never a 500 or Django's HTML page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers import WAIT_SECONDS

pytestmark = pytest.mark.django_db

BASE_DIR = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/agents/", '{"name": "x\\ud800", "instruction": "x", "provider": "scripted", "model": "scripted"}',
         "name"),
        ("/api/conversations/", '{"agent": "x\\ud800"}', "agent"),
        ("/api/suites/", '{"name": "x", "description": {"a": ["\\ud800"]}, "agent": "support"}', "description"),
        ("/api/suites/", '["\\ud800"]', "non_field_errors"),
    ],
)
def test_it_answers_400_to_json_text_that_is_not_unicode_naming_the_field(
    admin_client_api, scripted_model, url, body, field
):
    # Python parses an escaped lone surrogate; the database cannot encode it: a 500 at the first query before, then
    # a {"detail": ...} that named no field.
    response = admin_client_api.generic("POST", url, body, content_type="application/json")

    assert response.status_code == 400
    problems = response.json()
    fields = {item["field"] for item in problems["errors"]} if "errors" in problems else set(problems)
    assert fields == {"document" if field == "non_field_errors" and "errors" in problems else field}, problems
    assert "a string is not valid Unicode: a lone surrogate at" in str(problems)


def test_it_answers_a_form_with_too_many_fields_in_json(admin_client_api, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 10

    response = admin_client_api.post("/api/agents/", {f"field{index}": "x" for index in range(11)})

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in response.json()["detail"]


def test_it_loads_the_shared_api_module_before_drf_views(tmp_path):
    # DRF's views module reads DEFAULT_PARSER_CLASSES as it loads; a worker that imported common.api first could not
    # start when that module imported DRF's views at the top.
    script = (
        "from django.conf import settings\n"
        "settings.INSTALLED_APPS\n"
        "import common.api\n"
        "from rest_framework.views import APIView\n"
        "print(APIView.parser_classes[0].__module__)\n"
    )
    env = {**os.environ, "AGENTTEST_DEBUG": "1", "AGENTTEST_VAR_DIR": str(tmp_path)}

    done = subprocess.run([sys.executable, "-c", script], cwd=BASE_DIR, env=env, capture_output=True, text=True,
                          timeout=WAIT_SECONDS, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "common.api"
