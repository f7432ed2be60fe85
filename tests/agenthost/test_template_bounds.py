"""A template (an instruction, or the one util-instruct-execute_template renders, even under test) cannot make the
process build a huge string or loop for long: a width beyond the limit is refused before the string is built, and a
render stops at its output and step limits with a message saying which."""

from __future__ import annotations

import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenthost.templating import (
    MAX_RENDERED_CHARS,
    TemplateRefused,
    TemplateTooLarge,
    compile_template,
    render_template,
)

WIDTH_FILTERS = {
    "ljust": '{{{{ value|ljust:"{width}" }}}}',
    "rjust": '{{{{ value|rjust:"{width}" }}}}',
    "center": '{{{{ value|center:"{width}" }}}}',
    "stringformat": '{{{{ value|stringformat:"0{width}d" }}}}',
    "floatformat": '{{{{ 1.5|floatformat:"{width}" }}}}',
    "filter tag": '{{% filter ljust:"{width}" %}}x{{% endfilter %}}',
}

pytestmark = pytest.mark.own_database


def _measured(template: str, variables: dict) -> tuple[str | Exception, float, int]:
    """(the text or the refusal, CPU seconds, peak bytes allocated while rendering). CPU seconds of this thread, not
    wall-clock ones: a loaded CI machine took 32 s of wall clock for a render of 0.6 CPU seconds under tracemalloc."""
    tracemalloc.start()
    started = time.thread_time()
    try:
        outcome: str | Exception = render_template(template, variables)
    except TemplateRefused as exc:
        outcome = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return outcome, time.thread_time() - started, peak


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(WIDTH_FILTERS)), st.integers(min_value=MAX_RENDERED_CHARS + 1, max_value=10**12))
def test_it_refuses_a_width_beyond_the_limit_before_building_the_string(kind, width):
    outcome, _seconds, peak = _measured(WIDTH_FILTERS[kind].format(width=width), {"value": 7})

    assert isinstance(outcome, TemplateTooLarge), outcome
    assert f"asks for {width:,}" in str(outcome) and "the most a template may" in str(outcome)
    assert peak < 2_000_000, f"{peak:,} bytes allocated for a refused width"


@pytest.mark.parametrize("kind", sorted(WIDTH_FILTERS))
def test_it_still_pads_and_formats_within_the_limit(kind):
    assert len(render_template(WIDTH_FILTERS[kind].format(width=1000), {"value": 7})) >= 1000


LOOP_BODIES = ["", "{{ a }}", "{{ a }}{{ b }}-", "{% if a %}{% endif %}", "{% cycle 'x' 'y' %}"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    depth=st.integers(min_value=1, max_value=5),
    body=st.sampled_from(LOOP_BODIES),
    length=st.integers(min_value=1, max_value=2000),
    doublings=st.integers(min_value=0, max_value=30),
)
def test_it_ends_every_render_within_its_limits(depth, body, length, doublings):
    grow = "".join("{% with s=s|add:s %}" for _ in range(doublings))
    ungrow = "{% endwith %}" * doublings
    names = "abcde"
    loops = "".join(f"{{% for {names[i]} in s %}}" for i in range(depth))
    inner = body.replace("{{ b }}", "{{ b }}" if depth > 1 else "")
    template = grow + loops + inner + "{% endfor %}" * depth + ungrow

    outcome, seconds, peak = _measured(template, {"s": "x" * length})

    if isinstance(outcome, str):
        assert len(outcome) <= MAX_RENDERED_CHARS
    else:
        assert isinstance(outcome, TemplateTooLarge), outcome
    assert seconds < 20 and peak < 50_000_000, (seconds, peak)


def test_it_refuses_lorem_ipsum_by_the_million():
    with pytest.raises(TemplateTooLarge, match="lorem 100000000"):
        render_template("{% lorem 100000000 w %}", {})
    assert render_template("{% lorem 3 w %}", {}) == "lorem ipsum dolor"


def test_it_compiles_the_same_templates_as_before():
    # The bounds live in the render, not in what compiles: an instruction that saved before still saves.
    compile_template('{% for a in s %}{{ a|ljust:"300000000" }}{% endfor %}')
