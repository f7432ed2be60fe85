"""Where drafts are reviewed: suites, and cases with their history, turns, mocks and assertions as inlines.

Every form here checks its part with the functions of cases/validation/, the ones the API and import use, so a
bad regex or a missing assertion parameter is a form error on the field it concerns. Rules about the case as a
whole (turns present, routing-case shape) are checked whenever a case is enabled: here by the "Enable selected"
action, and on save, where an enabled case that does not pass is kept but saved disabled, with the reasons shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import Count, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import pluralize
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from agenthost.seams import configured_models, conversation_admin_url
from cases.admin_params import PREFIX as PARAM_PREFIX
from cases.admin_params import param_specs, params_from_fields, params_initial
from cases.checks import mocks_refused_by_their_tools
from cases.files import files_render, files_zip
from cases.models import Assertion, Case, HistoryMessage, Mock, Suite, Turn
from cases.permissions import case_switch_allowed
from cases.review import SHORT_JSON_LENGTH, case_review, verification_lines
from cases.schema import EXTRA_ALLOWED_HELP, FORCE_BLOCKED_HELP, NETWORK_ALLOW_HELP
from cases.selectors import CASE_PARTS, mock_drifted_now, suite_drifted_count, suite_mock_drifts
from cases.services import case_content_hash_refresh, case_disable, case_enable, case_to_document
from cases.validation.callable_functions import CallableFunctions, case_callable_functions
from cases.validation.case_documents import (
    case_warnings,
    is_draft,
    mock_schema_warnings,
    validate_assertion,
    validate_case_document,
    validate_case_fields,
    validate_history_message,
    validate_mock,
    validate_turn,
)
from cases.validation.parts import simulated_user_document
from cases.validation.problems import CaseValidationError, Problem
from cases.validation.suites import SUITE_DOCUMENT_FIELDS, suite_check
from cases.verification import FAILING, NothingToRefresh, case_drifted_mocks_refresh, not_refreshable
from common.admin_fields import PrettyJSONWidget, SafeJSONField
from common.admin_ids import StrictIdsAdminMixin
from common.inputs import json_loads, printable_json

# --- JSON as readable text ----------------------------------------------------------------------------------------


class SizedJSONWidget(PrettyJSONWidget):
    """The shared JSON widget (indented; invalid or too deep text shown as typed), sized to its content."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs={"spellcheck": "false", **(attrs or {})})

    def format_value(self, value: Any) -> str | None:
        text = super().format_value(value)
        if text and "\n" in text:
            # Short JSON on one line: a form of many small boxes ({"order_id": "1043"}) stays short.
            try:
                compact = printable_json(json_loads(text), separators=(", ", ": "))
            except (ValueError, TypeError):
                return text
            if len(compact) <= SHORT_JSON_LENGTH:
                return compact
        return text

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        lines = (context["widget"]["value"] or "").count("\n") + 1
        context["widget"]["attrs"]["rows"] = min(lines, 12)
        context["widget"]["attrs"]["style"] = "font-family: monospace; min-width: 24em;"
        return context


class JSONTextField(SafeJSONField):
    """The shared safe JSON field (depth and non-finite numbers refused), whose empty text means the model's default
    ({} or [] or null) and whose parse error says where."""

    def __init__(self, *, empty: Callable[[], Any] | None = None, **kwargs: Any) -> None:
        self.empty = empty
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return self.empty() if self.empty else None
        try:
            return super().to_python(value)
        except ValidationError as error:
            if error.code != "invalid" or not isinstance(value, str):
                raise
            try:
                json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValidationError(
                    f"Not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.", code="invalid"
                ) from None
            raise


if TYPE_CHECKING:
    # Checked as the ModelAdmin it is mixed into, so its call to the admin's own method is checked too.
    _AdminBase = admin.ModelAdmin[Any]
else:
    _AdminBase = object


