"""A run's budget: what its results used so far, held against the tokens and cost it may spend."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

from runs.engine.numbers import format_cost
from runs.models import Run


class Spend:
    """Tokens and cost the run's results used so far, the llmJudge's included, held against its budget."""

    def __init__(self) -> None:
        self.tokens = 0
        self.cost = Decimal(0)

    def add(self, tokens: int, cost: Any) -> None:
        self.tokens += tokens
        self.cost += Decimal(str(cost or 0))

    def exhausted(self, run: Run) -> str:
        if run.budget_tokens is not None and self.tokens >= run.budget_tokens:
            return f"{self.tokens} tokens used of a budget of {run.budget_tokens}"
        if run.budget_cost is not None and self.cost >= run.budget_cost:
            return f"{format_cost(self.cost)} spent of a budget of {format_cost(run.budget_cost)}"
        return ""


class RunBudget:
    """The run's budget held before every model call of its cases (the agent's, the judge's, the simulated user's),
    shared by the cases running at once: what the run's stored results used when it (re)started, plus every model
    call answered since, each counted as it returns. Between results the run loop's Spend still decides whether a
    case starts; this stops a case inside its conversation, so a simulated one cannot spend far past the budget."""

    def __init__(self, run: Run, spent: Spend) -> None:
        self._run = run
        self._spent = Spend()
        self._spent.add(spent.tokens, spent.cost)
        self._lock = threading.Lock()

    def add(self, tokens: int, cost: Any) -> None:
        with self._lock:
            self._spent.add(tokens, cost)

    def exhausted(self) -> str:
        """What the run has used of its budget, once it is all used; "" while some is left."""
        with self._lock:
            return self._spent.exhausted(self._run)
