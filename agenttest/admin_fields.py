"""The admin's JSON text fields, safe on any input: every admin's `formfield_overrides` (or `formfield_for_dbfield`)
uses these for a model JSONField.

Django's own JSON form field decodes with Python's recursive decoder (text nested ~1,000 deep raises RecursionError,
a 500), accepts NaN and Infinity (which no JSON column stores) and decodes the text again each time the form is shown.
Here the depth is checked on the text before any decoding, and the decoded value is checked as the API checks a body
(agenttest.inputs), each refusal a form error on the field.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput

from agenttest.inputs import MAX_JSON_DEPTH, json_text_too_deep, json_value_problem


class SafeJSONField(forms.JSONField):
    default_error_messages = {
        "too_deep": f"Nested more than {MAX_JSON_DEPTH} levels deep: agenttest stores no JSON deeper than that.",
    }

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
        return super().bound_data(data, initial)


class PrettyJSONWidget(forms.Textarea):
    """JSON indented; text that is not valid JSON (or too deep to decode) is shown as typed, so it can be fixed."""

    def format_value(self, value: Any) -> str | None:
        if isinstance(value, str) and value:
            if json_text_too_deep(value):
                return value
            try:
                value = json.dumps(json.loads(value), indent=2, ensure_ascii=False)
            except json.JSONDecodeError:
                return value
        return super().format_value(value)