class JSONTextMixin(_AdminBase):
    def formfield_for_dbfield(self, db_field: models.Field, request: HttpRequest, **kwargs: Any) -> forms.Field | None:
        if isinstance(db_field, models.JSONField):
            empty = None if db_field.null else db_field.default
            kwargs.setdefault("widget", SizedJSONWidget)
            return db_field.formfield(form_class=JSONTextField, empty=empty, **kwargs)
        return super().formfield_for_dbfield(db_field, request, **kwargs)


def _add_problems(form: forms.BaseForm, problems: list[Problem]) -> None:
    """Each problem on the form field it concerns (`params.pattern` → `params`); fields that already failed their own
    checks are not reported twice."""
    for problem in problems:
        base = problem.field.split(".")[0].split("[")[0]
        if base in form.errors:
            continue
        if base in form.fields:
            message = problem.message if problem.field == base else str(problem)
            form.add_error(base, message)
        else:
            form.add_error(None, str(problem))


def _present(form: forms.BaseForm, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: form.cleaned_data[name] for name in names if name in form.cleaned_data}


# --- Suites -------------------------------------------------------------------------------------------------------


SUITE_RUN_FIELDS = ("isolation_group", "case_concurrency", "network_allow")


class SuiteAdminForm(forms.ModelForm):
    class Meta:
        model = Suite
        # The verification rules are kept with the suite's file (or sent to the API); the form leaves them be.
        fields = tuple(field for field in SUITE_DOCUMENT_FIELDS if field != "mock_rules")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        configured = ", ".join(config.key for config in configured_models()) or "none"
        self.fields["judge_model"].help_text = f"{self.fields['judge_model'].help_text} Configured: {configured}."
        self.fields["extra_allowed_functions"].help_text = EXTRA_ALLOWED_HELP
        self.fields["force_blocked_functions"].help_text = FORCE_BLOCKED_HELP
        self.fields["network_allow"].help_text = NETWORK_ALLOW_HELP
        for name in SUITE_RUN_FIELDS:
            # A form from before these fields existed leaves them as they are (checked as they are, too).
            self.fields[name].required = False

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        for name in SUITE_RUN_FIELDS:
            if name in cleaned and cleaned[name] in (None, ""):
                cleaned[name] = getattr(self.instance, name)
        checked, problems = suite_check(_present(self, SUITE_DOCUMENT_FIELDS), instance=self.instance)
        _add_problems(self, problems)
        if not problems:
            # Stored as the API stores them: function names stripped.
            for field in ("extra_allowed_functions", "force_blocked_functions", "network_allow"):
                cleaned[field] = checked[field]
        return cleaned

    def validate_unique(self) -> None:
        # validate_suite already reports a taken name; Django's own check would say it a second time.
        return None


def _files_download(suites: list[Suite], cases: list[Case] | None) -> HttpResponse:
    response = HttpResponse(files_zip(files_render(suites=suites, cases=cases)), content_type="application/zip")
    response["Content-Disposition"] = 'attachment; filename="agenttest-files.zip"'
    return response


@admin.action(description="Export to files (zip of agents/ and suites/, drafts included)")
def export_suite_files(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Suite]) -> HttpResponse:
    return _files_download(list(queryset.select_related("agent")), None)


@admin.action(description="Export to files (zip: these cases, their suites and agents)")
def export_case_files(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Case]) -> HttpResponse:
    cases = list(queryset.select_related("suite__agent", "entry_agent").prefetch_related(*CASE_PARTS))
    return _files_download(list({case.suite_id: case.suite for case in cases}.values()), cases)


DRIFT_MARK = "⚠ mock drifted"
DRIFT_TITLE = ("agenttest mocks verify found a mock of this case, as it stands, no longer telling the truth about its "
               "tool: its results may rest on a stale mock")


