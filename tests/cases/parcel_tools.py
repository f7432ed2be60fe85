"""A typed plugin tool for the mock-schema tests, registered as a team's plugin registers it (`agenttest.plugin.tool`):
its input schema from its parameters' type hints, its output schema from its return annotation."""

from __future__ import annotations

from typing import Literal

import pydantic

from agenttest.plugin import tool


class Parcel(pydantic.BaseModel):
    parcel_id: str
    status: Literal["in_transit", "delivered"]
    updated_at: str


@tool(outside_effects=False)
def track_parcel(parcel_id: str, carrier: Literal["dhl", "ups"] = "dhl") -> Parcel:
    """Track a parcel by its id."""
    return Parcel(parcel_id=parcel_id, status="in_transit", updated_at="2026-12-04T10:00:00Z")


@tool(outside_effects=False)
def parcel_note(parcel_id: str) -> str:
    """A parcel's note, as text."""
    return f"note for {parcel_id}"
