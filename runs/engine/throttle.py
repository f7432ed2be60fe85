"""Per-provider concurrency inside a run, adapted to 429s: additive increase, multiplicative decrease (AIMD).

Every live (and recording) model call of a run's case — the llmJudge's included, on the judge model's provider,
whose limit it shares with that provider's agent calls — goes through its provider's `ProviderThrottle`. At most
`limit` calls of one provider are in flight at once; the limit starts at the provider's `max_concurrency` (its
entry in AGENTTEST_PROVIDERS) or the suite's case concurrency, whichever is lower — one included: a provider
limited to one call at a time gets one, however many cases run side by side. A call the provider refuses as
rate limited (HTTP 429, after the SDK's own retries) halves the limit — once per round: 429s of calls that started
before the last decrease say nothing new — and the call waits (a back-off, at least the Retry-After the provider
asked for) and is made again, so a storm slows a run down but does not turn its cases into Error. After `limit`
successes in a row the limit grows by one, up to where it started. At a limit of one there is nothing to lower: a
429 is left to the provider's retries and the case's own wait.

No call of a case that gave up (its timeout came: the session's `out_of_time`) is made, nor waits longer for a slot:
it fails with CASE_TIMED_OUT, having sent nothing. Nor does a case back off past its timeout (`may_back_off`): its
call fails as the provider said while the case can still report it. A call that keeps being refused past
MAX_ATTEMPTS fails too, so a provider that never lets up still ends the case.

A slot is held by the call in it until the call returns; a case the runner leaves behind (its call outlasted the
timeout and the grace: a provider kind that ignores the request's deadline) gives its slots back
(`CaseSession.leave_behind`), so one stuck call does not starve the rest of the run.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings

from agenthost.seams import ProviderError

T = TypeVar("T")
RATE_LIMITED = "rate_limited"
MAX_ATTEMPTS = 12
FIRST_BACKOFF_SECONDS = 0.05
MAX_BACKOFF_SECONDS = 2.0
# The code of a call that was not made because its case timed out.
CASE_TIMED_OUT = "case_timed_out"


@dataclass(eq=False)
class Slot:
    """One call's place within its provider's limit."""

    throttle: ProviderThrottle
    round: int
    released: bool = False


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
        held: list[Slot] | None = None,
    ) -> T:
        """Make the call within the limit; on a 429 lower the limit, back off and make it again — unless a back-off
        that long may not be taken (it would outlast the case): then the 429 is raised, as the provider said it.
        While the call holds a slot, the slot is in `held` (the case's, so a case left behind can give it back)."""
        attempt = 0
        while True:
            slot = self._acquire(given_up, held)
            try:
                result = make()
            except ProviderError as exc:
                self.release_slot(slot, held, success=False)
                if exc.code != RATE_LIMITED or self.ceiling == 1:
                    # At one call at a time there is nothing to lower: the 429 is the case's to wait out.
                    raise
                self._decrease(slot.round)
                attempt += 1
                delay = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (attempt - 1))
                # Jitter: the calls refused together must not all come back at the same instant.
                delay *= 0.5 + random.random() / 2
                # Never sooner than the provider asked: a call made again before its Retry-After is refused again.
                delay = max(delay, exc.retry_after or 0.0)
                if attempt >= MAX_ATTEMPTS or given_up():
                    raise
                if not may_back_off(delay):
                    # The wait this 429 needs now: the session's own wait-out then sees it outlast the case too.
                    exc.retry_after = max(exc.retry_after or 0.0, delay)
                    raise
                time.sleep(delay)
                continue
            except BaseException:
                self.release_slot(slot, held, success=False)
                raise
            self.release_slot(slot, held, success=True)
            return result

    def _acquire(self, given_up: Callable[[], bool], held: list[Slot] | None) -> Slot:
        with self._condition:
            while True:
                # Checked before every wait and once a slot is free: a case that gave up sends nothing.
                if given_up():
                    raise ProviderError(
                        f"the case timed out before its call to {self.provider!r} could start (at most "
                        f"{self.limit} of its calls at once); the call was not made",
                        code=CASE_TIMED_OUT,
                        provider=self.provider,
                    )
                if self._in_flight < self.limit:
                    break
                self._condition.wait(0.1)
            self._in_flight += 1
            slot = Slot(throttle=self, round=self._round)
            if held is not None:
                held.append(slot)
            return slot

    def release_slot(self, slot: Slot, held: list[Slot] | None = None, *, success: bool = False) -> None:
        """Give the slot back, once: by the call that held it, or earlier for a case left behind."""
        with self._condition:
            if held is not None and slot in held:
                held.remove(slot)
            if slot.released:
                return
            slot.released = True
            self._release(success=success)

    def _release(self, *, success: bool) -> None:
        # Called with the condition held.
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
