"""The one schema engine: a document's shape is written once, as a pydantic model, published as the JSON Schema
(draft 2020-12) generated from it, and checked with jsonschema against that schema, so what is published is exactly
what is enforced (docs/decisions/0006-files-as-source.md). Each app owns its shapes (`cases/schema.py` suites and
cases, `agenthost/document.py` the agent); this module is what they share: the strict base model, our own wording
beside a rule, a model's defaults, checkers, and the translation of jsonschema's errors into (path, message) pairs in
agenttest's style: paths such as `turns[0].mocks[1].result`, messages such as `is required`, `unknown field 'x';
known fields: …`, `must be true or false, not a string`.

Keywords a schema may carry for this engine, beside the rules they explain:

- `x-messages` (written with `messages_for`): a keyword's failure in our own words; `{got}` names the value given,
  and the words of a key the object does not take (`additionalProperties`) may name it (`{key}`), the keys it does
  take (`{known}`) and the nearest of them, as "did you mean 'x'? " (`{near}`); a file that words its paths its own
  way (`findings`) may give its messages more such names;
- `x-assertion`: the definition is the parameters of that assertion type, named in its messages
  (`is required for outputContains`, `is not a parameter of toolCalled`);
- `x-refused`: key → why a field someone may well try is refused, instead of "unknown field".
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cache
from typing import Annotated, Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

from common.inputs import path_of
from common.model_keys import MODEL_KEY_PATTERN, MODEL_KEY_RULE

JsonObject = dict[str, Any]
Problems = list[tuple[str, str]]
# A path as the keys and indexes it is made of: ("servers", "time", "args", 0).
Parts = tuple[str | int, ...]
Findings = list[tuple[Parts, str]]
# For a problem's path and the value there, what more names its own messages may use (`{at}` → `args[0]`).
Words = Callable[[Parts, Any], Mapping[str, str]]

DRAFT = "https://json-schema.org/draft/2020-12/schema"
# Text with something in it: not empty, not only whitespace.
BLANK = r"\S"
# Patterns many shapes share, named by their rule rather than by the regular expression.
PATTERN_MESSAGES = {MODEL_KEY_PATTERN: MODEL_KEY_RULE}
NonEmpty = Field(min_length=1, pattern=BLANK)
NonEmptyText = Annotated[str, Field(min_length=1, pattern=BLANK)]


class Strict(BaseModel):
    """A document refuses every key its model does not name."""

    model_config = ConfigDict(extra="forbid")


def messages_for(**messages: str) -> dict[str, Any]:
    """Our own wording for a keyword's failure (`required`, `type`, `minLength`, …), kept in the schema itself as
    `x-messages`, so the message sits beside the rule it explains."""
    return {"x-messages": messages}


def defaults(model: type[BaseModel]) -> dict[str, Any]:
    """What a document of `model` holds for each field it may leave out (the `$schema` hint aside)."""
    return {
        name: field.get_default(call_default_factory=True)
        for name, field in model.model_fields.items()
        if not field.is_required() and name != "schema_"
    }


def published(model: type[BaseModel], *, schema_id: str) -> dict[str, Any]:
    """The JSON Schema of `model` as it is published: its draft and id first, its title (the model's own, else its
    class name) next."""
    schema = model.model_json_schema(by_alias=True)
    return {
        "$schema": DRAFT,
        "$id": schema_id,
        "title": model.model_config.get("title", model.__name__),
        **{key: value for key, value in schema.items() if key != "title"},
    }


# A whole number is an int, never 1.0 or true: an IntegerField would store 1.5 as 1, and JSON Schema's own
# "integer" accepts 1.0.
# A number is finite: NaN passes every minimum and maximum (each comparison is false), and no JSON holds it.
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many({
    "integer": lambda _checker, value: isinstance(value, int) and not isinstance(value, bool),
    "number": lambda _checker, value: (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ),
})
# types-jsonschema leaves `extend` unannotated; it returns a validator class as `create` does.
_Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, type_checker=_TYPES
)

# What a document as a whole must hold: a check of part of it leaves these out.
_WHOLE_RULES = ("required", "if", "then", "else")


class Checker:
    """Checks documents against one JSON Schema and says what is wrong with them, as (path, message)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self._defs: dict[str, Any] = schema.get("$defs", {})
        self._whole = _Validator(schema)
        self._partial: jsonschema.protocols.Validator | None = None
        self._parts: dict[str, jsonschema.protocols.Validator] = {}
        self._fields: dict[tuple[str, ...], jsonschema.protocols.Validator] = {}

    def problems(self, document: Any, *, partial: bool = False) -> Problems:
        """Every way `document` breaks the schema. A `partial` document (a change to some of its fields) is checked
        field by field: none is required, and no rule over the whole document applies."""
        if not partial:
            return self._problems(self._whole, document)
        if self._partial is None:
            self._partial = _Validator({key: value for key, value in self.schema.items() if key not in _WHOLE_RULES})
        return self._problems(self._partial, document)

    def part_problems(self, definition: str, value: Any) -> Problems:
        """Every way one part (a definition of the schema, e.g. MockEntry) breaks it; paths relative to the part."""
        if definition not in self._parts:
            self._parts[definition] = _Validator({"$ref": f"#/$defs/{definition}", "$defs": self._defs})
        return self._problems(self._parts[definition], value)

    def fields_problems(self, document: Any, *, without: Iterable[str]) -> Problems:
        """Every way a document's own fields break the schema, the fields in `without` left out (a form edits those
        one by one), and so is any rule over the whole document: it may well be about those."""
        left_out = tuple(without)
        if left_out not in self._fields:
            schema = {key: value for key, value in self.schema.items() if key not in _WHOLE_RULES}
            schema["properties"] = {
                key: value for key, value in self.schema["properties"].items() if key not in left_out
            }
            schema["required"] = [key for key in self.schema.get("required", []) if key not in left_out]
            schema["additionalProperties"] = True
            self._fields[left_out] = _Validator(schema)
        return self._problems(self._fields[left_out], document)

    def findings(self, document: Any, *, words: Words | None = None) -> Findings:
        """Every way `document` breaks the schema, each at its path as keys and indexes, for a file whose messages
        word the path their own way (`server 'time': field 'command' …`); `words` names more of what the schema's own
        messages may say."""
        return self._findings(self._whole, document, words)

    def _problems(self, validator: jsonschema.protocols.Validator, document: Any) -> Problems:
        return [(path_of(parts) or "document", message) for parts, message in self._findings(validator, document)]

    def _findings(self, validator: jsonschema.protocols.Validator, document: Any, words: Words | None = None
                  ) -> Findings:
        found: dict[Parts, str] = {}
        errors = sorted(validator.iter_errors(document), key=lambda error: [str(p) for p in error.absolute_path])
        for error in errors:
            for path, message in self._messages(error, words):
                # The first word on a path is the one worth reading: an anyOf and its branch may both speak.
                found.setdefault(tuple(path), message)
        return list(found.items())

    def _resolved(self, schema: dict[str, Any]) -> dict[str, Any]:
        reference = schema.get("$ref", "")
        if reference.startswith("#/$defs/"):
            resolved: dict[str, Any] = self._defs.get(reference.removeprefix("#/$defs/"), {})
            return resolved
        return schema

    def _wanted(self, schema: dict[str, Any]) -> list[str]:
        schema = self._resolved(schema)
        if "type" in schema:
            types: list[str] = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            return [_TYPE_WORDS.get(item, item) for item in types]
        found: list[str] = []
        for option in schema.get("anyOf", []):
            found += self._wanted(option)
        return found

    def _matching_branch(self, error: jsonschema.ValidationError) -> list[jsonschema.ValidationError] | None:
        """The sub-errors of the one anyOf option of the instance's own type, when exactly one option is of it: what
        is wrong inside that option is the useful news (a call_index of -1, a mapping with an unknown key)."""
        # Set on every error a validation raises; the stubs allow the unset marker of an error made by hand.
        value: Any = error.validator_value
        instance: Any = error.instance
        kind = _json_type(instance)
        options = [
            index for index, option in enumerate(value)
            if kind and (self._resolved(option).get("type") == kind
                         or (kind == "integer" and self._resolved(option).get("type") == "number"))
        ]
        if len(options) > 1 and kind == "object":
            # Several shapes of object (a function declared in full, an MCP server's tools): the one whose keys the
            # instance uses most is the one meant, when there is exactly one such.
            overlap = {index: len(self._resolved(value[index]).get("properties", {}).keys() & instance.keys())
                       for index in options}
            best = max(overlap.values())
            options = [index for index in options if overlap[index] == best] if best else options
        if len(options) != 1:
            return None
        return [inner for inner in error.context or [] if inner.relative_schema_path[0] == options[0]]

    def _shapes(self, error: jsonschema.ValidationError) -> str | None:
        """For an object that fits none of several object shapes: each shape's keys (optional ones marked ?), and the
        instance's own."""
        # Set on every error a validation raises; the stubs allow the unset marker of an error made by hand.
        value: Any = error.validator_value
        instance: Any = error.instance
        error_schema: Any = error.schema
        shapes = []
        for option in value:
            option = self._resolved(option)
            if option.get("type") == "object" and option.get("properties"):
                required = option.get("required", [])
                keys = [*required, *(f"{key}?" for key in option["properties"] if key not in required)]
                shapes.append("{" + ", ".join(keys) + "}")
        if len(shapes) < 2 or not isinstance(instance, dict):
            return None
        others = " or ".join(dict.fromkeys(item for item in self._wanted(error_schema) if item != "a JSON object"))
        has = f"the keys {', '.join(map(str, instance))}" if instance else "no keys"
        return (f"must be {others + ' or ' if others else ''}an object of one of these shapes: {' or '.join(shapes)} "
                f"(? marks an optional key); this one has {has}")

    def _messages(self, error: jsonschema.ValidationError, words: Words | None = None
                  ) -> Iterator[tuple[list[Any], str]]:
        # Set on every error a validation raises; the stubs allow the unset marker of an error made by hand.
        value: Any = error.validator_value
        instance: Any = error.instance
        path = list(error.absolute_path)
        keyword: Any = error.validator
        schema = error.schema if isinstance(error.schema, dict) else {}
        assertion = schema.get("x-assertion")

        def said(template: str, at: list[Any], given: Any, **names: str) -> str:
            return _filled(template, {**(words(tuple(at), given) if words else {}), **names})

        if keyword == "required":
            for name in value:
                if isinstance(instance, dict) and name not in instance:
                    field = self._resolved(schema.get("properties", {}).get(name, {}))
                    own = _own(field, "required")
                    message = said(own, [*path, name], None) if own else (
                        f"is required for {assertion}" if assertion else "is required"
                    )
                    yield [*path, name], message
        elif keyword == "additionalProperties":
            known = [key for key in schema.get("properties", {}) if key != "$schema"]
            refused = schema.get("x-refused") or {}
            own = _own(schema, "additionalProperties")
            for key in instance:
                if key in schema.get("properties", {}):
                    continue
                if key in refused:
                    # A field someone may well try, refused with the reason rather than as a misspelling.
                    yield [*path, key], refused[key]
                elif own is not None:
                    near = difflib.get_close_matches(str(key), known, n=1)
                    yield [*path, key], said(own, [*path, key], instance[key], key=repr(key), known=", ".join(known),
                                             near=f"did you mean {near[0]!r}? " if near else "")
                elif assertion:
                    yield [*path, key], (
                        f"is not a parameter of {assertion} (its parameters: {', '.join(known) or 'none'})"
                    )
                elif known:
                    yield [*path, key], f"unknown field {key!r}; known fields: {', '.join(known)}"
                else:
                    yield [*path, key], f"unknown field {key!r}; it takes no fields"
        elif (own := _own(schema, "type" if keyword == "anyOf" else keyword)) is not None:
            # {got} in our own wording names the value given, where seeing it is the quickest way to the fix.
            yield path, said(own, path, instance, got=repr(instance))
        elif keyword == "anyOf" and (branch := self._matching_branch(error)) is not None:
            for inner in branch:
                yield from self._messages(inner, words)
        elif keyword == "anyOf" and (shapes := self._shapes(error)) is not None:
            yield path, shapes
        elif keyword in ("type", "anyOf"):
            wanted = " or ".join(dict.fromkeys(self._wanted(schema)))
            yield path, f"must be {wanted}, not {_kind_of(instance)}"
        elif keyword in ("enum", "const"):
            choices = value if keyword == "enum" else [value]
            yield path, f"must be one of {', '.join(str(item) for item in choices)}, not {instance!r}"
        elif keyword == "minLength" or (keyword == "pattern" and value == BLANK):
            yield path, "must be a non-empty string"
        elif keyword == "pattern":
            yield path, PATTERN_MESSAGES.get(value, f"must match {value}")
        elif keyword == "maxLength":
            yield path, f"must be at most {value} characters"
        elif keyword == "minItems":
            yield path, "must be a non-empty list" if value == 1 else f"must have at least {value} items"
        elif keyword == "minimum":
            yield path, f"must be {value} or more"
        elif keyword == "maximum":
            yield path, f"must be {value} or less"
        else:
            yield path, error.message


