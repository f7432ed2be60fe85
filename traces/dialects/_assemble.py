"""One conversation's steps (in span order) → a `MappedConversation`.

Every model call carries the whole history so far in its input, so the transcript is not the concatenation of the
calls: it is the last model call's input and output. A conversation whose turns are separate traces (sharing a
conversation id) is stitched turn by turn: a turn's history that starts with the transcript so far replaces it, one
that starts part-way through it continues it, one that shares nothing with it (the framework did not resend the
history) is appended. Each assistant message is matched back to the call that produced it (its usage, model, span
and agent), tool calls to the `execute_tool` spans that ran them (by call id, else by name in order, for exporters
that record no id) and tool results to their calls. All of it is linear in the size of the spans.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from traces.dialects._common import AGENT, MODEL, TOOL, Msg, Step, has_content, text
from traces.spans import MappedConversation, MappedMessage, Resume

# How many places a turn's first message may appear in the transcript so far before the turn is taken as new.
_MAX_ALIGNMENTS = 16


@dataclass
class Group:
    key: str
    steps: list[Step]  # in span order
    parent: dict[tuple[str, str], tuple[str, str]]
    all_steps: dict[tuple[str, str], Step]


def assemble(group: Group, prior: Resume | None = None) -> MappedConversation | None:
    """The conversation of the group's steps; continued from `prior` (the group then holds only the spans of its last
    turn and of the turns after it), its messages are those from the last turn on."""
    steps = [step for step in group.steps if step.dialect]
    model_calls = [step for step in steps if step.kind == MODEL]
    if not model_calls:
        return None
    agents = _Agents(group)
    named_agent = next((s.agent_name for s in steps if s.kind == AGENT and s.agent_name), "")
    if prior is not None and (prior.agent_from_span or not named_agent):
        entry_agent = prior.agent_name or named_agent or agents.of(model_calls[0])
    else:
        entry_agent = named_agent or agents.of(model_calls[0])
    base: dict[str, Any] = {
        "key": group.key,
        "dialect": model_calls[0].dialect,
        "service_name": next((s.span.service_name for s in group.steps if s.span.service_name), ""),
        "trace_ids": tuple(dict.fromkeys(step.span.trace_id for step in group.steps)),
        "agent_name": entry_agent,
    }
    if not any(step.has_content() for step in steps):
        cut = [step for step in model_calls if step.messages_cut]
        if cut:
            # The exporter did capture the content: the receiver cut every message of it, and the capture hint
            # would send the team to a setting that is already on.
            return MappedConversation(
                **base, content_missing=_all_cut(cut), warnings=tuple(_cut_warning(step) for step in cut)
            )
        return MappedConversation(**base, content_missing=capture_hint(steps))
    history, sources, warnings = _history(model_calls, prior.prefix if prior is not None else ())
    tool_steps = [s for s in steps if s.kind == TOOL]
    has_tools = bool(tool_steps) or (prior is not None and prior.has_tools)
    messages, origins = _messages(history, sources, model_calls, tool_steps, agents, has_tools=has_tools)
    resume = _resume(
        group, prior, history=history, sources=sources, messages=messages, origins=origins, has_tools=has_tools,
        agent_name=entry_agent, agent_from_span=bool(named_agent) or (prior is not None and prior.agent_from_span),
    )
    return MappedConversation(
        **base,
        system_instruction=_system_instruction(model_calls),
        messages=tuple(messages),
        tools=tuple(_tools(model_calls)),
        warnings=tuple(warnings),
        resume=resume,
    )


def _resume(
    group: Group, prior: Resume | None, *, history: list[Msg], sources: list[Step], messages: list[MappedMessage],
    origins: list[str], has_tools: bool, agent_name: str, agent_from_span: bool,
) -> Resume | None:
    """Where the mapping stands before its last turn. None when the last turn's messages are not all after the other
    turns' (traces whose calls interleave): a later span must then map the whole conversation again."""
    if not sources:
        return None
    last = sources[-1].span.trace_id
    first_of_last = next(index for index, step in enumerate(sources) if step.span.trace_id == last)
    first_message = next((index for index, trace_id in enumerate(origins) if trace_id == last), len(origins))
    if any(step.span.trace_id != last for step in sources[first_of_last:]) or any(
        trace_id != last for trace_id in origins[first_message:]
    ):
        return None
    starts = [step.span.start_ns for step in group.steps]
    before = [step.span.start_ns for step in group.steps if step.span.trace_id != last]
    start = prior.seq if prior is not None else 0
    return Resume(
        last_trace=last,
        prefix=(*(prior.prefix if prior is not None else ()),
                *(fingerprint_key(msg) for msg in history[:first_of_last])),
        seq=start + first_message,
        users_before=(prior.users_before if prior is not None else 0)
        + sum(message.role == "user" for message in messages[:first_message]),
        has_tools=has_tools,
        agent_name=agent_name,
        agent_from_span=agent_from_span,
        prior_max_start=max([*before, prior.prior_max_start if prior is not None else 0]),
        max_start=max([*starts, prior.max_start if prior is not None else 0]),
    )


