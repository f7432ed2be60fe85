from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = "Traces"

    def ready(self) -> None:
        from recording.signals import drafts_stored
        from traces import (
            signals,  # noqa: F401  (worker start: the retention sweep)
            tasks,  # noqa: F401  (registers the import task, which the receiver queues by name)
        )
        from traces.conversations import history_cut_notes_for_drafts

        drafts_stored.connect(history_cut_notes_for_drafts, dispatch_uid="traces.history_cut")
