"""agenttest's form renderer writes Django's plainest form templates in Python for speed (agenttest/forms_renderer.py);
what it writes must be byte for byte what Django's templates write, for every kind of widget and on the page it was
made for, the admin's case review page."""

from __future__ import annotations

import re

import pytest
from django import forms
from django.forms.renderers import DjangoTemplates
from django.utils.safestring import mark_safe

from agenttest.forms_renderer import PLAIN, FormRenderer
from bench.run_page import build_review_case
from cases.models import Case, Suite


class EveryWidget(forms.Form):
    text = forms.CharField(max_length=20, initial='say "hi" & <bye>', help_text="a text")
    empty = forms.CharField(required=False)
    number = forms.IntegerField(initial=0, min_value=0)
    decimal = forms.DecimalField(required=False, widget=forms.NumberInput(attrs={"step": "any", "data-x": 0}))
    hidden = forms.CharField(widget=forms.HiddenInput, initial=mark_safe("<b>safe</b>"))
    email = forms.EmailField(initial="ana@example.com")
    url = forms.URLField(required=False)
    password = forms.CharField(widget=forms.PasswordInput(render_value=True), initial="s3cret")
    when = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    flag = forms.BooleanField(required=False, initial=True)
    off = forms.BooleanField(required=False, widget=forms.CheckboxInput(attrs={"disabled": False}))
    notes = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), initial="line 1\n<line 2>")
    blank_notes = forms.CharField(widget=forms.Textarea, required=False)
    kind = forms.ChoiceField(choices=[("", "---------"), ("a", "A & B"), (1, "one")], initial=1)
    grouped = forms.ChoiceField(choices=[("Fruit", [("apple", "Apple"), ("pear", "<Pear>")]), ("other", "Other")])
    many = forms.MultipleChoiceField(choices=[("x", "X"), ("y", "Y")], initial=["x", "y"], required=False)


def _rendered(form: forms.Form) -> list[str]:
    return [
        str(piece)
        for field in form
        for piece in (field.as_widget(), field.label_tag(), field.label_tag(attrs={"class": "l"}), field.errors,
                      field.as_hidden())
    ]


@pytest.mark.parametrize("bound", [False, True], ids=["unbound", "bound with errors"])
def test_it_renders_every_widget_as_djangos_templates_do(bound):
    data = {"text": "x" * 30, "number": "-1", "kind": "zzz", "email": "not <an> email", "notes": "<b>"}
    data = data if bound else None
    ours = _rendered(EveryWidget(data, renderer=FormRenderer()))
    djangos = _rendered(EveryWidget(data, renderer=DjangoTemplates()))

    assert ours == djangos
    if bound:
        assert any('class="errorlist"' in piece for piece in ours)


def test_it_writes_only_templates_it_knows_and_leaves_the_rest_to_them():
    assert set(PLAIN) >= {"django/forms/widgets/select.html", "django/forms/widgets/input.html"}
    # A widget with a template of its own is Django's to render.
    renderer = FormRenderer()
    html = forms.RadioSelect(choices=[("a", "A")]).render("pick", "a", renderer=renderer)
    assert html == forms.RadioSelect(choices=[("a", "A")]).render("pick", "a", renderer=DjangoTemplates())


def _without_csrf(html: str) -> str:
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", html)


@pytest.mark.django_db
def test_it_renders_the_admin_review_page_as_djangos_templates_do(admin_client, settings, scripted_model):
    from agenthost.models import Agent

    agent = Agent.objects.create(name="bench-agent", instruction="Help.", provider="scripted", model="scripted")
    Case.objects.create(suite=Suite.objects.create(name="bench suite", agent=agent), name="looks the order up")
    url = f"/admin/cases/case/{build_review_case()}/change/"

    ours = admin_client.get(url)
    settings.FORM_RENDERER = "django.forms.renderers.DjangoTemplates"
    djangos = admin_client.get(url)

    assert ours.status_code == djangos.status_code == 200
    assert 'name="assertions-0-type"' in ours.content.decode()
    assert _without_csrf(ours.content.decode()) == _without_csrf(djangos.content.decode())