@admin.register(Suite)
class SuiteAdmin(StrictIdsAdminMixin, JSONTextMixin, admin.ModelAdmin):
    form = SuiteAdminForm
    actions = (export_suite_files,)
    list_display = ("name", "agent", "judge_model", "enabled", "case_count", "drifted_display", "updated_at")
    list_filter = ("enabled", "agent")
    list_select_related = ("agent",)
    search_fields = ("name", "description")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Suite]:
        # Distinct counts: the drift count joins the cases a second time.
        return super().get_queryset(request).annotate(
            case_count=Count("cases", distinct=True), drifted_count=suite_drifted_count()
        )

    @admin.display(description="Cases", ordering="case_count")
    def case_count(self, suite: Any) -> int:  # a Suite annotated by get_queryset
        return suite.case_count

    @admin.display(description="Mocks", ordering="drifted_count")
    def drifted_display(self, suite: Any) -> SafeString | str:  # a Suite annotated by get_queryset
        if not suite.drifted_count:
            return "—"
        cases = {"suite__id__exact": suite.pk, MockDriftFilter.parameter_name: "yes"}
        url = f"{reverse('admin:cases_case_changelist')}?{urlencode(cases)}"
        return format_html(
            '<a class="mock-drift" href="{}" title="{}">{} in {} case{}</a>', url, DRIFT_TITLE, DRIFT_MARK,
            suite.drifted_count, pluralize(suite.drifted_count),
        )

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], add: bool = False, change: bool = False,
        form_url: str = "", obj: Suite | None = None,
    ) -> Any:
        if obj is not None and obj.pk:
            # What a reviewer of the suite must see first: the cases whose mocks no longer tell the truth.
            context["mock_drifts"] = [
                (case, [(verification, verification_lines(verification)) for verification in verifications])
                for case, verifications in suite_mock_drifts(suite=obj)
            ]
            context["mocks_refused"] = mocks_refused_by_their_tools(suite=obj)
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)


class MockDriftFilter(admin.SimpleListFilter):
    title = "mocks"
    parameter_name = "mock_drift"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", "drifted from their tools")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Case]) -> QuerySet[Case]:
        return queryset.filter(mock_drifted_now()) if self.value() == "yes" else queryset


# --- Case parts ---------------------------------------------------------------------------------------------------


class CasePartFormSet(BaseInlineFormSet):
    """Gives each form the case being edited, so a part can be checked against its suite and its agents."""

    def get_form_kwargs(self, index: int | None) -> dict[str, Any]:
        return {**super().get_form_kwargs(index), "case": self.instance, "functions": self._functions()}

    def _functions(self) -> CallableFunctions | None:
        # The case as the main form left it: an entry agent changed in the same save counts.
        if not hasattr(self, "_callable"):
            case = self.instance
            suite = case.suite if case.suite_id else None
            self._callable = case_callable_functions(suite=suite, entry_agent=case.entry_agent)
        return self._callable


class CasePartForm(forms.ModelForm):
    def __init__(
        self, *args: Any, case: Case | None = None, functions: CallableFunctions | None = None, **kwargs: Any
    ) -> None:
        self.case = case
        self.functions = functions
        super().__init__(*args, **kwargs)


class HistoryMessageForm(CasePartForm):
    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        _add_problems(self, validate_history_message(_present(self, ("role", "content"))))
        return cleaned


class TurnForm(CasePartForm):
    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        _add_problems(self, validate_turn(_present(self, ("user_message",))))
        return cleaned


class MockForm(CasePartForm):
    FIELDS = ("function_name", "arguments", "call_index", "result", "stop", "state_writes", "table")

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        _add_problems(
            self,
            validate_mock(
                _present(self, self.FIELDS), functions=self.functions, tables=_case_tables(self.case),
                draft=self.case is not None and is_draft(self.case),
            ),
        )
        return cleaned


def _case_tables(case: Case | None) -> dict[str, Any] | None:
    # The tables as the case form left them; refused ones are that form's error, not every mock's.
    tables = case.tables if case is not None else None
    return tables if isinstance(tables, dict) else None


