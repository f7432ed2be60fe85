"""MCP servers as tool sources: configuration (config.py), the cached tool lists and agents' declarations of them
(tools.py), and the supervised client sessions that run calls for real outside tests (client.py)."""
