from django.apps import AppConfig

from common.nav import NavEntry


class AgentHostConfig(AppConfig):
    name = "agenthost"
    verbose_name = "Agents (host runtime)"
    nav_entries = (NavEntry("Chat", "agents:chat"), NavEntry("Conversations", "agents:conversations"))

    def ready(self) -> None:
        # Built-in functions register themselves on import, so a worker knows them.
        from agenthost.builtins import control, effects  # noqa: F401
        from agenthost.llm import registry
        from agenthost.runtimes import langgraph, openai_agents, process, pydantic_ai, python  # noqa: F401
        from agenthost.runtimes.guard import install_guards

        registry.connect_signals()
        # A model provider is only a model: a framework run inside one is refused (runtimes/guard.py).
        install_guards()
