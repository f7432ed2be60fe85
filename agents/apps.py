from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents (host runtime)"

    def ready(self) -> None:
        # Built-in functions register themselves on import; the demo's tools too, so a worker knows them.
        from agents import demo_functions  # noqa: F401
        from agents.builtins import control, effects  # noqa: F401
        from agents.llm import registry

        registry.connect_signals()
