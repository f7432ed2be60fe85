from django.apps import AppConfig


class RecordingConfig(AppConfig):
    name = "recording"
    verbose_name = "Recording"

    def ready(self) -> None:
        # The host's conversation list opens each conversation on this app's page, where the record and extract
        # panel is: the host offers the seam and never imports the harness.
        from agenthost.seams import conversation_page_register

        conversation_page_register(url_name="recording:conversation")
