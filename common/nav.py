"""The site's main navigation, built from the installed apps: each app config lists its own entries in `nav_entries`,
and the layout (the composition root's base.html) shows those of the apps installed — a deployment without an app
shows no link to it (decision 0040)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NavEntry:
    label: str
    url_name: str
    # Shown to staff only; everyone else never sees the link (the page refuses them anyway).
    staff_only: bool = False
    # Marked current on every page under its URL (a run's pages under Runs), not only on the page itself.
    section: bool = False
