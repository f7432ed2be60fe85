"""A run's budget: what its results used so far, held against the tokens and cost it may spend."""

from __future__ import annotations

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
