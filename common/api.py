"""What every REST endpoint shares beyond DRF's defaults: the parser and exception handler settings.REST_FRAMEWORK
names, who may write, how lists page, and the input fields and serializer base every write endpoint uses (strict
about unknown fields, ids parsed one way, JSON checked before it is decoded or stored)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import parsers, serializers
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.utils import html

from common.inputs import (
    MAX_ID,
    MAX_JSON_DEPTH,
    NUMBER_TEXT_PROBLEM,
    UNICODE_PROBLEM,
    WHOLE_NUMBER_PROBLEM,
    SafeJSONDecoder,
    json_loads,
    json_text_too_deep,
    json_value_issue,
    json_value_problem,
    number_text_is_ascii,
    parse_id,
    parse_whole_number,
    path_of,
    too_deep_text_where,
    unknown_field_message,
    unstorable_text_path,
)

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
    """DRF's, refusing with a 400 what would otherwise fail later as a 500: nesting beyond MAX_JSON_DEPTH (found in
    the text, before the recursive decoder can hit Python's recursion limit), NaN and infinite numbers (`1e999`
    decodes to infinity; named by their path, e.g. `mocks[0].state_writes.total`), integers of more than 4,300
    digits (never given to int(), which would refuse them with a ValueError), and strings or keys that are not
    Unicode (JSON may escape a lone surrogate, "\\ud800", which Python parses but no database stores and no
    response can be encoded with). Left to the fields, which name them in their own words: a NUL, and an integer
    int() can read but beyond a column (an id field reads 10**25 as "no such object"; JSON fields check their value
    with json_value_problem)."""

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - the body is not {encoding} text: {exc}") from None
        if json_text_too_deep(text):
            # Named like every other 400: by the field the nesting went too deep in, or as the body's own fault.
            where = too_deep_text_where(text) or []
            if not where or not isinstance(where[0], str):
                raise ValidationError(
                    {api_settings.NON_FIELD_ERRORS_KEY: [f"the body is nested more than {MAX_JSON_DEPTH} levels deep"]}
                )
            path = path_of(where)
            shown = path if len(path) <= 200 else f"{path[:200]}…"
            field = path_of(where[:1])
            raise ValidationError({field: [f"nested more than {MAX_JSON_DEPTH} levels deep at {shown}"]})
        try:
            # NaN and Infinity decode like 1e999 does, so that all three are refused below, naming where they are.
            data = json_loads(text)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        issue = json_value_issue(data, nul=False, int_range=False)
        if issue is None:
            return data
        path, message = issue
        if message == UNICODE_PROBLEM:
            # Named by the body's field that holds it, as every 400 is; the body's own fault when it is no object.
            field = next(
                (path_of([key]) for key, value in data.items() if unstorable_text_path({key: value}, nul=False)),
                api_settings.NON_FIELD_ERRORS_KEY,
            ) if isinstance(data, dict) else api_settings.NON_FIELD_ERRORS_KEY
            raise ValidationError({field: [f"a string is not valid Unicode: a lone surrogate at {path}"]})
        key = api_settings.NON_FIELD_ERRORS_KEY if path == "(top level)" else path
        raise ValidationError({key: [json_value_problem(data, nul=False, int_range=False)]})


class ErrorSerializer(serializers.Serializer[Any]):
    """The one shape of a 400 (and of a model that did not answer) across the APIs: every problem names its input."""

    class Meta:
        ref_name = "ValidationErrors"

    class ProblemSerializer(serializers.Serializer[Any]):
        class Meta:
            ref_name = "ValidationProblem"

        field = serializers.CharField(
            help_text="The input at fault: a field (e.g. models, suite) or a path into the body, e.g. "
            "turns[1].assertions[0].params.pattern."
        )
        message = serializers.CharField()

    # The response's key; DRF's metaclass moves a declared field out of the class, so it never shadows the
    # serializer's `errors` property the stubs see it override.
    errors = ProblemSerializer(many=True)  # type: ignore[assignment]


class IsStaff(BasePermission):
    """Only staff may use the view, reading or writing. A view says what is refused in `staff_only_message`."""

    message = "Only staff users may make this change."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated and user.is_staff):
            self.message = getattr(view, "staff_only_message", self.message)
            return False
        return True


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
            if key == api_settings.NON_FIELD_ERRORS_KEY:
                path = field
            elif isinstance(key, int):
                # A list field's errors are keyed by item index.
                path = f"{field}[{key}]"
            else:
                path = f"{field}.{key}" if field else str(key)
            yield from validation_problems(value, path)
    elif isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        for index, item in enumerate(detail):
            yield from validation_problems(item, f"{field}[{index}]")
    elif isinstance(detail, list):
        for message in detail:
            yield {"field": field or "document", "message": str(message)}
    else:
        yield {"field": field or "document", "message": str(detail)}


# --- Input fields and serializers ---------------------------------------------------------------------------------


class StrictInputSerializer(serializers.Serializer[Any]):
    """The base of every request-body serializer: a field it does not know is refused with a 400 naming it, rather
    than dropped — a misspelt `budget_token` would otherwise create a run without the budget its sender asked for."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            known = [name for name, field in self.fields.items() if not field.read_only]
            # A form spells a list or object field's items as `name[0]` or `name.key` (DRF's HTML input parsing).
            prefixes = tuple(f"{name}{mark}" for name in known for mark in "[.") if html.is_html_input(data) else ()
            unknown = [key for key in data if key not in known and not str(key).startswith(prefixes)]
            if unknown:
                raise ValidationError({str(key): [unknown_field_message(str(key), known)] for key in unknown})
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.INT)
class IdField(serializers.Field[int, Any, Any, Any]):
    """A database id in a body or query string, read by common.inputs.parse_id: a JSON integer or ASCII digits.
    An id beyond any the database can hold names no `thing` rather than overflowing the query."""

    default_error_messages = {
        "invalid": "must be a {thing} id (a whole number from 1)",
        "does_not_exist": "no {thing} with id {value}",
    }

    def __init__(self, *, thing: str, **kwargs: Any) -> None:
        self.thing = thing
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        value = parse_id(data)
        if value is None:
            digits = str(data).strip() if isinstance(data, int | str) and not isinstance(data, bool) else ""
            significant = digits.lstrip("0")
            # Compared by length first: int() refuses a text of more than 4,300 digits.
            if digits.isascii() and digits.isdigit() and (len(significant) > 19 or int(significant or 0) > MAX_ID):
                self.fail("does_not_exist", thing=self.thing, value=digits if len(digits) <= 40 else f"{digits[:40]}…")
            self.fail("invalid", thing=self.thing)
        return value

    def to_representation(self, value: Any) -> int:
        return int(value)


