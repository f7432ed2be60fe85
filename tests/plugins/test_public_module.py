"""`agenttest.plugin` is the one module a plugin imports: it offers every registration a plugin needs, the example
plugins need nothing else of agenttest, and the host never imports it (nor the loader)."""

from __future__ import annotations

import ast
from pathlib import Path

import agenttest.plugin

BASE_DIR = Path(__file__).resolve().parent.parent.parent
PROJECT_PACKAGES = ("agenttest", "agenthost", "cases", "runs", "recording", "traces")
PUBLIC = {
    "tool", "register_function", "register_provider_kind", "register_executor_provider", "unregister_executor_provider",
    "register_agent_load_hook", "unregister_agent_load_hook", "FunctionContext", "FunctionResult", "FunctionError",
    "ModelProvider", "ModelRequest", "ModelResponse", "ToolCall", "Usage", "ProviderError", "ModelConfig",
    # Agent runtimes (issue 26): a framework's agent is brought in as a runtime, never wrapped in a provider.
    "Runtime", "RuntimeTurn", "TurnStopped", "register_runtime", "unregister_runtime", "DirectTools",
    # The effects of a tool of the team's framework code, declared without touching it.
    "effects",
    # What a provider kind of its own uses: the numeric-option check and the scripted kind's token estimate.
    "is_number", "estimate_usage",
    # A plugin's set-up command (the demo's demo_setup): the services creating agents, conversations, suites, runs,
    # and applying a directory of agent, suite and case files (`agenttest apply`'s).
    "Agent", "Conversation", "conversation_start", "conversation_send", "ConversationError", "TurnResult",
    "Suite", "suite_create", "case_create", "run_trigger", "RunError", "files_apply", "FilesRejected",
    # A model key read by the one rule (common/model_keys.py), as the demo reads its agent files without the harness.
    "split_model_key",
}


def project_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else (
            [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        )
        found.update(name for name in names if name.split(".")[0] in PROJECT_PACKAGES)
    return found


def test_it_offers_every_registration_a_plugin_needs_and_nothing_else():
    assert set(agenttest.plugin.__all__) == PUBLIC
    assert all(getattr(agenttest.plugin, name) is not None for name in PUBLIC)


def test_it_is_the_only_module_of_agenttest_the_example_plugins_import():
    for name in ("sample_plugin.py", "callable_plugin.py", "clashing_plugin.py"):
        assert project_imports(Path(__file__).with_name(name)) == {"agenttest.plugin"}, name


def test_it_keeps_the_host_from_importing_the_plugin_module_or_the_loader():
    offending = {
        (str(path.relative_to(BASE_DIR)), module)
        for path in sorted((BASE_DIR / "agenthost").rglob("*.py"))
        for module in project_imports(path)
        if module in ("agenttest.plugin", "agenttest.plugin_loading")
    }
    assert offending == set()
