"""The template engine agent instructions (and the util-instruct-execute_template function) render with.

An instruction renders with the conversation state and nothing else: no template is loaded from anywhere ({% include
%}, {% extends %}), no tag library is loaded ({% load %}), and nothing of the process is shown ({% debug %} prints the
context and every loaded module). The engine does not know those tags at all, and has no template loaders, so a text
that slipped past validation (an agent saved before it refused them) still cannot use them.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from django.template import Context, Engine, Library, Template, TemplateSyntaxError
from django.template.base import Lexer, TokenType
from django.template.defaultfilters import register as default_filters
from django.template.defaulttags import register as default_tags

# `ssi` no longer exists in Django, but is named so that an instruction using it is told why, not "invalid tag".
FORBIDDEN_TAGS = ("include", "extends", "load", "ssi", "debug")
FORBIDDEN_MESSAGE = (
    "instructions render with the conversation state only: "
    + ", ".join(f"{{% {tag} %}}" for tag in FORBIDDEN_TAGS)
    + " are not allowed"
)


class TemplateRefused(ValueError):
    """A template agenttest will not compile or could not render; the message says why."""


def _restricted_library() -> Library:
    # A copy: Django's own libraries are shared by every engine in the process and must stay untouched.
    library = Library()
    library.tags = {name: tag for name, tag in default_tags.tags.items() if name not in FORBIDDEN_TAGS}
    library.filters = dict(default_filters.filters)
    return library


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
        return _engine.from_string(text)
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
    try:
        return template.render(Context(dict(variables)))
    except Exception as exc:  # whatever a tag or filter raises, the caller answers it as a bad template
        raise TemplateRefused(f"failed to render: {type(exc).__name__}: {exc}") from None
