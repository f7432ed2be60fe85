"""Ids an admin changelist reads from the request, read as every other way into agenttest reads them
(common.inputs.parse_id): ASCII digits, at most a 64-bit integer.

Django's admin hands the selected rows of an action (`_selected_action`) and a list filter's value
(`?suite__id__exact=`) to the database as they come: `int("³")` raises ValueError and an id of 23 digits overflows
SQLite (both a 500), while `int("٣")` is 3, so a filter selected a row no client named. Every ModelAdmin with actions
or list filters mixes this in before admin.ModelAdmin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ERROR_FLAG
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from common.inputs import parse_id

# Query-string lookups whose value is an id: `pk`, `id`, `suite__id__exact`, `agent_id__in`, ...
_ID_LOOKUPS = ("exact", "in")
# A date hierarchy's (`?created_at__year=`): Django catches the ValueError of datetime(int(...)) but not the
# OverflowError of a year of 25 digits, and int("٣") is a year too.
_DATE_PARTS = ("year", "month", "day")


def _is_id_lookup(key: str, relations: frozenset[str] = frozenset()) -> bool:
    """Whether a query-string key compares an id: `pk`, `id`, `*_id`, or a relation named bare (`suite`,
    `suite__exact`, `run__in`), which Django compares with the related row's primary key."""
    parts = key.split("__")
    if len(parts) > 1 and parts[-1] in _ID_LOOKUPS:
        parts = parts[:-1]
    last = parts[-1]
    return last in ("pk", "id") or last.endswith("_id") or (len(parts) == 1 and last in relations)


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else f"{value[:40]}…")


if TYPE_CHECKING:
    # Checked as the ModelAdmin it is mixed into, so its calls to the admin's methods are checked too.
    _AdminBase = admin.ModelAdmin[Any]
else:
    _AdminBase = object


class StrictIdsAdminMixin(_AdminBase):
    """Refuses a changelist request naming something other than an id where an id belongs, before Django's admin
    gives it to the database: an action's selection (an error message, nothing done) and an id filter (Django's
    own "invalid lookup" answer, as for any filter it cannot apply; likewise a date hierarchy's year, month or day)."""

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        bad = [value for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME) if parse_id(value) is None]
        if bad:
            self.message_user(
                request,
                f"Nothing was done: {', '.join(_shown(value) for value in bad[:3])} is not an id (a whole number "
                "from 1, in ASCII digits).",
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset, *args, **kwargs)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        relations = frozenset(
            field.name
            for field in self.model._meta.get_fields()
            if field.is_relation and (field.many_to_one or field.one_to_one or field.many_to_many)
        )
        if self._bad_id_filter(request, relations):
            # What Django answers for a filter it cannot apply (IncorrectLookupParameters): the list with ?e=1.
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")
        return super().changelist_view(request, extra_context)

    @staticmethod
    def _bad_id_filter(request: HttpRequest, relations: frozenset[str] = frozenset()) -> bool:
        for key, values in request.GET.lists():
            if key.rsplit("__", 1)[-1] in _DATE_PARTS and "__" in key:
                if any(not (value.isascii() and value.isdigit() and len(value) <= 4) for value in values):
                    return True
                continue
            if not _is_id_lookup(key, relations):
                continue
            for value in values:
                items = value.split(",") if key.endswith("__in") else [value]
                if any(parse_id(item) is None for item in items):
                    return True
        return False
