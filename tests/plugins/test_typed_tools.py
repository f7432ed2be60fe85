"""Tools from typed Python functions (`agenttest.plugin.tool`): name, description and JSON Schema from the function,
arguments validated by pydantic before the call, return values turned into tool results — through the real loop."""

from __future__ import annotations

import datetime
import json
from typing import Annotated, Any, Literal

import pytest
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from agenthost.functions import function_is_effect_free, get_function
from agenthost.llm.scripted import Answer, Call
from agenthost.models import Agent
from agenthost.services import conversation_send, conversation_start
from agenttest.plugin import FunctionContext, FunctionError, FunctionResult, register_function, tool
from tests.properties import SUPPRESSED_WITH_FIXTURES

CALLS: list[tuple[str, dict[str, Any]]] = []


@tool(outside_effects=False)
def typed_parcel_lookup(
    parcel_id: Annotated[str, Field(description="The parcel number, e.g. P-100.")],
    include_items: bool = False,
    carrier: Literal["dhl", "ups"] | None = None,
    shipped_after: datetime.date | None = None,
) -> dict[str, Any]:
    """Look a parcel up by its number.

    Returns where it is and, when asked, what is in it.

    Args:
        parcel_id: Not used: the annotation's description wins.
        include_items: Whether to list the items
            in the parcel too.
        carrier: Only this carrier's parcels.

    Returns:
        The parcel.
    """
    CALLS.append(("typed_parcel_lookup", {"parcel_id": parcel_id, "shipped_after": shipped_after}))
    parcel: dict[str, Any] = {"parcel_id": parcel_id, "where": "depot", "shipped_after": shipped_after}
    if include_items:
        parcel["items"] = ["book"]
    return parcel


class Quote(BaseModel):
    amount: float
    currency: str = "EUR"


@tool(outside_effects=True, name="typed-quote", description="Quote a price for a parcel.")
def quote(context: FunctionContext, parcel_id: str, express: bool = False) -> Quote:
    CALLS.append(("typed-quote", {"parcel_id": parcel_id, "conversation": context.conversation_id}))
    return Quote(amount=12.5 if express else 4.0)


@tool
def typed_says_nothing(note: str) -> list[str]:
    """A tool that does not say whether it has outside effects."""
    return [note, note.upper()]


@tool(outside_effects=False)
def typed_remember(context: FunctionContext, colour: str) -> FunctionResult:
    """Remember the customer's favourite colour."""
    return FunctionResult(content=f"noted {colour} (before: {context.state.get('colour', 'none')})",
                          state_writes={"colour": colour})


@tool(outside_effects=False)
def typed_refuses(parcel_id: str) -> str:
    """Refuse, as a tool does for input it cannot use."""
    raise FunctionError(f"{parcel_id} is not one of ours")


@tool(
    outside_effects=False,
    parameters={"type": "object", "properties": {"code": {"type": "string", "maxLength": 3}}, "required": ["code"]},
)
def typed_explicit(code: str) -> str:
    """Look a country code up."""
    return code.lower()


@pytest.fixture
def agent(scripted_model) -> Agent:
    return Agent.objects.create(
        name="parcels", instruction="You track parcels.", provider=scripted_model.provider_name,
        model=scripted_model.model,
        functions=[{"name": name} for name in (
            "typed_parcel_lookup", "typed-quote", "typed_says_nothing", "typed_remember", "typed_refuses",
            "typed_explicit",
        )],
    )


def call_once(agent: Agent, scripted_model, name: str, arguments: Any, **start: Any):
    """One turn in which the model calls `name` with `arguments`, then answers; the recorded tool call."""
    scripted_model.play(Answer(tool_calls=[Call(name, arguments)]), Answer("Done."))
    result = conversation_send(conversation=conversation_start(agent=agent, **start), text="Go.")
    [record] = result.tool_calls
    return record


def test_it_takes_name_description_and_schema_from_the_function():
    registered = get_function("typed_parcel_lookup")

    assert registered.tool_schema() == {
        "name": "typed_parcel_lookup",
        "description": "Look a parcel up by its number.",
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "parcel_id": {"type": "string", "description": "The parcel number, e.g. P-100."},
                "include_items": {
                    "type": "boolean", "default": False, "description": "Whether to list the items in the parcel too."
                },
                "carrier": {
                    "anyOf": [{"enum": ["dhl", "ups"], "type": "string"}, {"type": "null"}],
                    "default": None,
                    "description": "Only this carrier's parcels.",
                },
                "shipped_after": {"anyOf": [{"format": "date", "type": "string"}, {"type": "null"}], "default": None},
            },
            "required": ["parcel_id"],
        },
    }


