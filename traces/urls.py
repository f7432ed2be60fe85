from django.urls import path

from traces.api import TracesExportApi

app_name = "traces"

urlpatterns = [
    # Exactly this path, no trailing slash: exporters append "v1/traces" to the endpoint they are given.
    path("v1/traces", TracesExportApi.as_view(), name="export"),
]
