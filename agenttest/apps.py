from django.apps import AppConfig


class AgenttestConfig(AppConfig):
    name = "agenttest"
    verbose_name = "agenttest"

    def ready(self) -> None:
        from agenttest import checks  # noqa: F401  (registers the system checks)