def test_it_takes_an_explicit_name_description_or_schema_when_given():
    assert get_function("typed-quote").tool_schema()["description"] == "Quote a price for a parcel."
    assert get_function("typed-quote").parameters["required"] == ["parcel_id"]
    assert get_function("typed_explicit").parameters == {
        "type": "object", "properties": {"code": {"type": "string", "maxLength": 3}}, "required": ["code"]
    }


def test_it_counts_a_tool_that_does_not_say_as_side_effecting():
    assert function_is_effect_free("typed_parcel_lookup") is True
    assert function_is_effect_free("typed-quote") is False
    assert function_is_effect_free("typed_says_nothing") is False


def test_it_leaves_the_decorated_function_callable_as_plain_python():
    assert typed_says_nothing("hi") == ["hi", "HI"]


@pytest.mark.django_db
def test_it_calls_the_function_with_validated_typed_arguments_and_returns_json(agent, scripted_model):
    CALLS.clear()

    record = call_once(agent, scripted_model, "typed_parcel_lookup",
                       {"parcel_id": "P-100", "include_items": True, "shipped_after": "2026-11-30"})

    assert record.outcome == "executed"
    # pydantic turned the ISO text into a date for the function, and the date back into JSON for the model.
    assert CALLS == [("typed_parcel_lookup", {"parcel_id": "P-100", "shipped_after": datetime.date(2026, 11, 30)})]
    assert json.loads(record.result) == {
        "parcel_id": "P-100", "where": "depot", "shipped_after": "2026-11-30", "items": ["book"]
    }
    assert scripted_model.requests[1].messages[-1]["content"] == record.result


@pytest.mark.django_db
def test_it_passes_the_context_and_serialises_a_pydantic_model(agent, scripted_model):
    CALLS.clear()

    record = call_once(agent, scripted_model, "typed-quote", {"parcel_id": "P-7", "express": True})

    assert json.loads(record.result) == {"amount": 12.5, "currency": "EUR"}
    [(name, seen)] = CALLS
    assert name == "typed-quote" and seen["parcel_id"] == "P-7" and isinstance(seen["conversation"], int)


@pytest.mark.django_db
def test_it_returns_a_list_as_json_and_a_function_result_as_is(agent, scripted_model):
    assert json.loads(call_once(agent, scripted_model, "typed_says_nothing", {"note": "hi"}).result) == ["hi", "HI"]

    record = call_once(agent, scripted_model, "typed_remember", {"colour": "teal"}, initial_state={"colour": "red"})

    assert record.result == "noted teal (before: red)"


@pytest.mark.django_db
def test_it_turns_a_function_error_into_a_tool_result_the_model_reads(agent, scripted_model):
    record = call_once(agent, scripted_model, "typed_refuses", {"parcel_id": "X-1"})

    assert record.result == "typed_refuses failed: X-1 is not one of ours" and record.error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"parcel_id": 100}, "parcel_id: 100 is not of type 'string'"),
        ({}, "arguments: 'parcel_id' is a required property"),
        ({"parcel_id": "P-1", "carrier": "fedex"}, "carrier: 'fedex' is not valid under any of the given schemas"),
        ({"parcel_id": "P-1", "weight": 3}, "arguments: Additional properties are not allowed ('weight' was"),
        # JSON Schema does not check formats; pydantic does, before the call.
        ({"parcel_id": "P-1", "shipped_after": "last week"}, "shipped_after: Input should be a valid date"),
    ],
)
def test_it_refuses_invalid_arguments_without_calling_the_function(agent, scripted_model, arguments, message):
    CALLS.clear()

    record = call_once(agent, scripted_model, "typed_parcel_lookup", arguments)

    assert record.outcome == "invalid" and record.error
    assert record.result.startswith(f"Invalid arguments for typed_parcel_lookup: {message}")
    assert CALLS == []


def test_it_refuses_functions_it_cannot_describe_or_call_by_name():
    with pytest.raises(ValueError, match="needs a description"):
        tool(outside_effects=False)(lambda order_id: order_id)

    def with_varargs(*parts: str) -> str:
        """Join parts."""
        return "".join(parts)

    with pytest.raises(TypeError, match="parameter 'parts' must be a named parameter"):
        tool(outside_effects=False)(with_varargs)

    async def asynchronous(order_id: str) -> str:
        """Look up."""
        return order_id

    with pytest.raises(TypeError, match="async functions are not supported"):
        tool(outside_effects=False)(asynchronous)