@cache
def checker(model: type[BaseModel]) -> Checker:
    """The checker of `model`'s own JSON Schema."""
    return Checker(model.model_json_schema(by_alias=True))


def problems(model: type[BaseModel], document: Any, *, partial: bool = False) -> Problems:
    """Every way `document` breaks the JSON Schema of `model`, as (path, message); `partial` as Checker.problems."""
    return checker(model).problems(document, partial=partial)


_TYPE_WORDS = {
    "string": "a string", "integer": "a whole number", "number": "a number", "boolean": "true or false",
    "object": "a JSON object", "array": "a JSON list", "null": "null",
}


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # nan, inf, -inf: named, or "must be a number, not a number" would be the news
    if isinstance(value, int | float):
        return "a number"
    words: dict[type, str] = {str: "a string", dict: "an object", list: "a list"}
    return words.get(type(value), type(value).__name__)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", dict: "object", list: "array"}.get(type(value), "")


def _own(schema: dict[str, Any], keyword: str) -> str | None:
    messages: dict[str, str] = schema.get("x-messages") or {}
    return messages.get(keyword)


_NAMED = re.compile(r"\{(\w+)\}")


def _filled(template: str, names: Mapping[str, str]) -> str:
    # In one pass: a value put in is never read again for names, whatever braces it holds.
    return _NAMED.sub(lambda match: names.get(match[1], match[0]), template)
