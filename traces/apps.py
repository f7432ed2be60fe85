from django.apps import AppConfig

from common.nav import NavEntry


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = "Traces"
    nav_entries = (NavEntry("Traces", "traces:conversations", staff_only=True, section=True),)

    def ready(self) -> None:
        from agenthost.seams import conversation_panel_register
        from recording.signals import drafts_stored
        from traces import (
            signals,  # noqa: F401  (worker start: the retention sweep)
            tasks,  # noqa: F401  (registers the import task, which the receiver queues by name)
        )
        from traces.conversations import history_cut_notes_for_drafts
        from traces.panels import SOURCE_PANEL, source_panel_context

        drafts_stored.connect(history_cut_notes_for_drafts, dispatch_uid="traces.history_cut")
        conversation_panel_register(template_name=SOURCE_PANEL, context=source_panel_context)
