"""A typed plugin tool for the mock-schema tests, registered as a team's plugin registers it (`agenttest.plugin.tool`):
its input schema from its parameters' type hints, its output schema from its return annotation."""

from __future__ import annotations

import os
from pathlib import Path
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


# --- Tools whose code changes under their mocks (`agenttest mocks verify`) -------------------------------------------
# `parcel_tools_install(version)` registers the version of the team's plugin that is deployed: the same function,
# so registering it again replaces it, as a plugin imported again does. Version 2 renames `status` to `state`.


class ParcelV1(pydantic.BaseModel):
    parcel_id: str
    status: str
    updated_at: str


class ParcelV2(pydantic.BaseModel):
    parcel_id: str
    state: str
    updated_at: str


def parcel_tools_install(version: int) -> None:
    from datetime import UTC, datetime

    returns = ParcelV1 if version == 1 else ParcelV2

    def track(parcel_id: str):  # its return type is the deployed version's, set below
        """Track a parcel by its id."""
        now = datetime.now(UTC).isoformat()
        if version == 1:
            return ParcelV1(parcel_id=parcel_id, status="in_transit", updated_at=now)
        return ParcelV2(parcel_id=parcel_id, state="in_transit", updated_at=now)

    track.__annotations__["return"] = returns
    tool(outside_effects=False, name="verify_track_parcel")(track)

    @tool(outside_effects=True, name="verify_ship_parcel")
    def ship(parcel_id: str) -> ParcelV1:
        """Ship a parcel: a real shipment, so an effect outside agenttest."""
        markers = os.environ.get("PARCEL_MARKER_DIR")
        if markers:
            (Path(markers) / f"shipped-{parcel_id}").write_text("")
        return ParcelV1(parcel_id=parcel_id, status="shipped", updated_at=datetime.now(UTC).isoformat())
