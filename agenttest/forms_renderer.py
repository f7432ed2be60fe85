"""The form renderer of every page: Django's own, with its plainest templates written out in Python.

The admin's case review page renders some 250 widgets, labels and error lists, each through Django's template engine
(a widget template, then an include of its attributes' template, per widget and per select option): measured with
bench/run_page.py, that was nearly half the page's time. The templates below are rendered here to the same bytes
(`tests/test_forms_renderer.py` renders widgets of every kind, and the review page, both ways and compares); everything
else — a widget with a template of its own, a select with option templates of their own, a non-empty error list —
goes to the templates as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.forms.renderers import DjangoTemplates
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe

WIDGETS = "django/forms/widgets/"
INPUT_TEMPLATES = frozenset(
    f"{WIDGETS}{name}.html"
    for name in ("input", "text", "number", "hidden", "email", "url", "password", "checkbox", "date", "datetime",
                 "time")
)
OPTION_TEMPLATE = f"{WIDGETS}select_option.html"


def _text(value: Any) -> str:
    """`{{ value|stringformat:'s' }}`, escaped as the template engine escapes it."""
    return conditional_escape(value if isinstance(value, SafeString) else str(value))


def _attrs(attrs: dict[str, Any]) -> str:
    """django/forms/widgets/attrs.html: True is a bare name, False leaves the attribute out."""
    return "".join(
        f" {conditional_escape(name)}" + ("" if value is True else f'="{_text(value)}"')
        for name, value in attrs.items() if value is not False
    )


def _input(widget: dict[str, Any]) -> str:
    value = f' value="{_text(widget["value"])}"' if widget["value"] is not None else ""
    return (
        f'<input type="{conditional_escape(widget["type"])}" name="{conditional_escape(widget["name"])}"{value}'
        f"{_attrs(widget['attrs'])}>"
    )


def _textarea(widget: dict[str, Any]) -> str:
    value = conditional_escape(widget["value"]) if widget["value"] else ""
    return f'<textarea name="{conditional_escape(widget["name"])}"{_attrs(widget["attrs"])}>\n{value}</textarea>'


def _select(widget: dict[str, Any]) -> str | None:
    parts = [f'<select name="{conditional_escape(widget["name"])}"{_attrs(widget["attrs"])}>']
    for group_name, options, _ in widget["optgroups"]:
        if group_name:
            parts.append(f'\n  <optgroup label="{conditional_escape(group_name)}">')
        for option in options:
            if option["template_name"] != OPTION_TEMPLATE:
                return None
            # The option's template file ends with a newline, which its include keeps.
            parts.append(
                f'\n  <option value="{_text(option["value"])}"{_attrs(option["attrs"])}>'
                f"{conditional_escape(option['label'])}</option>\n"
            )
        if group_name:
            parts.append("\n  </optgroup>")
    parts.append("\n</select>")
    return "".join(parts)


def _label(context: dict[str, Any]) -> str:
    label = conditional_escape(context["label"])
    if not context["use_tag"]:
        return label
    return f"<{context['tag']}{_attrs(context['attrs'])}>{label}</{context['tag']}>"


def _errors(context: dict[str, Any]) -> str | None:
    # Only the empty list, nearly every field's, is written here; errors go to the template.
    return "" if not context["errors"] else None


def _widget(render: Callable[[dict[str, Any]], str | None]) -> Callable[[dict[str, Any]], str | None]:
    return lambda context: render(context["widget"]) if set(context) == {"widget"} else None


PLAIN: dict[str, Callable[[dict[str, Any]], str | None]] = {
    **{name: _widget(_input) for name in INPUT_TEMPLATES},
    f"{WIDGETS}textarea.html": _widget(_textarea),
    f"{WIDGETS}select.html": _widget(_select),
    "django/forms/label.html": _label,
    "django/forms/errors/list/ul.html": _errors,
}


class FormRenderer(DjangoTemplates):
    """Django's DjangoTemplates renderer; PLAIN's templates rendered in Python to the same HTML."""

    def render(self, template_name: str, context: dict[str, Any], request: Any = None) -> str:
        plain = PLAIN.get(template_name)
        html = plain(context) if plain is not None else None
        if html is None:
            return super().render(template_name, context, request=request)
        return mark_safe(html)  # noqa: S308 — every value in it was escaped above
