from django.apps import AppConfig


class AgenttestConfig(AppConfig):
    name = "agenttest"
    verbose_name = "agenttest"

    def ready(self) -> None:
        from agenttest import checks  # noqa: F401  (registers the system checks)
        from agenttest.plugin_loading import plugins_load

        # INSTALLED_APPS lists agenttest after agenthost: the built-in functions are registered, so a plugin that
        # takes one of their names is refused by name, and before the harness apps, whose agent-load hook (the
        # model under test) must run after any a plugin adds.
        plugins_load()