class AssertionForm(CasePartForm):
    """Params edited as the typed fields of the chosen type (cases/admin_params.py), or as JSON on request."""

    params_as_json = forms.BooleanField(
        required=False, label="Edit as JSON", help_text="Edit the parameters as one JSON object instead."
    )
    # Present in every form this page renders: a post without it (a form from before the typed fields) means JSON.
    params_typed = forms.CharField(required=False, widget=forms.HiddenInput, initial="1")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["params"].label = "Parameters"
        for spec in param_specs().values():
            self.fields[spec.field_name] = spec.form_field()
        if self.instance.pk:
            initial = params_initial(self.instance.type, self.instance.params)
            if initial is None:
                self.initial["params_as_json"] = True
            else:
                self.initial.update(initial)

    def typed(self) -> bool:
        """Whether the typed fields, not the JSON box, say what the params are."""
        if not self.is_bound:
            return not self.initial.get("params_as_json", False)
        return bool(self.data.get(self.add_prefix("params_typed"))) and not self.data.get(
            self.add_prefix("params_as_json")
        )

    def param_fields(self) -> list[tuple[forms.BoundField, str, str]]:
        """(field, the types that take it, its kind) for the page: the chosen type's only, every type's in the
        formset's empty form. Issue 37: every type's fields in every assertion were most of the review page's widgets
        and of its time; the page's script copies another type's fields from the empty form when the type changes."""
        chosen = self.chosen_type()
        every = "__prefix__" in (self.prefix or "")
        return [
            (self[spec.field_name], " ".join(spec.types), spec.kind)
            for spec in param_specs().values()
            if every or chosen in spec.types
        ]

    def chosen_type(self) -> str:
        return str(self["type"].value() or "")

    def chosen_takes_params(self) -> bool:
        chosen = self.chosen_type()
        return not chosen or any(chosen in spec.types for spec in param_specs().values())

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        typed = self.typed()
        if typed:
            # The JSON box is not what is being saved: its text, stale or not, is no error of this form.
            self.errors.pop("params", None)
            params, errors = params_from_fields(cleaned.get("type", ""), cleaned, self.instance.params)
            for field, message in errors.items():
                self.add_error(field, message)
            cleaned["params"] = params
        suite = self.case.suite if self.case is not None and self.case.suite_id else None
        fields = _present(self, ("type", "params", "fatal"))
        problems = validate_assertion(fields, suite=suite, functions=self.functions, tables=_case_tables(self.case))
        if typed:
            # Said on the field the reviewer typed in: `params.text` is the `text` box.
            problems = [_on_param_field(problem, self) for problem in problems]
        _add_problems(self, problems)
        return cleaned


def _on_param_field(problem: Problem, form: forms.BaseForm) -> Problem:
    head, _, rest = problem.field.partition(".")
    if head != "params" or not rest:
        return problem
    name = rest.split(".")[0].split("[")[0]
    field = PARAM_PREFIX + name
    if field not in form.fields:
        return problem
    tail = rest[len(name):]
    message = f"{tail.lstrip('.')}: {problem.message}" if tail else problem.message
    return replace(problem, field=field, message=message)


class CasePartInline(JSONTextMixin, admin.TabularInline):
    formset = CasePartFormSet
    extra = 0
    # Folded under the review at the top of the page; a section with an error opens by itself.
    classes = ("collapse",)


class HistoryMessageInline(CasePartInline):
    model = HistoryMessage
    form = HistoryMessageForm
    fields = ("position", "role", "content")
    verbose_name = "history message"
    verbose_name_plural = "history (pre-written messages the conversation starts with)"


class TurnInline(CasePartInline):
    model = Turn
    form = TurnForm
    fields = ("position", "user_message")


class MockInline(JSONTextMixin, admin.StackedInline):
    model = Mock
    form = MockForm
    formset = CasePartFormSet
    extra = 0
    classes = ("collapse",)
    # The fields of the case JSON Schema's MockEntry; a stateful mock's table, rarely used, folded.
    fieldsets = (
        (None, {"fields": (("function_name", "call_index", "stop", "position"), "arguments", "result",
                           "state_writes")}),
        ("Stateful: answer from a table of the case", {"fields": ("table",), "classes": ("collapse",)}),
    )

    def formfield_for_dbfield(self, db_field: models.Field, request: HttpRequest, **kwargs: Any) -> forms.Field | None:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "result" and field is not None:
            field.widget.attrs.update(rows=3, style="font-family: monospace;")
        return field


