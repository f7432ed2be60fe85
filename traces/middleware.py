"""An ingest-only token opens one door: POST /v1/traces. Anywhere else a request carrying one is answered 403 before
any view runs — not 401 or a login redirect, which would read as "try another credential" — so an exporter's
misconfigured endpoint, or whoever took the key from a service's environment, learns it can do nothing else."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse

from traces.models import INGEST_KEY_PREFIX

_PREFIX = INGEST_KEY_PREFIX.encode()


def _carries_ingest_key(request: HttpRequest) -> bool:
    words = request.META.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace").split()
    return any(word.startswith(_PREFIX) for word in words[1:2])


class IngestTokenOnlyIngests:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _carries_ingest_key(request) and not (
            request.method == "POST" and request.path_info == reverse("traces:export")
        ):
            return JsonResponse(
                {"detail": "An ingest token may only POST spans to /v1/traces; use a staff or user token here."},
                status=403,
            )
        return self.get_response(request)
