"""The template engine agent instructions (and the util-instruct-execute_template function) render with.

An instruction renders with the conversation state and nothing else: no template is loaded from anywhere ({% include
%}, {% extends %}), no tag library is loaded ({% load %}), and nothing of the process is shown ({% debug %} prints the
context and every loaded module). The engine does not know those tags at all, and has no template loaders, so a text
that slipped past validation (an agent saved before it refused them) still cannot use them.

A render is bounded, because util-instruct-execute_template runs even under test with a template the model wrote:
its output stops at MAX_RENDERED_CHARS and its work at MAX_RENDER_STEPS (a node rendered or a loop turned), and a
filter asked to pad or format to a width beyond the limit (`ljust:"300000000"`) is refused before the string is
built, so no template can make a worker allocate gigabytes or loop for hours.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from django.template import Context, Engine, Library, Template, TemplateSyntaxError
from django.template.base import Lexer, Node, NodeList, TokenType
from django.template.defaultfilters import register as default_filters
from django.template.defaulttags import ForNode, LoremNode
from django.template.defaulttags import register as default_tags

# `ssi` no longer exists in Django, but is named so that an instruction using it is told why, not "invalid tag".
FORBIDDEN_TAGS = ("include", "extends", "load", "ssi", "debug")
FORBIDDEN_MESSAGE = (
    "instructions render with the conversation state only: "
    + ", ".join(f"{{% {tag} %}}" for tag in FORBIDDEN_TAGS)
    + " are not allowed"
)


# A render's output (an instruction, or a tool result the model reads) and its work, in nodes rendered and loop turns.
MAX_RENDERED_CHARS = 100_000
MAX_RENDER_STEPS = 200_000
# Filters whose argument is a width or a precision: the string they build is that long.
_WIDTH_FILTERS = frozenset({"ljust", "rjust", "center", "stringformat", "floatformat"})
_DIGITS = re.compile(r"\d+")


class TemplateRefused(ValueError):
    """A template agenttest will not compile or could not render; the message says why."""


class TemplateTooLarge(TemplateRefused):
    """A render that would exceed MAX_RENDERED_CHARS or MAX_RENDER_STEPS, stopped before it did."""


def _too_long(why: str) -> TemplateTooLarge:
    return TemplateTooLarge(f"would render more than {MAX_RENDERED_CHARS:,} characters, the most a template may: {why}")


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def bounded(value: Any, *args: Any, **kwargs: Any) -> Any:
        if name in _WIDTH_FILTERS and args:
            widths = [int(digits) for digits in _DIGITS.findall(str(args[0])[:100])]
            if any(width > MAX_RENDERED_CHARS for width in widths):
                raise _too_long(f'|{name}:"{args[0]}" asks for {max(widths):,}')
        if name == "join" and args and isinstance(value, list | tuple):
            size = len(str(args[0])) * len(value) + sum(len(str(item)) for item in value)
            if size > MAX_RENDERED_CHARS:
                raise _too_long(f"|join would build {size:,} characters")
        result = func(value, *args, **kwargs)
        if isinstance(result, str | list | tuple) and len(result) > MAX_RENDERED_CHARS:
            raise _too_long(f"|{name} built {len(result):,} {'characters' if isinstance(result, str) else 'items'}")
        return result

    return bounded


def _restricted_library() -> Library:
    # A copy: Django's own libraries are shared by every engine in the process and must stay untouched.
    library = Library()
    library.tags = {name: tag for name, tag in default_tags.tags.items() if name not in FORBIDDEN_TAGS}
    library.filters = {name: _bounded_filter(name, func) for name, func in default_filters.filters.items()}
    return library


class _Budget:
    """What one render has spent. Kept on its Context, which every node of the render is handed."""

    __slots__ = ("chars", "steps")

    def __init__(self) -> None:
        self.chars = 0
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_RENDER_STEPS:
            raise TemplateTooLarge(
                f"takes more than {MAX_RENDER_STEPS:,} rendering steps (loops nested too deep, or over too much)"
            )


class _BoundedContext(Context):
    budget: _Budget


class _LoopTurn(Node):
    """Added to every loop's body: a loop with an empty body still spends a step each turn."""

    child_nodelists = ()

    def render(self, context: Context) -> str:
        budget = getattr(context, "budget", None)
        if budget is not None:
            budget.step()
        return ""