class WholeNumberField(serializers.IntegerField):
    """DRF's IntegerField reads text with int(), so `"trials": "٣"` was 3 where an id refuses it: this one reads by
    common.inputs.parse_whole_number, as every door does, then applies min_value/max_value."""

    default_error_messages = {"invalid": WHOLE_NUMBER_PROBLEM}

    def to_internal_value(self, data: Any) -> int:
        value = parse_whole_number(data)
        if value is None:
            self.fail("invalid")
        return value


class AsciiFloatField(serializers.FloatField):
    """DRF's FloatField, refusing text written with digits other than 0-9 (float() reads "٠٫٥" as 0.5)."""

    def to_internal_value(self, data: Any) -> float:
        if not number_text_is_ascii(data):
            raise ValidationError(NUMBER_TEXT_PROBLEM)
        return super().to_internal_value(data)


class AsciiDecimalField(serializers.DecimalField):
    """DRF's DecimalField, refusing text written with digits other than 0-9 (Decimal() reads "١٠" as 10)."""

    def to_internal_value(self, data: Any) -> Any:
        if not number_text_is_ascii(data):
            raise ValidationError(NUMBER_TEXT_PROBLEM)
        return super().to_internal_value(data)


class JSONInputField(serializers.JSONField):
    """DRF's, for a value a form sends as JSON text: checked for depth before it is decoded and for NaN/Infinity
    after, as the JSON parser checks a JSON body (a form would otherwise be the way around it); here text with a NUL
    is refused too, which a JSON body leaves to the fields' validators."""

    def __init__(self, **kwargs: Any) -> None:
        # Decoding never raises ValueError on an integer too long for int(); json_value_problem refuses it.
        kwargs.setdefault("decoder", SafeJSONDecoder)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str | bytes) and (self.binary or getattr(data, "is_json_string", False)):
            if json_text_too_deep(data):
                raise ValidationError(f"nested more than {MAX_JSON_DEPTH} levels deep")
        value = super().to_internal_value(data)
        issue = json_value_issue(value)
        if issue is not None:
            # Named from the field, as the JSON parser names a body's: `functions[0].description: ...`.
            path, message = issue
            where = self.field_name if path == "(top level)" else (
                f"{self.field_name}{path}" if path.startswith("[") else f"{self.field_name}.{path}"
            )
            raise ValidationError(f"{where}: {message}")
        return value
