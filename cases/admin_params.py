"""An assertion's parameters as typed form fields, made from the JSON Schema the case files use (cases/schema.py), so
the admin asks for what each assertion type takes — a text box for `text`, a checkbox for `case_sensitive`, a choice
for `mode` — and raw JSON only when the reviewer asks for it.

Each parameter name is one form field (`param_<name>`), shared by the types that take it (`key` by stateEquals and
tableEquals); a field's `data-types` says which, and the page shows only the selected type's. A parameter whose value
is any JSON (`value`, `arguments`, `rows`) is a small JSON box. Params a typed form cannot show as they are (a key no
type declares, a number where text belongs) open in JSON, so nothing stored is lost by opening the form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from django import forms

from cases.schema import ASSERTION_PARAMS, schema_for
from common.inputs import json_loads, printable_json

PREFIX = "param_"


@dataclass(frozen=True)
class ParamSpec:
    name: str
    # text, boolean, integer, choice, list (of names, comma-separated) or json (any JSON value)
    kind: str
    label: str
    help_text: str
    choices: tuple[str, ...]
    # The assertion types that take it.
    types: tuple[str, ...] = ()

    @property
    def field_name(self) -> str:
        return PREFIX + self.name

    def form_field(self) -> forms.Field:
        common: dict[str, Any] = {"required": False, "label": self.label, "help_text": self.help_text}
        if self.kind == "boolean":
            return forms.BooleanField(**common)
        if self.kind == "integer":
            return forms.IntegerField(**common)
        if self.kind == "choice":
            return forms.ChoiceField(choices=[("", "---------"), *((c, c) for c in self.choices)], **common)
        if self.kind == "json":
            placeholder = 'JSON, e.g. "cancelled", 3, true or {"id": "1043"}'
            widget = forms.Textarea(attrs={"rows": 1, "spellcheck": "false", "placeholder": placeholder})
            return forms.CharField(widget=widget, strip=False, **common)
        attrs = {"placeholder": "names, comma-separated"} if self.kind == "list" else {}
        return forms.CharField(widget=forms.TextInput(attrs=attrs), **common)


def _kind(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return "choice"
    kind = prop.get("type")
    if kind in ("string", "boolean", "integer"):
        return "text" if kind == "string" else kind
    if kind == "array" and prop.get("items", {}).get("type") == "string":
        return "list"
    return "json"


def _definition(assertion_type: str) -> dict[str, Any]:
    return schema_for("case-document")["$defs"][ASSERTION_PARAMS[assertion_type].__name__]


@cache
def param_specs() -> dict[str, ParamSpec]:
    """Every parameter of every assertion type, by name, in the order the types declare them."""
    specs: dict[str, ParamSpec] = {}
    for assertion_type in ASSERTION_PARAMS:
        for name, prop in _definition(assertion_type)["properties"].items():
            help_text = prop.get("description", "")
            spec = specs.get(name) or ParamSpec(
                name=name,
                kind=_kind(prop),
                label=name.replace("_", " "),
                help_text=help_text,
                choices=tuple(prop.get("enum", ())),
            )
            specs[name] = replace(spec, types=(*spec.types, assertion_type))
    return specs


def params_initial(assertion_type: str, params: Any) -> dict[str, Any] | None:
    """The typed fields' values for stored params; None when the fields cannot show them exactly (JSON it is)."""
    if assertion_type not in ASSERTION_PARAMS or not isinstance(params, dict):
        return None
    specs = param_specs()
    initial: dict[str, Any] = {}
    for name, value in params.items():
        spec = specs.get(name)
        if spec is None or assertion_type not in spec.types:
            return None
        shown = _shown(spec, value)
        if shown is None:
            return None
        initial[spec.field_name] = shown
    return initial


def _shown(spec: ParamSpec, value: Any) -> Any:
    if spec.kind == "json":
        try:
            return printable_json(value)
        except (TypeError, ValueError):
            return None
    if spec.kind == "boolean":
        return value if isinstance(value, bool) else None
    if spec.kind == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if spec.kind == "list":
        fits = isinstance(value, list) and all(isinstance(item, str) and "," not in item for item in value)
        return ", ".join(value) if fits else None
    if spec.kind == "choice":
        return value if value in spec.choices else None
    return value if isinstance(value, str) else None


def params_from_fields(
    assertion_type: str, cleaned: dict[str, Any], stored: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """The params the typed fields say, and each field's error. An empty field is left out (its default applies,
    a required one is reported missing by validation), unless the stored params held it with that very value."""
    if assertion_type not in ASSERTION_PARAMS:
        return {}, {}
    stored = stored if isinstance(stored, dict) else {}
    params: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name in _definition(assertion_type)["properties"]:
        spec = param_specs()[name]
        raw = cleaned.get(spec.field_name)
        try:
            value, empty = _value(spec, raw)
        except ValueError as exc:
            errors[spec.field_name] = str(exc)
            continue
        if not empty or (name in stored and stored[name] == value):
            params[name] = value
    return params, errors


def _value(spec: ParamSpec, raw: Any) -> tuple[Any, bool]:
    """(value, whether the field was left empty)."""
    if spec.kind == "boolean":
        return bool(raw), not raw
    if spec.kind == "integer":
        return raw, raw is None
    if spec.kind == "list":
        items = [item.strip() for item in (raw or "").split(",") if item.strip()]
        return items, not items
    if spec.kind == "json":
        text = raw or ""
        if not text.strip():
            return None, True
        try:
            return json_loads(text), False
        except ValueError as exc:
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise ValueError(f'Not valid JSON: {detail}. Text goes in double quotes, e.g. "cancelled".') from None
    return raw or "", not raw
