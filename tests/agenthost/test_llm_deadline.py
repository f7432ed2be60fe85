"""The openai provider and a request's deadline, against the local OpenAI-compatible stub: each attempt's timeout is
capped at the time left, no retry starts once its wait would reach the deadline, and without a deadline the SDK's
own attempts are unchanged (issue 27, item 17)."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agenthost.llm import registry
from agenthost.llm.base import DEADLINE, ModelRequest, ProviderError
from agenthost.testing.openai_stub import HttpError
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.workers import WAIT_SECONDS

USER = {"role": "user", "content": "Where is order 1042?"}


def configure(settings, base_url, **options):
    settings.AGENTTEST_PROVIDERS = {
        "local": {
            "kind": "openai", "base_url": base_url, "api_key_env": "", "timeout": 60.0, "max_retries": 2,
            "models": [{"name": "gpt-4o-mini", "input_price": 0.15, "output_price": 0.6, "label": ""}],
            **options,
        }
    }
    return registry.get_provider("local")


def ask(provider, *, within: float | None):
    deadline = None if within is None else time.monotonic() + within
    return provider.complete(ModelRequest(model="gpt-4o-mini", messages=[USER], deadline=deadline))


def test_it_ends_a_slow_call_at_its_deadline_and_hangs_up(settings, openai_stub):
    provider = configure(settings, openai_stub.base_url)
    openai_stub.respond_with(lambda body: "It has shipped.")
    openai_stub.delay = WAIT_SECONDS

    started = time.monotonic()
    with pytest.raises(ProviderError) as raised:
        ask(provider, within=1.0)
    took = time.monotonic() - started

    assert raised.value.code == DEADLINE
    assert "had not answered when the caller's deadline came" in str(raised.value)
    # Not before the deadline; after it by what a loaded machine adds, far from the answer it did not wait for.
    assert 1.0 <= took < WAIT_SECONDS / 4, took
    assert len(openai_stub.requests) == 1, "a call cut by its deadline is not retried"
    wait_until = time.monotonic() + 2
    while openai_stub.in_flight and time.monotonic() < wait_until:
        time.sleep(0.02)
    assert openai_stub.in_flight == 0, "the client hung up, so the server dropped the request"


@hypothesis_settings(max_examples=8, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(retry_after=st.sampled_from([0.2, 0.3, 0.45]), within=st.sampled_from([0.5, 0.9, 1.3]))
def test_it_retries_as_the_server_asks_only_while_the_deadline_allows(settings, openai_stub, retry_after, within):
    provider = configure(settings, openai_stub.base_url, max_retries=10)
    openai_stub.respond_with(
        lambda body: HttpError(503, "overloaded", {"retry-after-ms": str(int(retry_after * 1000))})
    )
    before = len(openai_stub.times)

    started = time.monotonic()
    with pytest.raises(ProviderError) as raised:
        ask(provider, within=within)
    took = time.monotonic() - started

    arrived = openai_stub.times[before:]
    # The server's failure; or, when the last attempt started just before the deadline, the deadline's.
    assert raised.value.code in ("http_503", DEADLINE)
    # No attempt started past the deadline: each retry waits retry_after first, so at most this many attempts start
    # before it — fewer when a loaded machine is slow to answer, never more (an attempt past the deadline is one more).
    assert 1 <= len(arrived) <= math.ceil(within / retry_after - 1e-9), arrived
    # It did not give up early: it stopped when one more wait would reach the deadline, by its own clock when the
    # last failure came back — at most `took` after it started, however late a loaded machine delivered it. (The
    # server's arrival times cannot say when the client read the answer: once that was 0.15 s and more later.)
    assert took + retry_after >= within - 0.05, (took, arrived)


def test_it_leaves_a_request_without_a_deadline_to_the_sdks_attempts(settings, openai_stub):
    provider = configure(settings, openai_stub.base_url, max_retries=2)
    openai_stub.queue(HttpError(503, "overloaded"), HttpError(503, "overloaded"), "It has shipped.")

    assert ask(provider, within=None).text == "It has shipped."
    assert len(openai_stub.requests) == 3
