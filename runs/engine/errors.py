"""What the run services raise when a request about a run cannot be honoured, said for whoever made it."""

from __future__ import annotations


class RunError(Exception):
    """A request about a run that cannot be honoured; `field` names the input at fault, if any."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class RunConflict(RunError):
    pass


class QueueUnavailable(RunError):
    pass
