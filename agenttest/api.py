"""What every REST endpoint shares beyond DRF's defaults: the parser and exception handler settings.REST_FRAMEWORK
names, who may write, how lists page, how large an id can be."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

# Limits Django enforces while DRF reads a body. They are the client's doing, so they get the API's JSON 400 rather
# than Django's HTML error page.
_BODY_LIMITS = (RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    # Imported here, not above: DRF's views module loads this one (DEFAULT_PARSER_CLASSES) while it is being loaded.
    from rest_framework.views import exception_handler as drf_exception_handler

    if isinstance(exc, _BODY_LIMITS):
        exc = ParseError(str(exc))
    return drf_exception_handler(exc, context)


class JSONParser(parsers.JSONParser):
    """DRF's, refusing text that is not Unicode: JSON may escape a lone surrogate ("\\ud800"), which Python parses but
    no database stores, so it would fail at the first query instead of as a bad request."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        try:
            json.dumps(data, ensure_ascii=False).encode()
        except UnicodeEncodeError as exc:
            raise ParseError(f"JSON parse error - a string is not valid Unicode: {exc.reason}") from None
        return data


# Ids are BigAutoField; a larger number in a filter would reach the database (SQLite raises OverflowError on it).
MAX_ID = 2**63 - 1


class IsStaffOrReadOnly(BasePermission):
    """Any signed-in user may read; only staff may write. One URL serves both, so the check is per method.
    A view says what is refused in `staff_only_message`."""

    message = "Only staff users may make this change."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in SAFE_METHODS or user.is_staff:
            return True
        self.message = getattr(view, "staff_only_message", self.message)
        return False


class ApiPagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500


def validation_problems(detail: Any, field: str = "") -> Iterator[dict[str, str]]:
    """DRF's nested error detail as flat (field, message) pairs with paths like `turns[1].user_message`, the shape
    every API answers 400s in. An error about the body as a whole (not a JSON object) names "document"."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            path = field if key == "non_field_errors" else (f"{field}.{key}" if field else str(key))
            yield from validation_problems(value, path)
    elif isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        for index, item in enumerate(detail):
            yield from validation_problems(item, f"{field}[{index}]")
    elif isinstance(detail, list):
        for message in detail:
            yield {"field": field or "document", "message": str(message)}
    else:
        yield {"field": field or "document", "message": str(detail)}
