"""Red-team finding 10, the conversation page's part: "Record as draft" and "Extract cases" refuse a field the form
does not send, naming it, and create nothing — over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from cases.models import Case
from tests.bad_input import database_fingerprint, fingerprint_changes, session_client
from tests.properties import SUPPRESSED_WITH_FIXTURES

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff_pages(live_server, admin_user) -> Iterator[httpx.Client]:
    with session_client(live_server.url, admin_user) as client:
        yield client


@pytest.mark.parametrize("action", ["extract", "record"])
def test_it_refuses_a_make_cases_post_with_an_unknown_field_and_creates_nothing(
    staff_pages, three_topics, scripted_model, action
):
    before = database_fingerprint()

    response = staff_pages.post(
        f"/conversations/{three_topics.pk}/{action}/",
        data={"suite": "", "extraction_model": scripted_model.key, "zzz": "1", "name": "renamed"},
    )

    assert response.status_code == 400
    assert (
        "Unknown field 'zzz'; known fields: extraction_model, suite (also unknown: 'name'). Nothing was created."
        in response.text.replace("&#x27;", "'")
    )
    assert not scripted_model.requests, "no extraction model was asked"
    assert not Case.objects.exists()
    assert not fingerprint_changes(before, database_fingerprint())


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(name=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=30))
def test_it_refuses_any_field_the_extract_form_does_not_send(admin_client, three_topics, scripted_model, name):
    if name in {"suite", "extraction_model", "csrfmiddlewaretoken"}:
        return
    response = admin_client.post(
        f"/conversations/{three_topics.pk}/extract/", {"suite": "", "extraction_model": scripted_model.key, name: "1"}
    )
    assert response.status_code == 400
    assert not Case.objects.exists()
