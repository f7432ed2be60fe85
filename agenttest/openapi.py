"""Hooks drf-spectacular runs over the generated OpenAPI schema."""

from __future__ import annotations

from collections import Counter
from typing import Any


def distinct_schema_titles(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """Give each component schema a title of its own. The case and suite documents' pydantic models carry one title
    ("agenttest case document"), which the request, response and partial-update variants all inherit; Swagger UI
    lists schemas by title, so four read alike. A shared title gets its component's name beside it."""
    schemas = result.get("components", {}).get("schemas", {})
    shared = Counter(schema.get("title") for schema in schemas.values() if isinstance(schema, dict))
    for name, schema in schemas.items():
        if isinstance(schema, dict) and schema.get("title") and shared[schema["title"]] > 1:
            schema["title"] = f"{schema['title']} ({name})"
    return result
