"""Per-provider concurrency inside a run, adapted to 429s: additive increase, multiplicative decrease (AIMD).

Every live (and recording) model call of a run's case — the llmJudge's included, on the judge model's provider,
whose limit it shares with that provider's agent calls — goes through its provider's `ProviderThrottle`. At most
`limit` calls of one provider are in flight at once; the limit starts at the provider's `max_concurrency` (its
entry in AGENTTEST_PROVIDERS) or the suite's case concurrency, whichever is lower. A call the provider refuses as
rate limited (HTTP 429, after the SDK's own retries) halves the limit — once per round: 429s of calls that started
before the last decrease say nothing new — and the call waits and is made again, so a storm slows a run down but
does not turn its cases into Error. After `limit` successes in a row the limit grows by one, up to where it started.
A provider limited to one call at a time (a serial run) is left alone: there is nothing to lower.

A case that timed out makes no new attempt (the session's `expired`), nor does a case whose timeout a back-off would
reach (`may_back_off`): its call fails as the provider said while the case can still report it. A call that keeps
being refused past MAX_ATTEMPTS fails too, so a provider that never lets up still ends the case.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings

from agenthost.seams import ProviderError

T = TypeVar("T")
RATE_LIMITED = "rate_limited"
MAX_ATTEMPTS = 12
FIRST_BACKOFF_SECONDS = 0.05
MAX_BACKOFF_SECONDS = 2.0


class ProviderThrottle:
    def __init__(self, *, provider: str, ceiling: int) -> None:
        self.provider = provider
        self.ceiling = max(1, ceiling)
        self.limit = self.ceiling
        self.lowest = self.ceiling
        self.throttled = 0
        self._in_flight = 0
        self._successes = 0
        self._round = 0
        self._changed = False
        self._condition = threading.Condition()

    def call(
        self,
        make: Callable[[], T],
        *,
        given_up: Callable[[], bool] = lambda: False,
        may_back_off: Callable[[float], bool] = lambda seconds: True,
    ) -> T:
        """Make the call within the limit; on a 429 lower the limit, back off and make it again — unless a back-off
        that long may not be taken (it would outlast the case): then the 429 is raised, as the provider said it."""
        if self.ceiling == 1:
            # One call at a time has nothing to lower: a 429 is the provider's to retry and the case's to report.
            return make()
        attempt = 0
        while True:
            started_in = self._acquire(given_up)
            try:
                result = make()
            except ProviderError as exc:
                self._release(success=False)
                if exc.code != RATE_LIMITED:
                    raise
                self._decrease(started_in)
                attempt += 1
                delay = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (attempt - 1))
                # Jitter: the calls refused together must not all come back at the same instant.
                delay *= 0.5 + random.random() / 2
                if attempt >= MAX_ATTEMPTS or given_up():
                    raise
                if not may_back_off(delay):
                    # The wait this 429 needs now: the session's own wait-out then sees it outlast the case too.
                    exc.retry_after = max(exc.retry_after or 0.0, delay)
                    raise
                time.sleep(delay)
                continue
            except BaseException:
                self._release(success=False)
                raise
            self._release(success=True)
            return result

    def _acquire(self, given_up: Callable[[], bool]) -> int:
        with self._condition:
            # A case that gave up while waiting still makes its call: it fails fast on the expired session.
            while self._in_flight >= self.limit and not given_up():
                self._condition.wait(0.1)
            self._in_flight += 1
            return self._round

    def _release(self, *, success: bool) -> None:
        with self._condition:
            self._in_flight -= 1
            if success:
                self._successes += 1
                if self._successes >= self.limit and self.limit < self.ceiling:
                    self.limit += 1
                    self._successes = 0
                    self._changed = True
            self._condition.notify_all()

    def _decrease(self, started_in: int) -> None:
        with self._condition:
            self.throttled += 1
            self._changed = True
            self._successes = 0
            if started_in == self._round:
                self._round += 1
                self.limit = max(1, self.limit // 2)
                self.lowest = min(self.lowest, self.limit)

    def snapshot(self) -> dict[str, int]:
        with self._condition:
            self._changed = False
            return {"throttled": self.throttled, "start": self.ceiling, "lowest": self.lowest, "now": self.limit}

    @property
    def changed(self) -> bool:
        return self._changed


class RunThrottles:
    """The throttles of one run, one per provider, made on first use."""

    def __init__(self, *, concurrency: int) -> None:
        self.concurrency = max(1, concurrency)
        self._throttles: dict[str, ProviderThrottle] = {}
        self._lock = threading.Lock()

    def for_provider(self, provider: str) -> ProviderThrottle:
        with self._lock:
            throttle = self._throttles.get(provider)
            if throttle is None:
                ceiling = min(self.concurrency, provider_max_concurrency(provider) or self.concurrency)
                throttle = self._throttles[provider] = ProviderThrottle(provider=provider, ceiling=ceiling)
            return throttle

    def changed(self) -> bool:
        with self._lock:
            return any(throttle.changed for throttle in self._throttles.values())

    def snapshot(self) -> dict[str, dict[str, int]]:
        """What the run page shows: per provider that met a 429, how often and how the concurrency moved."""
        with self._lock:
            throttles = list(self._throttles.values())
        snapshots = {throttle.provider: throttle.snapshot() for throttle in throttles}
        return {provider: shot for provider, shot in snapshots.items() if shot["throttled"]}


def provider_max_concurrency(provider: str) -> int | None:
    """The provider's `max_concurrency` setting (a whole number ≥ 1), or None when it sets none."""
    options = (getattr(settings, "AGENTTEST_PROVIDERS", {}) or {}).get(provider) or {}
    value = options.get("max_concurrency")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def throttle_lines(throttle: Any) -> list[str]:
    """"openai throttled: 3 × 429, concurrency 8 → 4" per provider of a run's stored throttle."""
    lines = []
    for provider, shot in sorted((throttle or {}).items()) if isinstance(throttle, dict) else []:
        if not isinstance(shot, dict) or not shot.get("throttled"):
            continue
        start, lowest = shot.get("start"), shot.get("lowest")
        line = f"{provider} throttled: {shot['throttled']} × 429, concurrency {start} → {lowest}"
        if shot.get("now") != shot.get("lowest"):
            line += f" (back up to {shot.get('now')})"
        lines.append(line)
    return lines
