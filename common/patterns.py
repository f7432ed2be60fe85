"""The regular expressions people write into assertions (`outputRegex`): compiled as the runner matches them (the
`regex` package, case-insensitive), and refused at save when they backtrack catastrophically.

A pattern such as `(a|aa)+$` takes time exponential in the length of a reply that almost matches: the runner stops it
after MATCH_TIMEOUT_SECONDS and the assertion is an Error, but a pattern that can be recognised as catastrophic is
better refused where it is written. Recognising one is done by trying it: every repetition in the pattern is pumped
with text its own body matches (each alternative's, each character class member's), followed by a character that
makes the match fail, and a pattern that cannot settle such a short text within SAVE_PROBE_SECONDS is refused. What
the probe cannot build (syntax only the `regex` package knows) is left to the runner's timeout.
"""

from __future__ import annotations

import itertools
import re

# The parser's private modules: typeshed stubs them only under their deprecated names (sre_constants, sre_parse),
# which warn on import.
import re._constants as sre  # type: ignore[import-not-found]
import re._parser as sre_parse  # type: ignore[import-not-found]
from typing import Any

import regex

FLAGS = regex.IGNORECASE
# How long the runner lets one pattern search one reply.
MATCH_TIMEOUT_SECONDS = 1.0
# How long a pattern may take on one probe text at save; a pattern that is not catastrophic takes microseconds.
SAVE_PROBE_SECONDS = 0.2
# Long enough for a catastrophic pattern to blow far past the probe time, short enough that a merely slow
# (polynomial) one does not.
_PUMPS = 32
_ENDINGS = ("!", "\x00", "\n!")
_MAX_REPEATS = 16
_MAX_SAMPLES = 6
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT))
_CATEGORY_SAMPLES = {
    sre.CATEGORY_DIGIT: "1", sre.CATEGORY_NOT_DIGIT: "a", sre.CATEGORY_WORD: "a", sre.CATEGORY_NOT_WORD: " ",
    sre.CATEGORY_SPACE: " ", sre.CATEGORY_NOT_SPACE: "a",
}


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be an outputRegex (it does not compile, or it backtracks catastrophically), or None."""
    try:
        compiled = regex.compile(pattern, flags=FLAGS)
    except regex.error as exc:
        return f"does not compile: {exc}"
    for text in _probe_texts(pattern):
        try:
            compiled.search(text, timeout=SAVE_PROBE_SECONDS)
        except TimeoutError:
            shown = text if len(text) <= 40 else f"{text[:37]}…{text[-3:]}"
            return (
                f"backtracks catastrophically: matching it against {shown!r} ({len(text)} characters) takes longer "
                f"than {SAVE_PROBE_SECONDS:g} s, and a longer reply would take the runner past its "
                f"{MATCH_TIMEOUT_SECONDS:g} s limit; a repetition of alternatives (or quantifiers) that can match the "
                "same text makes the matcher try every way of splitting it — make them exclusive, e.g. (a|aa)+ → a+"
            )
    return None


def _probe_texts(pattern: str) -> list[str]:
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError):
        # Syntax only the `regex` package knows (\p{…}, fuzzy matching, …): the runner's timeout still holds.
        return []
    texts: list[str] = []
    for prefix, body in itertools.islice(_repeats(list(parsed), ""), _MAX_REPEATS):
        for sample in _samples(body):
            if sample:
                texts.extend(prefix + sample * _PUMPS + ending for ending in _ENDINGS)
    return list(dict.fromkeys(texts))


def _repeats(items: list[Any], prefix: str) -> Any:
    """(text before it, body) for every repetition that may run more than once, outermost first."""
    for index, (op, value) in enumerate(items):
        before = prefix + _first_sample(items[:index])
        if op in _REPEATS:
            low, high, body = value
            if high is sre.MAXREPEAT or high > 1:
                yield before, list(body)
            yield from _repeats(list(body), before)
        elif op is sre.SUBPATTERN or op is getattr(sre, "ATOMIC_GROUP", None):
            yield from _repeats(list(value[-1]), before)
        elif op is sre.BRANCH:
            for branch in value[1]:
                yield from _repeats(list(branch), before)


def _first_sample(items: list[Any]) -> str:
    samples = _samples(items)
    return samples[0] if samples else ""


def _samples(items: list[Any]) -> list[str]:
    """A few texts `items` match, one for each alternative and class member as far as they go."""
    texts = [""]
    for op, value in items:
        options = _item_samples(op, value)
        if not options:
            continue
        texts = [text + option for text, option in itertools.product(texts, options)][:_MAX_SAMPLES]
    return texts


def _item_samples(op: Any, value: Any) -> list[str]:
    if op is sre.LITERAL:
        return [chr(value)]
    if op is sre.NOT_LITERAL:
        return ["a" if value != ord("a") else "b"]
    if op is sre.ANY:
        return ["a"]
    if op is sre.IN:
        return _class_samples(value)
    if op in _REPEATS:
        low, _high, body = value
        return [sample * max(low, 1) for sample in _samples(list(body))][:_MAX_SAMPLES]
    if op is sre.SUBPATTERN or op is getattr(sre, "ATOMIC_GROUP", None):
        return _samples(list(value[-1]))
    if op is sre.BRANCH:
        return list(dict.fromkeys(sample for branch in value[1] for sample in _samples(list(branch))))[:_MAX_SAMPLES]
    # Anchors, look-arounds and back-references match no text of their own here.
    return []


def _class_samples(members: list[Any]) -> list[str]:
    if members and members[0][0] is sre.NEGATE:
        excluded = "".join(_class_samples(members[1:]))
        return [next((char for char in "a1 !_" if char not in excluded), "\x01")]
    samples: list[str] = []
    for op, value in members:
        if op is sre.LITERAL:
            samples.append(chr(value))
        elif op is sre.RANGE:
            samples.append(chr(value[0]))
        elif op is sre.CATEGORY:
            samples.append(_CATEGORY_SAMPLES.get(value, "a"))
    return list(dict.fromkeys(samples))[:_MAX_SAMPLES]
