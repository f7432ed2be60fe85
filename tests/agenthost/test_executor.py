"""The function-executor factory: resolution order, the no-provider compatibility pin, and rule-triggered calls."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from agenthost import executor, seams
from agenthost.executor import unregister_executor_provider
from agenthost.functions import FunctionContext, FunctionResult, register_function, registered_functions
from agenthost.seams import PassThrough, register_executor_provider


@register_function(
    name="test-echo",
    description="Echo the text back.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)
def _echo(context: FunctionContext, text: str) -> str:
    return f"echo:{text}"


class RecordingProvider:
    """An executor provider that answers for the names it is given and notes every name it is asked about."""

    def __init__(self, name: str, order: int, answers: set[str] | None = None, crash_on_blank: bool = False) -> None:
        self.name, self.order, self.answers, self.crash_on_blank = name, order, answers or set(), crash_on_blank
        self.asked: list[str] = []

    def resolve(self, name, context):
        if self.crash_on_blank and not name:
            raise KeyError("a provider doing a dictionary lookup crashes on a blank name")
        self.asked.append(name)
        if name in self.answers:
            return lambda ctx: FunctionResult(content=f"{self.name} answered {ctx.name}", outcome="mocked")
        return None


@pytest.fixture(autouse=True)
def no_providers():
    """The host alone: whatever the installed harness registered is taken out for the test and put back after."""
    installed = executor.executor_providers()
    for provider in installed:
        unregister_executor_provider(provider)
    yield
    for provider in installed:
        register_executor_provider(provider)


@pytest.fixture
def providers():
    registered = []

    def add(provider):
        register_executor_provider(provider)
        registered.append(provider)
        return provider

    yield add
    for provider in registered:
        unregister_executor_provider(provider)


STATIC = {"name": "static-fn", "output": {"ok": True}}
PRE_SEAM_TABLE = [
    # (stage, name, declaration, expected content, expected stop, expected outcome)
    ("registered function", "test-echo", None, "echo:hi", False, "executed"),
    (
        "registered wins over static",
        "test-echo",
        {"name": "test-echo", "output": "static"},
        "echo:hi",
        False,
        "executed",
    ),
    ("static output (object)", "static-fn", STATIC, '{"ok": true}', False, "static"),
    ("static output (text)", "static-text", {"name": "static-text", "output": "plain"}, "plain", False, "static"),
    (
        "declared without output",
        "declared-only",
        {"name": "declared-only"},
        "Can't find function implementation of declared-only",
        True,
        "missing",
    ),
    ("nothing", "nowhere", None, "Can't find function implementation of nowhere", True, "missing"),
    ("exact name only", "TEST-ECHO", None, "Can't find function implementation of TEST-ECHO", True, "missing"),
]


@pytest.mark.parametrize(
    "stage,name,declaration,content,stop,outcome", PRE_SEAM_TABLE, ids=[r[0] for r in PRE_SEAM_TABLE]
)
def test_it_resolves_each_stage_exactly_as_before_the_seam_when_no_provider_is_registered(
    stage, name, declaration, content, stop, outcome
):
    assert executor.executor_providers() == []
    result = executor.execute(name, FunctionContext(name=name, arguments={"text": "hi"}, declaration=declaration))
    assert (result.content, result.stop, result.outcome) == (content, stop, outcome)


def test_it_reports_invalid_arguments_of_a_registered_function_without_calling_it():
    result = executor.execute("test-echo", FunctionContext(name="test-echo", arguments={"text": 5}))
    assert result.error and "text" in result.content and not result.content.startswith("echo:")


def test_it_asks_providers_in_ascending_order_and_the_first_non_none_wins(providers):
    late = providers(RecordingProvider("late", 50, {"test-echo"}))
    early = providers(RecordingProvider("early", -10, set()))
    middle = providers(RecordingProvider("middle", 0, {"test-echo"}))
    result = executor.execute("test-echo", FunctionContext(name="test-echo", arguments={"text": "hi"}))
    assert result.content == "middle answered test-echo"
    assert early.asked == ["test-echo"] and middle.asked == ["test-echo"] and late.asked == []


def test_it_breaks_order_ties_by_provider_name_not_registration_order(providers):
    providers(RecordingProvider("zeta", 5, {"x"}))
    providers(RecordingProvider("alpha", 5, {"x"}))
    assert [p.name for p in executor.executor_providers()] == ["alpha", "zeta"]
    assert executor.execute("x", FunctionContext(name="x", arguments={})).content == "alpha answered x"


def test_it_falls_through_to_the_registered_function_when_every_provider_passes(providers):
    providers(RecordingProvider("passes", 1))
    assert executor.execute("test-echo", FunctionContext(name="test-echo", arguments={"text": "a"})).content == "echo:a"


@pytest.mark.parametrize("blank", [None, "", "   "])
def test_it_rejects_a_blank_name_before_any_provider_is_consulted(providers, blank):
    crashing = providers(RecordingProvider("crashes-on-blank", 0, crash_on_blank=True))
    with pytest.raises(executor.InvalidFunctionName):
        executor.create_executor(blank, FunctionContext(name=blank or "", arguments={}))
    result = executor.execute(blank, FunctionContext(name=blank or "", arguments={}))
    assert result.error and "function name" in result.content
    assert crashing.asked == []


def test_it_refuses_two_providers_with_the_same_name(providers):
    providers(RecordingProvider("same", 1))
    with pytest.raises(ValueError, match="already registered"):
        register_executor_provider(RecordingProvider("same", 2))


# --- Letting a call through: only the provider answering it, only that call ---------------------------------------


@pytest.mark.parametrize("name", ["run_registered_function", "execute_without_providers", "execute", "create_executor"])
def test_it_gives_a_harness_or_plugin_no_way_to_run_a_registered_function_past_the_providers(name):
    assert not hasattr(seams, name) and name not in seams.__all__


class PassingProvider:
    """Takes every call and lets it through, noting the real result; `steer` rewrites the context first, as a
    provider trying to run some other function would."""

    name, order = "passes-through", 0

    def __init__(self, steer: dict | None = None) -> None:
        self.steer, self.seen = steer, []

    def resolve(self, name, context):
        def run(ctx):
            if self.steer:
                ctx.name, ctx.arguments = self.steer["name"], self.steer["arguments"]
            return PassThrough(then=self.relabel)

        return run

    def relabel(self, result):
        self.seen.append(result.content)
        result.outcome = "allowed"
        return result


def test_it_runs_the_real_implementation_when_a_provider_lets_its_call_through(providers):
    provider = providers(PassingProvider())
    result = executor.execute("test-echo", FunctionContext(name="test-echo", arguments={"text": "hi"}))
    assert (result.content, result.outcome) == ("echo:hi", "allowed")
    assert provider.seen == ["echo:hi"]


def test_it_lets_a_static_declaration_answer_a_call_let_through(providers):
    providers(PassingProvider())
    context = FunctionContext(name="static-fn", arguments={}, declaration=STATIC)
    assert executor.execute("static-fn", context).content == '{"ok": true}'


@given(resolved=st.text(min_size=1, max_size=30))
def test_it_lets_a_call_through_only_under_the_name_being_resolved(resolved):
    """A provider that edits the context cannot make the pass-through run a different registered function."""
    assume(resolved.strip() and resolved not in registered_functions())
    provider = PassingProvider(steer={"name": "test-echo", "arguments": {"text": "stolen"}})
    register_executor_provider(provider)
    try:
        result = executor.execute(resolved, FunctionContext(name=resolved, arguments={}))
    finally:
        unregister_executor_provider(provider)
    assert result.content == f"Can't find function implementation of {resolved}"
    assert provider.seen == [result.content]


@pytest.mark.parametrize("order", [executor.FIRST_ORDER, executor.FIRST_ORDER - 1, -(2**63)])
def test_it_lets_no_provider_be_asked_before_the_one_holding_the_first_order(providers, order):
    # The harness's mock provider holds the first order: a plugin's provider at that order or below could answer —
    # and run for real — calls a test must mock or block, so it is refused and the first stays first.
    harness = providers(RecordingProvider("harness-mocks", executor.FIRST_ORDER, answers={"test-echo"}))
    with pytest.raises(ValueError, match="order"):
        register_executor_provider(RecordingProvider("plugin-intruder", order, answers={"test-echo"}))
    assert executor.executor_providers() == [harness]
    assert executor.execute("test-echo", FunctionContext(name="test-echo", arguments={})).content == (
        "harness-mocks answered test-echo"
    )


def test_it_registers_the_harness_mock_provider_at_the_first_order():
    from runs.engine.mocking import mock_provider

    assert mock_provider.order == executor.FIRST_ORDER


@pytest.mark.parametrize("order", [None, "1", 1.5, True])
def test_it_refuses_a_provider_without_an_integer_order(order):
    with pytest.raises(ValueError, match="integer order"):
        register_executor_provider(RecordingProvider("no-order", order))
