"""Fixtures of the host's tests."""

from tests.agenthost.listeners import local_server

__all__ = ["local_server"]
