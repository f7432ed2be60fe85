"""One cost format everywhere, "unpriced" only for a model without a price, one pass-rate format, thousands separators
on tokens."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost.llm import registry
from agenttest.plugin import ModelProvider, ModelRequest, ModelResponse, register_provider_kind
from runs.engine.numbers import (
    format_cost,
    format_cost_delta,
    format_pass_rate,
    format_tokens,
    format_tokens_delta,
    model_is_priced,
    models_priced,
)

COST = re.compile(r"^\$0$|^<\$0\.00000001$|^\$\d{1,3}(,\d{3})*\.\d{2,8}$")


@pytest.mark.parametrize(("value", "text"), [
    (Decimal("0"), "$0"), (Decimal("0.00012"), "$0.00012"), (Decimal("0.012345"), "$0.01235"),
    (Decimal("1.5"), "$1.50"), (Decimal("1234.5"), "$1,234.50"), (0.0020, "$0.002"),
    (Decimal("0.000000001"), "<$0.00000001"), (Decimal("0.0000000049"), "<$0.00000001"),
])
def test_it_writes_costs_to_four_significant_digits_with_cents_at_least(value, text):
    assert format_cost(value) == text


@given(st.decimals(min_value=0, max_value=10**9, places=8, allow_nan=False, allow_infinity=False))
def test_it_writes_every_cost_in_the_one_format(value):
    text = format_cost(value)
    assert COST.match(text), text
    assert (text == "$0") == (value == 0), "only nothing spent reads as $0"
    shown = Decimal(text.lstrip("<$").replace(",", ""))
    assert abs(shown - value) <= max(value * Decimal("0.0005"), Decimal("0.000000005"))


def test_it_says_unpriced_only_for_nothing_spent_on_a_model_without_a_price():
    assert format_cost(0, priced=False) == "unpriced"
    assert format_cost(Decimal("0.5"), priced=False) == "$0.50", "a cost that was counted is shown"
    assert format_cost(0, priced=True) == "$0"


def test_it_writes_tokens_and_deltas_with_separators():
    assert format_tokens(1234567) == "1,234,567" and format_tokens(None) == "—"
    assert (format_tokens_delta(-1500), format_tokens_delta(0), format_tokens_delta(12)) == ("−1,500", "±0", "+12")
    assert (format_cost_delta(Decimal("-0.5")), format_cost_delta(0)) == ("−$0.50", "±$0")


def test_it_knows_which_models_are_priced_free_or_unpriced(settings):
    settings.AGENTTEST_PROVIDERS = {
        "scripted": {"kind": "scripted", "models": [{"name": "any", "input_price": 0.0, "output_price": 0.0}]},
        "paid": {"kind": "openai", "models": [{"name": "big", "input_price": 2.5, "output_price": 10.0}]},
        "local": {"kind": "openai", "models": [{"name": "llama", "input_price": 0.0, "output_price": 0.0}]},
    }
    assert model_is_priced("scripted:any"), "an offline model is free"
    assert model_is_priced("paid:big")
    assert not model_is_priced("local:llama"), "an endpoint without a price is unpriced, not free"
    assert not model_is_priced("gone:model") and not model_is_priced("not a key")


class _PocketProvider(ModelProvider):
    kind = "pocket-rules"
    free = True

    def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="ok")


class _MeteredProvider(_PocketProvider):
    kind = "metered-rules"
    free = False


def test_it_counts_as_free_the_models_of_a_plugins_kind_that_says_it_is_free(settings, monkeypatch):
    # No list of free kinds: a kind agenttest has never heard of is free because it says so, and only then.
    monkeypatch.setattr(registry, "PROVIDER_KINDS", dict(registry.PROVIDER_KINDS))
    register_provider_kind(_PocketProvider.kind, _PocketProvider)
    register_provider_kind(_MeteredProvider.kind, _MeteredProvider)
    settings.AGENTTEST_PROVIDERS = {
        "pocket": {"kind": "pocket-rules", "models": [{"name": "tiny", "input_price": 0.0, "output_price": 0.0}]},
        "metered": {"kind": "metered-rules", "models": [{"name": "tiny", "input_price": 0.0, "output_price": 0.0}]},
    }

    assert models_priced(["pocket:tiny", "metered:tiny"]) == {"pocket:tiny": True, "metered:tiny": False}
    assert format_cost(0, priced=model_is_priced("pocket:tiny")) == "$0"
    assert format_cost(0, priced=model_is_priced("metered:tiny")) == "unpriced"


@pytest.mark.parametrize(("rate", "text"), [
    (None, "—"), (0, "0%"), (1, "100%"), (0.5, "50%"), (1 / 8, "12.5%"), (3 / 8, "37.5%"), (1 / 3, "33.3%"),
    (2 / 3, "66.7%"), (0.0005, "0.1%"), (1999 / 2000, "99.9%"), (1 / 2000, "0.1%"),
])
def test_it_writes_pass_rates_to_one_decimal_rounded_half_up(rate, text):
    assert format_pass_rate(rate) == text


@given(st.integers(min_value=1, max_value=5000).flatmap(lambda ran: st.tuples(st.integers(0, ran), st.just(ran))))
def test_it_writes_100_and_0_percent_only_when_all_or_none_passed(counts):
    passed, ran = counts
    text = format_pass_rate(passed / ran)
    assert (text == "100%") == (passed == ran) and (text == "0%") == (passed == 0)
    assert abs(Decimal(text[:-1]) - Decimal(passed * 100) / ran) <= Decimal("0.05") + Decimal("0.1") * (
        passed in (1, ran - 1)
    )
