"""What every HTML form agenttest serves shares with its APIs (common.api.StrictInputSerializer): a field it does
not know is refused, naming it, rather than dropped — a misspelt `budget_token` would otherwise start a run without
the budget its sender asked for, and a page's POST would do what was asked minus the part it did not understand."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django import forms

from common.inputs import (
    NUMBER_TEXT_PROBLEM,
    WHOLE_NUMBER_PROBLEM,
    number_text_is_ascii,
    parse_whole_number,
    unknown_field_message,
)

# Sent with every POST form; Django's CSRF middleware reads it, so it is never unknown.
CSRF_FIELD = "csrfmiddlewaretoken"
# An error names this many unknown fields, then counts the rest: a POST may carry a thousand.
_NAMED = 5
# A field's name is shown as sent, cut to this: it is attacker-chosen and lands in a page or a message cookie.
_NAME_CHARS = 60


def unknown_form_fields(data: Mapping[str, Any], known: Iterable[str]) -> list[str]:
    """The keys of POST `data` that are neither one of `known` nor the CSRF token, in the order they were sent."""
    allowed = {*known, CSRF_FIELD}
    return [key for key in data if key not in allowed]


def unknown_fields_message(unknown: list[str], known: Iterable[str]) -> str:
    """One sentence for the unknown fields of a form, in the words the APIs use (unknown_field_message)."""
    names = sorted(known)
    shown = [name if len(name) <= _NAME_CHARS else f"{name[:_NAME_CHARS]}…" for name in unknown[:_NAMED]]
    message = unknown_field_message(shown[0], names)
    if len(shown) > 1:
        others = ", ".join(repr(name) for name in shown[1:])
        more = f" and {len(unknown) - _NAMED} more" if len(unknown) > _NAMED else ""
        message = f"{message} (also unknown: {others}{more})"
    return message[:1].upper() + message[1:] + "."


class StrictForm(forms.Form):
    """A Form that refuses a bound POST holding a field it does not declare: a non-field error naming it, so the
    form is invalid and the view does nothing."""

    def known_field_names(self) -> list[str]:
        """The keys this form's fields read from the data (a MultiWidget reads one per sub-widget)."""
        names: list[str] = []
        for name, field in self.fields.items():
            key = self.add_prefix(name)
            widget = field.widget
            if isinstance(widget, forms.MultiWidget):
                # Set by MultiWidget.__init__ since Django 3.1; django-stubs does not declare it.
                suffixes: list[str] = widget.widgets_names  # type: ignore[attr-defined]
                names.extend(f"{key}{suffix}" for suffix in suffixes)
            else:
                names.append(key)
        return names

    def full_clean(self) -> None:
        super().full_clean()
        if not self.is_bound:
            return
        known = self.known_field_names()
        unknown = unknown_form_fields(self.data, known)
        if unknown:
            self.add_error(None, unknown_fields_message(unknown, known))


class WholeNumberFormField(forms.IntegerField):
    """Django's IntegerField reads with int(), which takes "٣" for 3: this one reads as every API does
    (common.inputs.parse_whole_number)."""

    default_error_messages = {"invalid": WHOLE_NUMBER_PROBLEM[:1].upper() + WHOLE_NUMBER_PROBLEM[1:] + "."}

    def to_python(self, value: Any) -> int | None:
        if value in self.empty_values:
            return None
        number = parse_whole_number(value)
        if number is None:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return number


class AsciiDecimalFormField(forms.DecimalField):
    """Django's DecimalField, refusing text written with digits other than 0-9 (Decimal() reads "١٠" as 10)."""

    def to_python(self, value: Any) -> Any:
        if not number_text_is_ascii(value):
            raise forms.ValidationError(NUMBER_TEXT_PROBLEM[:1].upper() + NUMBER_TEXT_PROBLEM[1:] + ".", code="invalid")
        return super().to_python(value)
