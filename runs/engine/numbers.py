"""How the run pages, the exports, the Markdown summary and the CLI write numbers: one cost format everywhere,
"unpriced" for a model that has no price (rather than a $0 that reads as free), one pass-rate format, and tokens
with thousands separators."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal

from agenthost.seams import UnknownModel, get_model, provider_is_free

UNPRICED = "unpriced"
_SIGNIFICANT = 4
_MAX_PLACES = 8


def _amount(value: Decimal | float | int | None) -> Decimal:
    return Decimal(str(value)) if value is not None else Decimal(0)


def format_cost(value: Decimal | float | int | None, *, priced: bool = True) -> str:
    """US dollars to four significant digits, at least cents, with thousands separators: $0.00012, $0.0123, $1.50,
    $1,234.50. Nothing spent is "$0" (free), never "$0.00" or "$0.0000"; a cost too small for eight decimal places
    is "<$0.00000001", never zero. Nothing spent on a model without a price is "unpriced"."""
    amount = _amount(value)
    if amount == 0:
        return "$0" if priced else UNPRICED
    sign = "-" if amount < 0 else ""
    places = min(max(2, _SIGNIFICANT - 1 - amount.copy_abs().adjusted()), _MAX_PLACES)
    smallest = Decimal(1).scaleb(-places)
    rounded = amount.copy_abs().quantize(smallest, rounding=ROUND_HALF_UP)
    if rounded == 0:
        return f"{sign}<${smallest:f}"
    whole, _, fraction = f"{rounded:,.{places}f}".partition(".")
    fraction = fraction.rstrip("0").ljust(2, "0")
    return f"{sign}${whole}.{fraction}"


def format_cost_delta(value: Decimal | float | int | None) -> str:
    amount = _amount(value)
    if amount == 0:
        return "±$0"
    return ("+" if amount > 0 else "−") + format_cost(amount.copy_abs())


def format_pass_rate(rate: float | None) -> str:
    """A pass rate (0–1) as a percentage to one decimal place, rounded half up and without a trailing ".0": 100%,
    12.5%, 33.3%, 0.1%; only all passed is 100% and only none 0%. The run pages, the charts, the CLI and the
    Markdown summary all write it so: the same run never reads 12% in one place and 12.5% in another. None (nothing
    ran) is "—"."""
    if rate is None:
        return "—"
    # repr: the float's shortest decimal form, so 0.125 is exactly 12.5 before rounding.
    percent = (Decimal(repr(float(rate))) * 100).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    # One failure in 2,000 is not "100%", one pass in 2,000 not "0%".
    if 0 < rate < 1:
        percent = min(max(percent, Decimal("0.1")), Decimal("99.9"))
    return f"{percent.normalize():f}%" if percent != percent.to_integral() else f"{percent:.0f}%"


def format_tokens(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def format_tokens_delta(value: int) -> str:
    if value == 0:
        return "±0"
    return ("+" if value > 0 else "−") + f"{abs(value):,}"


def model_is_priced(key: str) -> bool:
    """Whether a cost of zero on `key` means free: the model has a price, or its provider's kind declares itself free
    (offline, no key). A model no longer configured, or configured without a price, is unpriced."""
    try:
        config = get_model(key)
    except UnknownModel:
        return False
    if (config.input_price or 0) > 0 or (config.output_price or 0) > 0:
        return True
    return provider_is_free(config.provider)


def models_priced(keys: Iterable[str]) -> dict[str, bool]:
    return {key: model_is_priced(key) for key in dict.fromkeys(keys)}


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def format_signed(value: float | None, unit: str, *, digits: int | None = None) -> str:
    if value is None:
        return ""
    if digits is None:
        digits = 1 if abs(value) < 10 and unit == " ms" else 0
    if round(value, digits) == 0:
        return f"±0{unit}"
    return f"{'+' if value > 0 else '−'}{abs(value):.{digits}f}{unit}"

