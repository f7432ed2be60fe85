from django.apps import AppConfig

from common.nav import NavEntry


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Test runs"
    nav_entries = (NavEntry("Runs", "runs:list", section=True),)

    def ready(self) -> None:
        from agenthost.seams import (
            conversation_panel_register,
            executor_providers,
            register_agent_load_hook,
            register_executor_provider,
        )
        from recording.signals import drafts_stored
        from runs import (
            signals,  # noqa: F401  (worker start: sweep and concurrency warning)
            tasks,  # noqa: F401  (registers the run task, which the services dispatch by name)
        )
        from runs.engine.mocking import apply_model_override, mock_provider
        from runs.engine.trace_tapes import trace_tapes_for_drafts
        from runs.web.panels import RESULT_PANEL, result_panel_context

        if mock_provider not in executor_providers():
            register_executor_provider(mock_provider)
        register_agent_load_hook(apply_model_override)
        drafts_stored.connect(trace_tapes_for_drafts, dispatch_uid="runs.engine.trace_tapes")
        # A test conversation's page links back to the result it belongs to.
        conversation_panel_register(template_name=RESULT_PANEL, context=result_panel_context)
