"""Spans of AI agents → conversations in the host's shape, whichever attribute dialect the exporter wrote.

`attribute_kept(name)` says whether the mapping reads an attribute (the span store keeps only those);
`conversations_from_spans(spans)` groups spans into conversations and maps each. One module per dialect reads a
span into a `Step` (`genai`, `openinference`, `openllmetry`); `_assemble` builds the conversation from the steps.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from types import ModuleType

from traces.dialects import genai, openinference, openllmetry
from traces.dialects._assemble import Group, assemble
from traces.dialects._common import OTHER, Step
from traces.spans import MappedConversation, Resume, SpanRecord

__all__ = ["attribute_kept", "conversations_from_spans"]

logger = logging.getLogger(__name__)

_MODULES = (genai, openinference, openllmetry)
_KEPT_NAMES = frozenset().union(*(module.KEPT_NAMES for module in _MODULES))
_KEPT_PATTERN = re.compile("|".join(f"(?:{p})" for module in _MODULES for p in module.KEPT_PATTERNS))


def attribute_kept(name: str) -> bool:
    """Whether the mapping reads a span or span-event attribute of this name."""
    return name in _KEPT_NAMES or _KEPT_PATTERN.fullmatch(name) is not None


def conversations_from_spans(spans: Iterable[SpanRecord], prior: Resume | None = None) -> list[MappedConversation]:
    """The conversations the spans hold, in the order they started: grouped by `gen_ai.conversation.id`
    (OpenInference: `session.id`; a span without one takes its nearest ancestor's, then its trace's), else by trace.
    Spans of no known dialect shape the tree but make no conversation of their own. `prior`: where the mapping of
    the one conversation they continue stood (its `resume`), when the spans are only those of its last turns."""
    unique: dict[tuple[str, str], SpanRecord] = {}
    for span in spans:
        key = (span.trace_id, span.span_id)
        kept = unique.get(key)
        # An exporter that retries sends a span twice; keep the fuller copy.
        if kept is None or len(span.attributes) + len(span.events) > len(kept.attributes) + len(kept.events):
            unique[key] = span
    steps = {key: _read(span) for key, span in unique.items()}
    parent = {
        key: (span.trace_id, span.parent_span_id)
        for key, span in unique.items()
        if span.parent_span_id and (span.trace_id, span.parent_span_id) in unique
    }
    depth = _depths(steps, parent)
    ordered = sorted(steps, key=lambda key: (unique[key].start_ns, depth[key], unique[key].end_ns, key))
    conversation = _conversation_ids(ordered, steps, parent)
    # By service too: two services that happen to use the same conversation id had two conversations, not one.
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key in ordered:
        groups.setdefault((unique[key].service_name, conversation[key]), []).append(key)
    mapped = []
    for (_, group_key), keys in groups.items():
        result = assemble(Group(key=group_key, steps=[steps[key] for key in keys], parent=parent, all_steps=steps),
                          prior)
        if result is not None:
            mapped.append(result)
    return mapped


def _read(span: SpanRecord) -> Step:
    module = _dialect(span)
    if module is None:
        return Step(span=span, dialect="")
    try:
        return module.read(span)
    except Exception:  # one exporter's malformed span must not hide the rest of the conversation
        logger.warning("could not read span %s/%s as %s", span.trace_id, span.span_id, module.NAME, exc_info=True)
        return Step(span=span, dialect=module.NAME, kind=OTHER)


def _dialect(span: SpanRecord) -> ModuleType | None:
    if openinference.detect(span):
        return openinference
    if genai.INPUT_MESSAGES in span.attributes or genai.OUTPUT_MESSAGES in span.attributes:
        return genai
    if openllmetry.detect(span):
        return openllmetry
    if genai.detect(span):
        return genai
    return None


def _depths(steps: dict, parent: dict) -> dict:
    """How many of its ancestors each span has among the spans given (a missing parent ends the chain; a cycle in
    malformed input is cut where it closes). Each span is walked once."""
    depth: dict = {}
    for key in steps:
        chain = []
        seen = set()
        node = key
        while node not in depth and node not in seen:
            seen.add(node)
            chain.append(node)
            if node not in parent:
                break
            node = parent[node]
        if not chain:
            continue
        above = parent.get(chain[-1])
        base = depth[above] + 1 if above in depth else 0
        for offset, item in enumerate(reversed(chain)):
            depth[item] = base + offset
    return depth


def _conversation_ids(ordered: list, steps: dict, parent: dict) -> dict:
    """Each span's conversation: its own id, else its nearest ancestor's, else the first its trace has, else the
    trace id."""
    own: dict = {}
    for key in ordered:  # ancestors sort before their descendants, so a parent is resolved first
        conversation_id = steps[key].conversation_id
        if not conversation_id and key in parent:
            conversation_id = own.get(parent[key], "")
        own[key] = conversation_id
    first_of_trace: dict[str, str] = {}
    for key in ordered:
        if own[key]:
            first_of_trace.setdefault(key[0], own[key])
    return {key: own[key] or first_of_trace.get(key[0], key[0]) for key in ordered}
