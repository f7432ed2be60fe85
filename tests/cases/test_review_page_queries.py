"""The admin's case review page, the cases list, Enable and Record's landing run a fixed number of queries whatever
the size of the case or the list (issue 37, item 6): the same bar as the app's pages. How long they take is printed
by bench/run_page.py beside the run page's."""

from __future__ import annotations

import copy

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.cases.conftest import VALID_DOCUMENT

pytestmark = pytest.mark.django_db


def grown(parts: int) -> dict:
    """VALID_DOCUMENT with `parts` turns, each with two assertions, and a mock per turn."""
    document = copy.deepcopy(VALID_DOCUMENT)
    turn, mock = document["turns"][0], document["mocks"][0]
    document["turns"] = [{**copy.deepcopy(turn), "user_message": f"Where is order {1042 + index}?"}
                         for index in range(parts)]
    document["mocks"] = [{**copy.deepcopy(mock), "call_index": index} for index in range(parts)]
    return document


def queries(client, url: str) -> int:
    client.get(url)  # the first request of a process warms caches (content types, permissions)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured)


# session, user; the case; its turns, history, mocks and assertions, read for the review panel and again by the
# inlines; the suites and agents the selects offer and the agents the checks read; the turns an assertion may point
# at, once for all its selects (it was once per assertion); the mocks' last verifications and the tools' schemas the
# panel checks them against (issue 36) — none per turn, mock or assertion.
REVIEW_PAGE_QUERIES = 31


def test_it_renders_the_review_page_in_the_same_number_of_queries_however_big_the_case(admin_client, make_case):
    small = make_case(name="small", **{key: value for key, value in grown(1).items() if key != "name"})
    big = make_case(name="big", **{key: value for key, value in grown(8).items() if key != "name"})

    assert queries(admin_client, f"/admin/cases/case/{small.pk}/change/") == REVIEW_PAGE_QUERIES
    assert queries(admin_client, f"/admin/cases/case/{big.pk}/change/") == REVIEW_PAGE_QUERIES


def test_it_lists_cases_in_the_same_number_of_queries_however_many_there_are(admin_client, make_case):
    make_case(name="one")
    few = queries(admin_client, "/admin/cases/case/")
    for index in range(12):
        make_case(name=f"case {index}")

    assert queries(admin_client, "/admin/cases/case/") == few


def test_it_renders_only_each_assertions_own_types_parameter_fields(admin_client, make_case):
    """Issue 37, item 6: every type's parameter fields in every assertion were most of the review page's time. A saved
    assertion's row holds its own type's fields; the empty form ("Add another") holds every type's, which the page's
    script copies when a reviewer changes a row's type (tests/browser/test_case_review_editing.py)."""
    from cases.admin_params import param_specs

    case = make_case(name="params")
    page = admin_client.get(f"/admin/cases/case/{case.pk}/change/").content.decode()
    rows = {assertion.type: index for index, assertion in enumerate(case.assertions.order_by("position", "pk"))}

    def fields_of(prefix: str) -> set[str]:
        return {name for name in param_specs() if f'name="assertions-{prefix}-param_{name}"' in page}

    assert fields_of(str(rows["toolCalled"])) == {"function", "arguments"}
    assert fields_of(str(rows["outputRegex"])) == {"pattern"}
    assert fields_of(str(rows["stateEquals"])) == {"key", "value"}
    assert fields_of("__prefix__") == set(param_specs())
