"""The trigger form. It checks only the shape of the input: what makes a run valid (an enabled suite, configured
models, a filter that selects a case) is decided by `run_validate`, the same check the API runs, and its messages are
shown on the field they concern."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from agenthost.seams import configured_models
from cases.models import Suite
from common.forms import AsciiDecimalFormField, StrictForm, WholeNumberFormField
from common.inputs import parse_id
from runs.engine.run_checks import MAX_TRIALS
from runs.models import Run
from runs.selectors import recorded_models
from runs.services import RunError

# RunError.field → the form field it belongs on.
_FIELDS = {
    "suite": "suite",
    "models": "models",
    "case_filter": "case_filter",
    "mode": "mode",
    "trials": "trials",
    "budget_tokens": "budget_tokens",
    "budget_cost": "budget_cost",
}


class ModelsField(forms.MultipleChoiceField):
    """Offers the configured models but leaves judging the choice to run_validate, so an unknown or repeated key
    gets the message the API gives rather than a generic "not one of the available choices"."""

    def validate(self, value: Any) -> None:
        if self.required and not value:
            raise forms.ValidationError("Choose at least one model.", code="required")


class SuiteChoiceField(forms.ModelChoiceField):
    """A suite by id, read as every id is (common.inputs.parse_id): int() would take "٣" for 3."""

    def to_python(self, value: Any) -> Suite | None:
        if value not in self.empty_values and parse_id(value) is None:
            raise forms.ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        return super().to_python(value)


class RunTriggerForm(StrictForm):
    """A field it does not declare is refused by name (StrictForm): `budget_token=5` must not start a run with no
    budget."""

    suite = SuiteChoiceField(
        queryset=Suite.objects.none(),
        empty_label="Choose a suite…",
        error_messages={"invalid_choice": "That suite does not exist (any more); choose another."},
    )
    models = ModelsField(widget=forms.CheckboxSelectMultiple, error_messages={"required": "Choose at least one model."})
    case_filter = forms.CharField(
        max_length=200,
        required=False,
        strip=True,
        help_text="Empty: every enabled case. A name substring (any case), or tag:<tag>.",
        widget=forms.TextInput(attrs={"placeholder": "e.g. cancel  or  tag:smoke", "autocomplete": "off"}),
    )

    mode = forms.ChoiceField(
        choices=Run.Mode.choices,
        initial=Run.Mode.LIVE,
        required=False,
        help_text="Live calls the models; record also keeps every answer; replay serves kept answers (no key, free).",
    )
    trials = WholeNumberFormField(
        min_value=1,
        max_value=MAX_TRIALS,
        initial=1,
        required=False,
        help_text="Run each case this many times per model to see how flaky it is (pass^k).",
    )
    budget_tokens = WholeNumberFormField(
        min_value=1, required=False, help_text="Optional: stop after this many tokens."
    )
    budget_cost = AsciiDecimalFormField(
        min_value=0, max_digits=12, decimal_places=4, required=False, help_text="Optional: stop after this cost (USD)."
    )

    def __init__(self, *args: Any, suites: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        suite = cast(forms.ModelChoiceField, self.fields["suite"])
        suite.queryset = suites
        # How Django labels a field's choices per instance, set on the field rather than in a subclass of it.
        suite.label_from_instance = _suite_label  # type: ignore[method-assign,assignment]
        configured = [
            (model.key, f"{model.key} — {model.label}" if model.label else model.key) for model in configured_models()
        ]
        # A model this machine does not configure can still be replayed where a suite has recordings of it (a draft
        # recorded from a production trace is on the trace's model): offered for a replay, and said so.
        known = {key for key, _ in configured}
        recorded = [
            (key, f"{key} — recorded; replay only") for key in recorded_models() if key not in known
        ]
        cast(forms.MultipleChoiceField, self.fields["models"]).choices = configured + recorded

    def clean_mode(self) -> str:
        return self.cleaned_data.get("mode") or Run.Mode.LIVE

    def clean_trials(self) -> int:
        return self.cleaned_data.get("trials") or 1

    def add_run_error(self, error: RunError) -> None:
        self.add_error(_FIELDS.get(error.field), str(error))


def _suite_label(suite: Suite) -> str:
    enabled = getattr(suite, "enabled_case_count", None)
    label = f"{suite.name} ({suite.agent.name}"
    label += f", {enabled} enabled case{'s' if enabled != 1 else ''})" if enabled is not None else ")"
    return label if suite.enabled else f"{label} — disabled"
