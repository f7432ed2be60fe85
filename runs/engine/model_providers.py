"""The harness's runtime providers: every model call of a conversation under test goes through one of them, in all
modes.

In live mode the agent-load hook (mocking.py) points every agent of the conversation at `agenttest-live`, which
calls the model under test; in record mode at `agenttest-record` and in replay mode at `agenttest-replay`, which
answer through the case's tape (runs/tapes/replay.py). Each finds the case session through the conversation id in the
request's metadata (the process-wide registry, case_session.py) and makes the call through it, so no call starts once
the case timed out, none outlasts it (the request carries the case's deadline) and every finished one counts towards
its usage.
"""

from __future__ import annotations

import abc
import functools

from agenthost.seams import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderError,
    UnknownModel,
    api_problem,
    get_provider,
    register_runtime_provider,
)
from runs.engine.case_session import CaseSession, registry
from runs.tapes.replay import RECORD_PROVIDER, REPLAY_PROVIDER, Recorder, Replayer, Tape

LIVE_PROVIDER = "agenttest-live"


class _CaseProvider(ModelProvider):
    """Answers the model calls of conversations under test, and no other, through the case's session: so no call
    starts once the case timed out and every finished one counts towards its usage."""

    mode = ""
    # The request goes on to the model under test (or its tape), which is asked whether it speaks its API.
    speaks_responses = True

    def complete(self, request: ModelRequest) -> ModelResponse:
        session = registry.get(request.metadata.get("conversation_id"))
        if session is None or session.provider != self.name or not self.serves(session):
            raise ProviderError(
                f"provider {self.name!r} only answers conversations of a run in {self.mode} mode",
                code="not_under_test",
                provider=self.name,
                model=request.model,
            )
        bounded = session.bounded(request)
        return session.spend(bounded, lambda: self.answer(session, bounded))

    def serves(self, session: CaseSession) -> bool:
        return True

    @abc.abstractmethod
    def answer(self, session: CaseSession, request: ModelRequest) -> ModelResponse:
        """The model's answer, as this mode gets it."""


class LiveProvider(_CaseProvider):
    kind = "agenttest-live"
    mode = "live"

    def answer(self, session: CaseSession, request: ModelRequest) -> ModelResponse:
        try:
            provider = get_provider(session.model_provider)
        except UnknownModel as exc:
            # Said as the model's failure: the host would report it as this runtime provider being unconfigured.
            raise ProviderError(str(exc), code="not_configured", provider=self.name, model=request.model) from None
        if unsupported := api_problem(provider, request):
            raise ProviderError(unsupported, code="unsupported_api", provider=self.name, model=request.model)
        return session.throttled(lambda: provider.complete(request))


class _TapeProvider(_CaseProvider):
    tape_class: type[Tape]

    def serves(self, session: CaseSession) -> bool:
        return isinstance(session.tape, self.tape_class)

    def answer(self, session: CaseSession, request: ModelRequest) -> ModelResponse:
        tape = session.tape
        assert tape is not None, "serves() made sure the session has this mode's tape"
        return tape.complete(request)


class RecordProvider(_TapeProvider):
    kind = "agenttest-record"
    tape_class = Recorder
    mode = "record"

    def answer(self, session: CaseSession, request: ModelRequest) -> ModelResponse:
        # Recording calls the real model: it is throttled like a live call.
        return session.throttled(lambda: super(RecordProvider, self).answer(session, request))


class ReplayProvider(_TapeProvider):
    kind = "agenttest-replay"
    tape_class = Replayer
    mode = "replay"


@functools.cache
def install_providers() -> None:
    """Register the live, record and replay runtime providers, once per process."""
    register_runtime_provider(LIVE_PROVIDER, LiveProvider(LIVE_PROVIDER, {}))
    register_runtime_provider(RECORD_PROVIDER, RecordProvider(RECORD_PROVIDER, {}))
    register_runtime_provider(REPLAY_PROVIDER, ReplayProvider(REPLAY_PROVIDER, {}))