def fingerprint_key(msg: Msg) -> str:
    """A message's fingerprint in a few bytes, as a conversation's mapping state keeps its transcript."""
    return hashlib.blake2b(repr(msg.fingerprint()).encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def _history(model_calls: list[Step], prefix: tuple[str, ...] = ()) -> tuple[list[Msg], list[Step], list[str]]:
    """The transcript (messages without the system ones), for each message the step it was read from, and a warning
    for each turn a cut history left incomplete.

    A turn is read from its last model call, whose input holds the whole history — unless that input was cut at the
    receiver: then every call of the turn is read in order, each adding what it says beyond the transcript so far
    (its own delta). A cut input adds its whole messages only where they continue the transcript exactly; the cut
    tail (the turn's question, usually) is missing, never made up. `prefix`: the transcript the turns continue (its
    fingerprint keys), when only the last turns' calls are given."""
    last_of_trace: dict[str, Step] = {}
    for call in model_calls:
        if call.output or call.load_input is not None:
            last_of_trace[call.span.trace_id] = call
    cut = {trace_id for trace_id, call in last_of_trace.items() if call.messages_cut}
    turns = [
        call for call in model_calls
        if last_of_trace.get(call.span.trace_id) is call
        or (call.span.trace_id in cut and (call.output or call.load_input is not None))
    ]
    history: list[Msg] = []
    fingerprints: list[str] = list(prefix)
    sources: list[Step] = []
    warnings: dict[str, str] = {}
    for call in turns:
        incoming = call.input
        incoming_fingerprints = [fingerprint_key(msg) for msg in incoming]
        if call.messages_cut:
            whole = incoming_fingerprints[: len(fingerprints)] == fingerprints
            known = len(fingerprints) if whole else len(incoming)
            warnings.setdefault(call.span.trace_id, _cut_warning(call))
        else:
            known = _known_prefix(fingerprints, incoming_fingerprints)
        for msg, fingerprint in zip(incoming[known:], incoming_fingerprints[known:], strict=True):
            history.append(msg)
            fingerprints.append(fingerprint)
            sources.append(call)
        for msg in call.output:
            history.append(msg)
            fingerprints.append(fingerprint_key(msg))
            sources.append(call)
    return history, sources, list(warnings.values())


def _all_cut(cut: list[Step]) -> str:
    spans = ", ".join(step.span.span_id for step in cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
    return (
        f"every message these spans carried was over the receiver's limit per attribute "
        f"(AGENTTEST_TRACES_MAX_VALUE_CHARS, {settings.AGENTTEST_TRACES_MAX_VALUE_CHARS:,} characters) and was cut "
        f"(spans {spans}), so none can be read back; raise the limit to import this conversation"
    )


def _cut_warning(call: Step) -> str:
    return (
        f"the turn of trace {call.span.trace_id} is incomplete: its model call's messages (span "
        f"{call.span.span_id}) were over the receiver's limit per attribute (AGENTTEST_TRACES_MAX_VALUE_CHARS) and "
        "were cut, so what only the cut part held — the turn's question, a tool result no tool span recorded — is "
        "missing here, not made up; compare the turn with the service's own record before enabling"
    )


def _known_prefix(known: list[str], incoming: list[str]) -> int:
    """How many of a turn's leading messages the transcript already ends with."""
    if not known or not incoming:
        return 0
    if len(incoming) >= len(known) and incoming[: len(known)] == known:
        return len(known)
    first = incoming[0]
    tried = 0
    for start in range(max(0, len(known) - len(incoming)), len(known)):
        if known[start] != first:
            continue
        overlap = len(known) - start
        if known[start:] == incoming[:overlap]:
            return overlap
        tried += 1
        if tried >= _MAX_ALIGNMENTS:
            break
    return 0


def _messages(
    history: list[Msg], sources: list[Step], model_calls: list[Step], tool_steps: list[Step], agents: _Agents, *,
    has_tools: bool,
) -> tuple[list[MappedMessage], list[str]]:
    """The host's messages of the history, and for each the trace of the turn it belongs to."""
    produced: dict[tuple[Any, ...], deque[Step]] = {}
    for model_call in model_calls:
        for msg in model_call.output:
            if msg.role == "assistant":
                produced.setdefault(msg.fingerprint(), deque()).append(model_call)
    executed = _executions(history, tool_steps)
    sent_back = {r.id for msg in history if msg.role != "assistant" for r in msg.results if r.id}
    answered = {r.id for msg in history for r in msg.results if r.id}
    by_call_id = {
        call.id: step for msg in history for call in msg.calls if call.id and (step := executed.get(id(call)))
    }
    agent_of_call: dict[str, str] = {}
    usage_given: set[int] = set()
    out: list[MappedMessage] = []
    origins: list[str] = []
    made_by = ""  # the trace of the history message whose host messages are the last ones made
    for msg, source in zip(history, sources, strict=True):
        origins.extend([made_by] * (len(out) - len(origins)))
        made_by = source.span.trace_id
        if msg.role == "assistant":
            queue = produced.get(msg.fingerprint())
            maker = queue.popleft() if queue else None
            step = maker or source
            agent = agents.of(step)
            # The answer's usage counts once, on the first message made from it.
            counted = maker if maker is not None and id(maker) not in usage_given else None
            if counted is not None:
                usage_given.add(id(counted))
            out.append(MappedMessage(
                role="assistant", content=msg.text, agent_name=agent, model=model_key(maker) if maker else "",
                input_tokens=counted.input_tokens if counted else 0,
                output_tokens=counted.output_tokens if counted else 0,
                span_id=step.span.span_id,
            ))
            for call in msg.calls:
                ran = executed.get(id(call))
                provider_executed = call.provider_executed or (
                    ran is None and has_tools and call.id not in sent_back
                )
                args, raw = _arguments(call.arguments)
                agent_of_call[call.id] = agent
                out.append(MappedMessage(
                    role="tool_call", function_name=call.name, arguments=args, raw_arguments=raw,
                    tool_call_id=call.id, agent_name=agent, span_id=step.span.span_id,
                    provider_executed=provider_executed,
                ))
            for call in msg.calls:
                ran = executed.get(id(call))
                if ran is not None and call.id not in answered and has_content(ran.tool_result):
                    out.append(MappedMessage(role="tool_result", content=text(ran.tool_result), tool_call_id=call.id,
                                             agent_name=agent, span_id=ran.span.span_id))
            for result in msg.results:  # a provider-run tool's result, inside the model's own response
                out.append(MappedMessage(role="tool_result", content=text(result.content), tool_call_id=result.id,
                                         agent_name=agent, span_id=step.span.span_id, provider_executed=True))
            continue
        for result in msg.results:
            ran = by_call_id.get(result.id)
            content = result.content
            if content is None and ran is not None:
                content = ran.tool_result
            out.append(MappedMessage(
                role="tool_result", content=text(content), tool_call_id=result.id,
                agent_name=agent_of_call.get(result.id, ""), span_id=(ran or source).span.span_id,
                provider_executed=result.provider_executed,
            ))
        if msg.role not in ("tool", "system", "developer") and msg.text:
            out.append(MappedMessage(role="user", content=msg.text, span_id=source.span.span_id))
    origins.extend([made_by] * (len(out) - len(origins)))
    return out, origins


def _executions(history: list[Msg], tool_steps: list[Step]) -> dict[int, Step]:
    """The `execute_tool` span that ran each tool call (keyed by the call object's identity): the one with its call
    id, else the next unused one with its name."""
    by_id: dict[str, Step] = {}
    by_name: dict[str, deque[Step]] = {}
    for tool_step in tool_steps:
        if tool_step.tool_call_id:
            by_id.setdefault(tool_step.tool_call_id, tool_step)
        else:
            by_name.setdefault(tool_step.tool_name, deque()).append(tool_step)
    found: dict[int, Step] = {}
    for msg in history:
        for call in msg.calls:
            step = by_id.pop(call.id, None) if call.id else None
            if step is None and by_name.get(call.name):
                step = by_name[call.name].popleft()
            if step is not None:
                found[id(call)] = step
    return found


def _arguments(value: Any) -> tuple[dict[str, Any] | None, str]:
    if isinstance(value, dict):
        return value, text(value)
    if isinstance(value, str):
        return None, value
    return None, ""


def model_key(step: Step) -> str:
    """"provider:model", as the host names a model; the model alone when the provider is not known."""
    if not step.model:
        return ""
    if not step.provider or step.model.startswith(f"{step.provider}:"):
        return step.model
    return f"{step.provider}:{step.model}"


def _system_instruction(model_calls: list[Step]) -> str:
    """The entry agent's instruction: the first model call's (an exporter may repeat it as a system message and as
    `gen_ai.system_instructions`; it is kept once). Only the first call that sent messages is asked: the input of
    every later one would be read (each repeats the history) for an instruction the first did not have."""
    for call in model_calls:
        if call.system:
            return "\n\n".join(dict.fromkeys(t for t in call.system if t))
        if call.load_input is not None:
            break
    return ""


def _tools(model_calls: list[Step]) -> list[dict[str, Any]]:
    tools: dict[str, dict[str, Any]] = {}
    for call in model_calls:
        for tool in call.tools:
            tools.setdefault(tool["name"], tool)
    return list(tools.values())


def capture_hint(steps: list[Step]) -> str:
    """Which setting of which exporter turns message content capture on, for the exporter these spans came from."""
    scopes = {step.span.scope_name for step in steps}
    dialects = {step.dialect for step in steps}
    if "pydantic-ai" in scopes:
        return (
            "pydantic-ai recorded no message content: its instrumentation was set up with include_content=False. "
            "Instrument with InstrumentationSettings(include_content=True) (the default), e.g. "
            "Agent.instrument_all(InstrumentationSettings(include_content=True))."
        )
    if any(scope.startswith("opentelemetry.instrumentation.openai_agents") for scope in scopes):
        return (
            "The OpenAI Agents SDK instrumentation recorded no message content. Set "
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true in the service "
            "(opentelemetry-instrumentation-openai-agents-v2; or OpenAIAgentsInstrumentor().instrument("
            "capture_message_content=True)); with Traceloop's opentelemetry-instrumentation-openai-agents, "
            "TRACELOOP_TRACE_CONTENT=true."
        )
    if "openinference" in dialects or any(scope.startswith("openinference.") for scope in scopes):
        return (
            "OpenInference recorded no message content. Unset OPENINFERENCE_HIDE_INPUTS, OPENINFERENCE_HIDE_OUTPUTS, "
            "OPENINFERENCE_HIDE_INPUT_MESSAGES and OPENINFERENCE_HIDE_OUTPUT_MESSAGES in the service (or set them to "
            "false; in code, TraceConfig(hide_inputs=False, hide_outputs=False))."
        )
    if "openllmetry" in dialects:
        return "OpenLLMetry (Traceloop) recorded no message content. Set TRACELOOP_TRACE_CONTENT=true in the service."
    return (
        "The GenAI instrumentation recorded no message content. Set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
        "=span_only in the service (instrumentations built on opentelemetry-util-genai take span_only or "
        "span_and_event; older ones take true; Traceloop's take TRACELOOP_TRACE_CONTENT=true)."
    )


class _Agents:
    """The agent in effect at each span: the nearest `invoke_agent` (agent) ancestor that names one, else the name
    the span claims itself. Memoized along each path, so every span is walked once."""

    def __init__(self, group: Group) -> None:
        self.parent = group.parent
        self.steps = group.all_steps
        self.at: dict[tuple[str, str], str] = {}

    def of(self, step: Step) -> str:
        key = (step.span.trace_id, step.span.span_id)
        return self._above(key) or step.agent_name

    def _above(self, key: tuple[str, str]) -> str:
        path = []
        seen = set()
        node = self.parent.get(key)
        name = ""
        while node is not None and node not in seen:
            if node in self.at:
                name = self.at[node]
                break
            seen.add(node)
            step = self.steps.get(node)
            if step is not None and step.kind == AGENT and step.agent_name:
                name = step.agent_name
                self.at[node] = name
                break
            path.append(node)
            node = self.parent.get(node)
        for item in path:
            self.at[item] = name
        return name
