"""Test helpers shipped with the host: a pytest plugin (`pytest_plugins = ["agenthost.testing.fixtures"]`) and a local
OpenAI-compatible server (`agenthost.testing.openai_stub`). Nothing here is imported by the running application."""
