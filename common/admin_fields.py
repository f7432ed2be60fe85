"""The admin's JSON text fields, safe on any input: every admin's `formfield_overrides` (or `formfield_for_dbfield`)
uses these for a model JSONField.

Django's own JSON form field decodes with Python's recursive decoder (text nested ~1,000 deep raises RecursionError,
a 500), accepts NaN and Infinity (which no JSON column stores) and decodes the text again each time the form is shown.
Here the depth is checked on the text before any decoding, and the decoded value is checked as the API checks a body
(common.inputs), each refusal a form error on the field.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput

from common.inputs import (
    MAX_JSON_DEPTH,
    SafeJSONDecoder,
    json_loads,
    json_text_too_deep,
    json_value_problem,
    printable_json,
)


class SafeJSONField(forms.JSONField):
    default_error_messages = {
        "too_deep": f"Nested more than {MAX_JSON_DEPTH} levels deep: agenttest stores no JSON deeper than that.",
    }

    def __init__(self, *, decoder: type[json.JSONDecoder] | None = None, **kwargs: Any) -> None:
        # A model JSONField passes its own decoder, None by default. Ours never raises ValueError on an integer of
        # more than 4,300 digits (Django catches only JSONDecodeError: that was a 500); to_python refuses it.
        super().__init__(decoder=decoder or SafeJSONDecoder, **kwargs)

    def to_python(self, value: Any) -> Any:
        if not self.disabled and isinstance(value, str) and json_text_too_deep(value):
            raise ValidationError(self.error_messages["too_deep"], code="too_deep")
        converted = super().to_python(value)
        if not self.disabled and (problem := json_value_problem(converted)) is not None:
            raise ValidationError(f"Cannot be stored: {problem}.", code="unstorable")
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        # Shown again with its error: as typed, without decoding it.
        if not self.disabled and isinstance(data, str) and json_text_too_deep(data):
            return InvalidJSONInput(data)
        bound = super().bound_data(data, initial)
        if not self.disabled and isinstance(data, str) and json_value_problem(bound) is not None:
            # Refused by to_python (e.g. a lone surrogate, which encoding the page would fail on): shown as typed.
            return InvalidJSONInput(data)
        return bound

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value
        return printable_json(value, cls=self.encoder)


class PrettyJSONWidget(forms.Textarea):
    """JSON indented; text that is not valid JSON (or too deep to decode) is shown as typed, so it can be fixed."""

    def format_value(self, value: Any) -> str | None:
        if isinstance(value, str) and value:
            typed: str = value
            if json_text_too_deep(typed):
                return typed
            try:
                value = printable_json(json_loads(typed), indent=2)
            except (ValueError, TypeError):
                # Not JSON, or JSON that cannot be written back (an integer too long to convert): as typed.
                return typed
        shown: str | None = super().format_value(value)
        return shown
