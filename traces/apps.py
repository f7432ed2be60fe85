from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = "Traces"

    def ready(self) -> None:
        from traces import (
            signals,  # noqa: F401  (worker start: the retention sweep)
            tasks,  # noqa: F401  (registers the import task, which the receiver queues by name)
        )
