from django.apps import AppConfig


class AgentHostConfig(AppConfig):
    name = "agenthost"
    verbose_name = "Agents (host runtime)"

    def ready(self) -> None:
        # Built-in functions register themselves on import, so a worker knows them.
        from agenthost.builtins import control, effects  # noqa: F401
        from agenthost.llm import registry

        registry.connect_signals()
