from django.apps import AppConfig


class RecordingConfig(AppConfig):
    name = "recording"
    verbose_name = "Recording"

    def ready(self) -> None:
        # Record and extract on the host's conversation page: the host offers the seam and never imports the harness.
        from agenthost.seams import conversation_panel_register
        from recording.panels import (
            MAKE_CASES_ORDER,
            MAKE_CASES_PANEL,
            MAKE_CASES_STYLESHEET,
            make_cases_panel_context,
        )

        conversation_panel_register(
            template_name=MAKE_CASES_PANEL, context=make_cases_panel_context, order=MAKE_CASES_ORDER,
            stylesheet=MAKE_CASES_STYLESHEET,
        )
