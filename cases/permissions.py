"""Who may enable or disable a case: one rule for every door (issue 37, item 8) — the admin's bulk actions, the
review panel's buttons and the API. Staff holding the permission to change cases (a superuser holds every one);
staff who may only view cases, and members, may not, whichever door they use. The review panel's "Refresh drifted"
(issue 36), which rewrites a case's mocks, keeps to the same rule."""

from __future__ import annotations

from typing import Any

CASE_SWITCH_PERMISSION = "cases.change_case"
CASE_SWITCH_REFUSED = "Only staff who may change cases may enable or disable them."


def case_switch_allowed(user: Any) -> bool:
    return bool(user and user.is_active and user.is_staff and user.has_perm(CASE_SWITCH_PERMISSION))
