from django.urls import path

from recording.api import ExtractionCreateApi, RecordingCreateApi

app_name = "recording-api"

urlpatterns = [
    path("recordings/", RecordingCreateApi.as_view(), name="recordings"),
    path("extractions/", ExtractionCreateApi.as_view(), name="extractions"),
]