class AssertionInline(CasePartInline):
    model = Assertion
    form = AssertionForm
    # Django's tabular inline, with the params cell holding the typed fields and the "Edit as JSON" switch.
    template = "admin/cases/case/assertions_inline.html"
    fields = ("position", "turn", "type", "params", "fatal")

    def get_formset(self, request: HttpRequest, obj: Case | None = None, **kwargs: Any) -> type[BaseInlineFormSet]:
        formset = super().get_formset(request, obj, **kwargs)
        turn = cast("forms.ModelChoiceField[Turn]", formset.form.base_fields["turn"])
        # Only this case's turns: an assertion can never point into another case.
        turn.queryset = Turn.objects.filter(case=obj) if obj is not None else Turn.objects.none()
        turn.empty_label = "Case-level (after the last turn)"
        # The choices read once for every assertion's select: a queryset would be read again by each form's widget,
        # a query per assertion (issue 37: the review page's queries grew with the case).
        turn.choices = [("", turn.empty_label), *((item.pk, turn.label_from_instance(item)) for item in turn.queryset)]
        turn.help_text = "Case-level: checked over the whole conversation. A new turn can be chosen once it is saved."
        return formset


# --- Cases --------------------------------------------------------------------------------------------------------


CASE_FORM_FIELDS = (
    "name", "description", "enabled", "source", "type", "initial_state", "tables", "priority", "tags",
    "unmocked_policy", "simulated_user",
)


class CaseAdminForm(forms.ModelForm):
    class Meta:
        model = Case
        fields = (*CASE_FORM_FIELDS, "suite", "entry_agent", "source_conversation")

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        if "tables" not in self.data:
            # A form from before tables existed leaves them as they are.
            cleaned["tables"] = self.instance.tables if self.instance.pk else {}
        fields = _present(self, CASE_FORM_FIELDS)
        if cleaned.get("entry_agent") is not None:
            fields["entry_agent"] = cleaned["entry_agent"].name
        if cleaned.get("source_conversation") is not None:
            fields["source_conversation"] = cleaned["source_conversation"].pk
        _add_problems(self, validate_case_fields(fields))
        if isinstance(cleaned.get("simulated_user"), dict) and not self.errors:
            # Stored as every other door stores it, so the same simulated user always hashes the same.
            cleaned["simulated_user"] = simulated_user_document(cleaned["simulated_user"])
        return cleaned


_post_only = method_decorator(require_POST)


