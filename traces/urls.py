from django.urls import path

from traces import views
from traces.api import TracesExportApi

app_name = "traces"

urlpatterns = [
    # Exactly this path, no trailing slash: exporters append "v1/traces" to the endpoint they are given.
    path("v1/traces", TracesExportApi.as_view(), name="export"),
    path("traces/conversations/", views.trace_conversations, name="conversations"),
    path("traces/conversations/bind/", views.trace_conversation_bind_view, name="bind"),
]
