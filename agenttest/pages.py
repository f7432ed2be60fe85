"""The project's own answers for pages that are not there: a 404 page, also with DEBUG on, and the favicon.

Why not Django's debug 404 with DEBUG on: `scripts/demo` runs with DEBUG on, so that a first user of the demo gets a
traceback when something breaks, and an address typed wrong (or a run that was deleted) then showed Django's
technical page listing every URL pattern. A missing page is not a bug to debug; it gets the page a user understands.
The API keeps its JSON 404s: DRF answers them inside its views."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe

FAVICON = Path(__file__).resolve().parent / "static" / "img" / "favicon.svg"
NOT_FOUND_TEMPLATE = "404.html"


def site_nav(request: HttpRequest) -> dict[str, list[dict[str, object]]]:
    """Context processor: the main navigation of the apps installed, in INSTALLED_APPS order, as this user may see
    it. The layout names no app's URL itself, so a host-only deployment shows no link to a page it does not have."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"site_nav": []}
    entries = []
    for config in apps.get_app_configs():
        for entry in getattr(config, "nav_entries", ()):
            if entry.staff_only and not user.is_staff:
                continue
            url = reverse(entry.url_name)
            current = request.path.startswith(url) if entry.section else request.path == url
            entries.append({"label": entry.label, "url": url, "current": current})
    return {"site_nav": entries}


def not_found_page(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404: the project's page, naming what was asked for."""
    return render(request, NOT_FOUND_TEMPLATE, {"path": request.path, "reason": _reason(exception)}, status=404)


def _reason(exception: Exception | None) -> str:
    # Http404 messages from get_object_or_404 name a model and a query; only a message a view wrote for people shows.
    message = str(exception.args[0]) if exception is not None and exception.args else ""
    shown = isinstance(exception, Http404) and message and "matches the given query" not in message
    # The page ends the sentence itself: a message written as a sentence would end it twice ("… deleted..").
    return message.rstrip(". ") if shown else ""


class NotFoundPageMiddleware:
    """With DEBUG on, a page that is not there gets the project's 404 page instead of Django's technical one: a view
    that raised Http404, or an address no URL pattern matches. With DEBUG off Django already uses handler404."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            settings.DEBUG
            and response.status_code == 404
            and getattr(request, "resolver_match", None) is None
            and not request.path.startswith(("/api/", settings.STATIC_URL))
        ):
            return not_found_page(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if settings.DEBUG and isinstance(exception, Http404) and not request.path.startswith("/api/"):
            return not_found_page(request, exception)
        return None


@require_safe
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, which every browser asks for on pages that name no icon (the admin's)."""
    return HttpResponse(FAVICON.read_bytes(), content_type="image/svg+xml")