def test_it_refuses_a_name_that_a_built_in_function_has():
    def route_to_agent(agent_name: str) -> str:
        """Another hand-off."""
        return agent_name

    with pytest.raises(ValueError, match="'route_to_agent' is already registered by agenthost.builtins.control"):
        tool(outside_effects=False)(route_to_agent)


def test_it_refuses_a_same_named_function_of_another_module_claiming_a_built_in_name():
    # Same Python name as the built-in's: it must not replace the real email sender with an "effect-free" one.
    def send_email(to: str) -> str:
        """Pretend to send."""
        return to

    send_email.__qualname__ = "send_email"

    with pytest.raises(ValueError, match="'util-email-handle_email_sender' is already registered by agenthost.built"):
        tool(outside_effects=False, name="util-email-handle_email_sender")(send_email)
    assert function_is_effect_free("util-email-handle_email_sender") is False


def test_it_registers_the_same_way_as_an_explicit_schema_function():
    # The lower-level form stays available to plugins, for a hand-written schema and FunctionResult.
    @register_function(name="typed-lowlevel", description="Low level.", outside_effects=False)
    def lowlevel(context: FunctionContext) -> str:
        return "ok"

    assert get_function("typed-lowlevel").effect_free


# Finite numbers only: what JSON can carry. Keys without NUL or lone surrogates: PostgreSQL refuses them in a JSON
# key, and the host stores a model's argument keys as sent (in values they are replaced; reported to the host's owner).
_KEY = st.text(alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=8)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_KEY, children, max_size=3),
    max_leaves=6,
)
_ARGUMENTS = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "parcel_id": st.text(max_size=10) | _JSON,
            "include_items": st.booleans() | _JSON,
            "carrier": st.sampled_from(["dhl", "ups", "fedex"]) | st.none() | _JSON,
            "shipped_after": st.dates().map(datetime.date.isoformat) | st.text(max_size=12) | _JSON,
        },
    ),
    st.dictionaries(_KEY, _JSON, max_size=4),
    _JSON,
)


class _Accepted(BaseModel):
    """What typed_parcel_lookup accepts, written out independently of the decorator: JSON types exactly as the schema
    says (no "true" for a boolean), no extra arguments."""

    model_config = {"extra": "forbid", "strict": True}
    parcel_id: str
    include_items: bool = False
    carrier: Literal["dhl", "ups"] | None = None
    shipped_after: str | None = None


def _storable(value: Any) -> bool:
    """No NUL and no lone surrogate in any text: the host refuses such arguments before the tool sees them."""
    if isinstance(value, str):
        return "\x00" not in value and not any(0xD800 <= ord(char) <= 0xDFFF for char in value)
    if isinstance(value, dict):
        return all(_storable(key) and _storable(item) for key, item in value.items())
    if isinstance(value, list):
        return all(_storable(item) for item in value)
    return True


def _acceptable(arguments: Any) -> bool:
    if not _storable(arguments):
        return False
    try:
        accepted = _Accepted.model_validate(arguments)
    except ValidationError:
        return False
    if accepted.shipped_after is None:
        return True
    # Which texts are dates is pydantic's to say: it is the validator the issue names.
    try:
        TypeAdapter(datetime.date).validate_python(accepted.shipped_after)
    except ValidationError:
        return False
    return True


@pytest.mark.django_db
@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(arguments=_ARGUMENTS)
# What a CI run's random examples once found: a NUL in a value, refused before the tool runs.
@example(arguments={"parcel_id": "\x00"})
@example(arguments={"parcel_id": "1042", "shipped_after": "\ud800"})
def test_it_never_crashes_the_loop_whatever_arguments_the_model_sends(agent, scripted_model, arguments):
    CALLS.clear()

    scripted_model.play(Answer(tool_calls=[Call("typed_parcel_lookup", arguments)]), Answer("Done."))
    result = conversation_send(conversation=conversation_start(agent=agent), text="Track it.")

    [record] = result.tool_calls
    assert result.output == "Done."
    if _acceptable(arguments):
        assert record.outcome == "executed", record.result
        [(_, seen)] = CALLS
        assert isinstance(seen["parcel_id"], str)
        assert seen["shipped_after"] is None or isinstance(seen["shipped_after"], datetime.date)
    else:
        assert record.outcome == "invalid", record.result
        assert record.result.startswith("Invalid arguments for typed_parcel_lookup: ")
        assert CALLS == []
