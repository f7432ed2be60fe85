"""Issue 10's second property: generated bad payloads — nesting beyond the limit, NaN and infinite numbers, ids in
non-ASCII digits or beyond 64 bits, unknown fields; as JSON, form and multipart bodies — at every write endpoint the
OpenAPI schema lists (so a new endpoint is covered without touching this file), as a staff user over real HTTP.
No answer is a 5xx; after every 400 (indeed any 4xx) the database is exactly as it was; a JSON body that is too deep
or holds a non-finite number is always a 400, and an unknown field in a JSON body is always named."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.cache import caches
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.bad_input import World, database_fingerprint, fingerprint_changes, token_client, world_create

# A minute of hypothesis examples through the API: run once, on production's engine.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.production_engine]

WRITE_METHODS = ("post", "put", "patch", "delete")
LIMIT = 64  # common.inputs.MAX_JSON_DEPTH, as documented
NONFINITE = ("1e999", "-1e999", "NaN", "Infinity", "-Infinity")
# Fields whose value is an id in some endpoint's body, whatever the schema says of its type.
ID_NAMES = frozenset({"suite", "conversation", "agent", "ids", "source_conversation", "sub_agents"})
_PATH_PARAMETER = re.compile(r"{(\w+)}")
EXAMPLES = 15  # per operation: about 400 requests


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    fields: dict[str, dict[str, Any]]  # body properties → their schema; empty when the operation takes no body
    has_body: bool

    @property
    def label(self) -> str:
        return f"{self.method.upper()} {self.path}"


def write_operations(schema: dict[str, Any]) -> list[Operation]:
    operations = []
    for path, methods in schema["paths"].items():
        for method, spec in methods.items():
            if method not in WRITE_METHODS:
                continue
            content = spec.get("requestBody", {}).get("content", {})
            body = content.get("application/json", {}).get("schema", {})
            if "$ref" in body:
                body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
            operations.append(Operation(method, path, dict(body.get("properties", {})), bool(content)))
    return operations


@dataclass
class Bad:
    kind: str
    operation: Operation
    path: str
    real_path: bool
    encoding: str  # json, form or multipart
    content: str | dict[str, str]
    unknown: str = ""


def _nested(depth: int, draw: Any) -> str:
    """JSON text `depth` levels deep, arrays and objects mixed."""
    opens = draw(st.lists(st.sampled_from(["[", '{"k": ']), min_size=depth, max_size=depth))
    closes = "".join("]" if part == "[" else "}" for part in reversed(opens))
    return "".join(opens) + closes


def _wrap(value: str, draw: Any) -> str:
    """`value` (JSON text) a few levels down in lists and objects."""
    for _ in range(draw(st.integers(0, 3))):
        value = draw(st.sampled_from([f"[{value}]", f'{{"total": {value}}}', f'[1, {{"a": {value}}}]']))
    return value


def _id_fields(operation: Operation) -> list[str]:
    return [
        name for name, spec in operation.fields.items()
        if name in ID_NAMES or spec.get("type") == "integer" or spec.get("items", {}).get("type") == "integer"
    ]


@st.composite
def bad_requests(draw: Any, operation: Operation, world: World) -> Bad:
    ids = {"agent_id": world.agent_id, "conversation_id": world.conversation_id, "suite_id": world.suite_id,
           "case_id": world.case_id, "run_id": world.run_id, "result_id": world.result_id}
    # A DELETE of a real object is no bad input: it only gets ids beyond any the database holds.
    real_path = operation.method != "delete" and draw(st.integers(0, 4)) != 0
    path = _PATH_PARAMETER.sub(
        lambda match: str(ids[match.group(1)] if real_path else draw(st.integers(2**63, 10**30))), operation.path
    )
    kind = draw(st.sampled_from(["nested", "nonfinite", "id", "unknown"]))
    encoding = draw(st.sampled_from(["json", "json", "json", "form", "multipart"]))
    names = list(operation.fields) or ["name"]
    field = draw(st.sampled_from(names))
    values: dict[str, str] = {}  # field → JSON text
    unknown = ""
    if kind == "nested":
        values[field] = _nested(draw(st.integers(LIMIT + 1, 2500)), draw)
    elif kind == "nonfinite":
        values[field] = _wrap(draw(st.sampled_from(NONFINITE)), draw)
    elif kind == "id":
        field = draw(st.sampled_from(_id_fields(operation) or names))
        bad = draw(st.one_of(
            st.text(st.characters(categories=["Nd", "No"]).filter(lambda char: not char.isascii()), min_size=1,
                    max_size=6),
            st.integers(2**63, 10**30).map(str),
            st.integers(20, 6000).map(lambda length: "9" * length),
            st.integers(2**63, 10**30),
            st.integers(-(10**30), 0),
        ))
        text = json.dumps(bad)
        values[field] = f"[{text}]" if operation.fields.get(field, {}).get("type") == "array" else text
    else:
        unknown = draw(st.from_regex(r"[a-z][a-z_]{0,15}", fullmatch=True).filter(lambda key: key not in names))
        values[unknown] = json.dumps(draw(st.one_of(st.integers(-5, 5), st.text(max_size=10), st.booleans())))
    if encoding == "json" and kind == "nested" and draw(st.booleans()):
        content: str | dict[str, str] = values[field]  # the whole body
    elif encoding == "json":
        members = ", ".join(f"{json.dumps(key)}: {text}" for key, text in values.items())
        content = f"{{{members}}}"
    else:
        # A form sends every value as text; a JSON field reads it as JSON.
        content = {key: text if text[:1] in "[{" else str(json.loads(text)) for key, text in values.items()}
    return Bad(kind, operation, path, real_path, encoding, content, unknown)


def _named_fields(body: Any) -> set[str]:
    if isinstance(body, dict) and isinstance(body.get("errors"), list):
        return {str(error.get("field")) for error in body["errors"]}
    return set(body) if isinstance(body, dict) else set()


@pytest.fixture
def staff_api(live_server, admin_user):
    with token_client(live_server.url, admin_user) as client:
        yield client


def test_it_answers_no_5xx_and_stores_nothing_for_bad_payloads_at_every_write_endpoint(
    staff_api, admin_user, scripted_model
):
    world = world_create(owner=admin_user)
    # A body that reads as a good message (text holding "-Infinity", say) is answered, as a model would.
    scripted_model.respond_with(lambda request: "Noted.")
    schema = staff_api.get("/api/schema/", params={"format": "json"}).json()
    operations = write_operations(schema)
    assert len(operations) >= 20, [operation.label for operation in operations]

    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def send(operation: Operation, data: st.DataObject) -> None:
        bad = data.draw(bad_requests(operation, world))
        # Throttle history is cached; this sends far faster than a person would.
        for cache in caches.all():
            cache.clear()
        before = database_fingerprint()
        if bad.encoding == "json":
            response = staff_api.request(bad.operation.method, bad.path, content=bad.content,
                                         headers={"Content-Type": "application/json"})
        elif bad.encoding == "form":
            response = staff_api.request(bad.operation.method, bad.path, data=bad.content)
        else:
            # Parts without a file name are a multipart body's plain fields.
            parts = {key: (None, value) for key, value in bad.content.items()}
            response = staff_api.request(bad.operation.method, bad.path, files=parts)
        where = f"{bad.operation.label} as {bad.path} ({bad.kind}, {bad.encoding}): {response.status_code}"
        assert response.status_code < 500, f"{where} {response.text[:3000]}"
        if response.status_code >= 400:
            assert fingerprint_changes(before, database_fingerprint()) == [], f"{where} {response.text[:500]}"
        if bad.encoding == "json" and bad.real_path and bad.operation.has_body:
            if bad.kind in ("nested", "nonfinite"):
                assert response.status_code == 400, f"{where} {response.text[:500]}"
            if bad.kind == "unknown":
                assert response.status_code == 400, f"{where} {response.text[:500]}"
                assert bad.unknown in _named_fields(response.json()), f"{where} {response.text[:500]}"

    for operation in operations:
        send(operation)
