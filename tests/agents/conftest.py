"""Fixtures of the host's tests."""

from tests.agents.listeners import local_server

__all__ = ["local_server"]
