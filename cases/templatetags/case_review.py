"""Template helpers for the case review on the case's admin page (cases/review.py)."""

from __future__ import annotations

from typing import Any

from django import template

from cases.models import Assertion, MockVerification
from cases.review import ShownAssertion, ShownJSON, shown_assertion, shown_json, shown_result, verification_lines

register = template.Library()


@register.filter
def review_json(value: Any) -> ShownJSON:
    return shown_json(value)


@register.filter
def review_result(text: str) -> ShownJSON:
    return shown_result(text or "")


@register.filter
def review_assertion(assertion: Assertion) -> ShownAssertion:
    return shown_assertion(assertion)


@register.filter
def review_verification(verification: MockVerification) -> list[str]:
    return verification_lines(verification)
