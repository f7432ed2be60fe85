"""Test helpers shipped with the host: a pytest plugin (`pytest_plugins = ["agents.testing.fixtures"]`) and a local
OpenAI-compatible server (`agents.testing.openai_stub`). Nothing here is imported by the running application."""
