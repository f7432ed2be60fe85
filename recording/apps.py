from django.apps import AppConfig


class RecordingConfig(AppConfig):
    name = "recording"
    verbose_name = "Recording"