class TagsField(forms.CharField):
    """Tags as one line of text, comma-separated: "smoke, billing" is ["smoke", "billing"]."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, help_text="Comma-separated, e.g. smoke, billing.", **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list) and all(isinstance(tag, str) for tag in value):
            return ", ".join(value)
        return value

    # A text field whose value is a list: Django's Field.to_python returns any type, the stubs pin CharField's to text.
    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        return [tag.strip() for tag in text.split(",") if tag.strip()]


def _first_problems(problems: list[Problem], limit: int = 3) -> str:
    shown = "; ".join(str(problem) for problem in problems[:limit])
    return shown + (f"; and {len(problems) - limit} more" if len(problems) > limit else "")


@admin.register(Case)
class CaseAdmin(StrictIdsAdminMixin, JSONTextMixin, admin.ModelAdmin):
    form = CaseAdminForm
    list_display = ("name", "enabled", "suite", "source", "type", "priority", "drift_display", "updated_at")
    list_filter = ("enabled", "source", "suite", "suite__agent", MockDriftFilter)
    list_select_related = ("suite",)
    search_fields = ("name", "description", "turns__user_message")
    raw_id_fields = ("source_conversation",)
    readonly_fields = ("source_conversation_link", "warnings_display", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "suite", "description", "enabled", "type", "entry_agent", "priority", "tags")}),
        ("Start", {"fields": ("initial_state", "tables", "unmocked_policy"), "classes": ("collapse",)}),
        ("Simulated user", {"fields": ("simulated_user",), "classes": ("collapse",)}),
        (
            "Origin",
            {"fields": ("source", "source_conversation", "source_conversation_link", "warnings_display",
                        "created_at", "updated_at"), "classes": ("collapse",)},
        ),
    )
    save_on_top = True
    inlines = (HistoryMessageInline, TurnInline, MockInline, AssertionInline)
    actions = ("enable_selected", "disable_selected", export_case_files)

    def get_urls(self) -> list[URLPattern]:
        # admin_view: staff only, CSRF checked. The review panel's buttons post here.
        review = [
            path("<path:object_id>/enable/", self.admin_site.admin_view(self.enable_view), name="cases_case_enable"),
            path("<path:object_id>/disable/", self.admin_site.admin_view(self.disable_view), name="cases_case_disable"),
            path(
                "<path:object_id>/refresh-drifted/", self.admin_site.admin_view(self.refresh_drifted_view),
                name="cases_case_refresh_drifted",
            ),
        ]
        return review + super().get_urls()

    def get_queryset(self, request: HttpRequest) -> QuerySet[Case]:
        return super().get_queryset(request).annotate(mock_drifted=mock_drifted_now())

    @admin.display(description="Mocks", boolean=False)
    def drift_display(self, case: Case) -> SafeString | str:
        if not getattr(case, "mock_drifted", False):
            return "—"
        return format_html('<span class="mock-drift" title="{}">{}</span>', DRIFT_TITLE, DRIFT_MARK)

    def has_switch_permission(self, request: HttpRequest) -> bool:
        """The bulk Enable and Disable actions' permission: the review panel's and the API's rule."""
        return case_switch_allowed(request.user)

    def _case_to_switch(self, request: HttpRequest, object_id: str) -> Case | None:
        case = self.get_object(request, object_id)
        if case is not None and not case_switch_allowed(request.user):
            raise PermissionDenied
        return case

    def _switched(self, request: HttpRequest, case: Case | None, object_id: str) -> HttpResponseRedirect:
        if case is None:
            # Django's own answer for a missing object in the admin; a private method the stubs leave out.
            return self._get_obj_does_not_exist_redirect(  # type: ignore[attr-defined]
                request, self.opts, object_id
            )
        return HttpResponseRedirect(reverse("admin:cases_case_change", args=[case.pk]))

    @_post_only
    def enable_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        """Enables the case as saved, through the same check as every other door (case_enable); a refusal says why."""
        case = self._case_to_switch(request, object_id)
        if case is not None:
            try:
                case_enable(case=case)
            except CaseValidationError as exc:
                self.message_user(
                    request,
                    f"{case.name!r} is still disabled: it cannot be enabled until this is fixed: "
                    f"{_first_problems(exc.problems, limit=5)}.",
                    messages.ERROR,
                )
            else:
                self.message_user(
                    request, f"Enabled {case.name!r}: runs of suite {case.suite.name!r} include it.", messages.SUCCESS
                )
                if warnings := case_warnings(case_to_document(case=case)):
                    self.message_user(
                        request, f"{case.name!r} is enabled, but {'; '.join(warnings)}.", messages.WARNING
                    )
        return self._switched(request, case, object_id)

    @_post_only
    def disable_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        case = self._case_to_switch(request, object_id)
        if case is not None:
            case_disable(case=case)
            self.message_user(
                request, f"Disabled {case.name!r}: runs leave it out until it is enabled again.", messages.SUCCESS
            )
        return self._switched(request, case, object_id)

    @_post_only
    def refresh_drifted_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        """Verifies the case's mocks against their real tools again and rewrites each drifted effect-free one with the
        real answer: `agenttest mocks verify --update`'s service, for the reviewer who just read the drift."""
        case = self._case_to_switch(request, object_id)
        if case is not None:
            try:
                checks = case_drifted_mocks_refresh(case=case)
            except NothingToRefresh as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                rewritten = [check.mock for check in checks if check.updated]
                self.message_user(
                    request,
                    f"Rewrote {', '.join(rewritten)} of {case.name!r} from the real tool: the case's content changed, "
                    "so its next results compare as a changed case.",
                    messages.SUCCESS,
                )
                if stuck := [check for check in checks if check.verdict in FAILING and not check.updated]:
                    self.message_user(
                        request, "; ".join(f"{check.mock} {not_refreshable(check)}" for check in stuck) + ".",
                        messages.WARNING,
                    )
        return self._switched(request, case, object_id)

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], add: bool = False, change: bool = False,
        form_url: str = "", obj: Case | None = None,
    ) -> Any:
        if obj is not None and obj.pk:
            context["review"] = case_review(case=obj)
            if obj.source_conversation_id:
                context["source_conversation_url"] = conversation_admin_url(conversation_id=obj.source_conversation_id)
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    def formfield_for_dbfield(self, db_field: models.Field, request: HttpRequest, **kwargs: Any) -> forms.Field | None:
        if db_field.name == "tags":
            return TagsField(label="Tags")
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "description" and field is not None:
            # Short by default: the review above is what fills the first screen.
            field.widget.attrs["rows"] = 2
        return field

    @admin.display(description="Source conversation")
    def source_conversation_link(self, case: Case) -> SafeString | str:
        if not case.source_conversation_id:
            return "—"
        url = conversation_admin_url(conversation_id=case.source_conversation_id)
        return format_html('<a href="{}">Conversation #{}</a>', url, case.source_conversation_id)

    @admin.display(description="Warnings for the reviewer")
    def warnings_display(self, case: Case) -> SafeString | str:
        # The stored notes, then the mocks the tools' schemas refuse as they stand now (never stored: fixing the mock,
        # or the tool, clears it).
        notes = [*case.warnings, *mock_schema_warnings(case_to_document(case=case), suite=case.suite)]
        if not notes:
            return "—"
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{}</li>", ((note,) for note in notes)))

    def save_related(self, request: HttpRequest, form: forms.ModelForm, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        case = case_content_hash_refresh(case=form.instance)
        if not case.enabled:
            return
        document = case_to_document(case=case)
        problems = validate_case_document(document, suite=case.suite, instance=case)
        if problems:
            # Enabled cases join runs, so only a case that passes stays enabled; the edits themselves are kept.
            case_disable(case=case)
            self.message_user(
                request,
                f"{case.name!r} was saved disabled, because: {_first_problems(problems)}. Fix it, then enable it.",
                messages.WARNING,
            )
        elif warnings := case_warnings(document):
            self.message_user(request, f"{case.name!r} is enabled, but {'; '.join(warnings)}.", messages.WARNING)

    @admin.action(description="Enable selected cases", permissions=["switch"])
    def enable_selected(self, request: HttpRequest, queryset: QuerySet[Case]) -> None:
        enabled, refused, unchecked = 0, [], []
        for case in queryset.select_related("suite", "entry_agent").prefetch_related(*CASE_PARTS):
            try:
                case_enable(case=case)
            except CaseValidationError as exc:
                refused.append(f"{case.name!r} ({exc.problems[0]})")
            else:
                enabled += 1
                if case_warnings(case_to_document(case=case)):
                    unchecked.append(repr(case.name))
        if enabled:
            self.message_user(request, f"Enabled {enabled} case(s).", messages.SUCCESS)
        if unchecked:
            self.message_user(
                request,
                f"These have no assertions, so they verify nothing and a run ends them Error: {', '.join(unchecked)}. "
                "Add an assertion to each.",
                messages.WARNING,
            )
        if refused:
            self.message_user(request, f"Not enabled, fix these first: {'; '.join(refused)}.", messages.ERROR)

    @admin.action(description="Disable selected cases", permissions=["switch"])
    def disable_selected(self, request: HttpRequest, queryset: QuerySet[Case]) -> None:
        count = 0
        for case in queryset:
            case_disable(case=case)
            count += 1
        self.message_user(request, f"Disabled {count} case(s).", messages.SUCCESS)