# {% lorem %} builds its text before anything can measure it; more words or paragraphs than this are not lorem ipsum.
_MAX_LOREM = 1000


def _bound(node: Node) -> None:
    # django-stubs declares `int | str`; a node renders text (Node.render's contract, and every built-in node's).
    render: Callable[[Context], str] = node.render_annotated  # type: ignore[assignment]
    leaf = not any(getattr(node, attr, None) for attr in node.child_nodelists)

    def render_annotated(context: Context) -> str:
        budget = getattr(context, "budget", None)
        if budget is None:
            return render(context)
        budget.step()
        if isinstance(node, LoremNode):
            try:
                count = int(node.count.resolve(context))
            except (ValueError, TypeError):
                count = 1
            if count > _MAX_LOREM:
                raise _too_long(f"{{% lorem {count} %}} asks for more than {_MAX_LOREM:,} words or paragraphs")
        text = render(context)
        # Text is counted where it is made (the leaves); what encloses them passes it on or transforms it.
        if leaf:
            budget.chars += len(text)
        if budget.chars > MAX_RENDERED_CHARS or len(text) > MAX_RENDERED_CHARS:
            raise TemplateTooLarge(f"renders more than {MAX_RENDERED_CHARS:,} characters, the most a template may")
        return text

    node.render_annotated = render_annotated  # type: ignore[method-assign]


def _instrument(template: Template) -> Template:
    for node in template.nodelist.get_nodes_by_type(Node):
        if isinstance(node, ForNode):
            node.nodelist_loop = NodeList([*node.nodelist_loop, _LoopTurn()])
        _bound(node)
    return template


class _RestrictedEngine(Engine):
    def get_template_builtins(self, builtins: list[str]) -> list[Library]:
        # Without django.template.loader_tags: {% block %}, {% extends %} and {% include %} do not exist here.
        return [_restricted_library()]


_engine = _RestrictedEngine(autoescape=False, loaders=[])
# What opens a tag, a variable or a comment in Django's template syntax.
_MARKUP = re.compile(r"\{[%{#]")


def forbidden_tags(text: str) -> list[str]:
    """The forbidden tags `text` uses, in order of first use (lexing only: a text that does not compile is
    reported by `compile_template`)."""
    found: list[str] = []
    for token in Lexer(text).tokenize():
        if token.token_type == TokenType.BLOCK:
            parts = token.split_contents()
            if parts and parts[0] in FORBIDDEN_TAGS and parts[0] not in found:
                found.append(parts[0])
    return found


def compile_template(text: str) -> Template:
    """The compiled template, or TemplateRefused naming the forbidden tags used or the syntax error."""
    if used := forbidden_tags(text):
        raise TemplateRefused(f"uses {', '.join(f'{{% {tag} %}}' for tag in used)}; {FORBIDDEN_MESSAGE}")
    try:
        return _instrument(_engine.from_string(text))
    except TemplateSyntaxError as exc:
        raise TemplateRefused(f"does not compile as a Django template: {exc}") from None
    except RecursionError:
        raise TemplateRefused("does not compile as a Django template: its tags nest too deeply") from None


@functools.lru_cache(maxsize=256)
def _compiled(text: str) -> Template:
    # An agent's instruction renders at every model step of every case: compile each text once. A compiled
    # Template holds no per-render state (that lives in the Context), so threads may share it; a refused text
    # raises and is not cached.
    return compile_template(text)


def render_template(text: str, variables: dict[str, Any]) -> str:
    """`text` rendered with `variables`, or TemplateRefused: a refused or broken template, and any failure while
    rendering (a filter or tag raising on the values it got), is the template's fault, never the server's."""
    if not _MARKUP.search(text):
        # No tag, variable or comment can start: the text renders as itself.
        return text
    template = _compiled(text)
    context = _BoundedContext(dict(variables))
    context.budget = _Budget()
    try:
        return template.render(context)
    except TemplateTooLarge:
        raise
    except Exception as exc:  # whatever a tag or filter raises, the caller answers it as a bad template
        raise TemplateRefused(f"failed to render: {type(exc).__name__}: {exc}") from None
