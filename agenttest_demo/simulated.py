"""The `simulated` provider: offline demo models that answer by rules — no network, no randomness.

Two models that behave differently on the same conversation, so a multi-model run has something to compare:

- "sim-careful" looks an order up before changing it, refuses to change one that is already delivered or cancelled,
  emails a confirmation after a change when it can, and summarises what it did;
- "sim-hasty" does what its instruction says and nothing more: it looks an order up before changing it, and emails a
  confirmation, only when the instruction asks for that; it acts on the order number in the message it answers and
  never resolves one from an earlier turn ("cancel it"), guessing rather than asking; and it answers tersely.

So a recording made on one model replays on the other wherever they make the same calls, whatever each writes in a
reason or an email, and an instruction edit that drops "look it up first" shows on sim-hasty.

When asked to play a user (a case's simulated user, whose model defaults to the suite's judge), "sim-careful"
follows the persona: it opens with the line the persona quotes, reveals a fact only when the assistant's question
names it, says it is done once the assistant confirms the goal (its order number and its outcome), and gives up
otherwise. As the judge of goalReached it finds the goal reached only when a call did it: a tool named for the goal's
outcome, called with the goal's numbers.

Both hand a request back to the router (`util-routing-fallback_to_router`) when they are a sub-agent asked for a
change none of their tools makes, or when nothing they offer matches at all.

The rules read only the OpenAI-format request: the user's words are matched against tool names and descriptions
(name words count double, words many tools share count less), arguments are filled from the JSON Schema with what the
conversation mentions (an order number, an email address, a phrase), and a router's `route_to_agent` picks the
sub-agent whose name and description best match.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from agenttest.plugin import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    estimate_usage,
    is_number,
)

CAREFUL = "sim-careful"
HASTY = "sim-hasty"
MODELS = (CAREFUL, HASTY)

ROUTE_TOOL = "route_to_agent"
FALLBACK_TOOL = "util-routing-fallback_to_router"
# Control-flow tools the rules never pick by word overlap: routing has its own rule, and the simulated models answer
# in text rather than through response_to_user.
_UNSCORED_TOOLS = frozenset({ROUTE_TOOL, FALLBACK_TOOL, "response_to_user"})

_STOP_WORDS = frozenset(
    "a an and are as at be been by can could do does for from has have how i i'm in is it its just me my no not "
    "of on or our please so that the their them then there this to up us was we were what when which who why will "
    "with would you your want like need get got let know tell give one also any some about".split()
)
_ALIASES = {"lookup": "look", "mail": "email", "canceled": "cancel", "cancellation": "cancel"}
_PAST = {"cancel": "cancelled", "modify": "modified"}
# A looked-up status that makes a change pointless; the careful model stops there.
_FINAL_STATUSES = frozenset({"delivered", "cancelled", "canceled", "refunded", "closed", "returned"})
_FAILURE_MARKERS = (
    "error", "blocked", "not allowed", "failed", "can't find function", "cannot", "denied", "invalid", "refused",
    "not executed",
)

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_ID_PATTERNS = (
    re.compile(r"#\s*([A-Za-z0-9-]*\d[A-Za-z0-9-]*)"),
    re.compile(r"\b(?:order|ticket|id|number|no\.?)\s*(?:number|no\.?|id)?\s*[:#]?\s*(\d[A-Za-z0-9-]*)", re.I),
    re.compile(r"\b(\d{3,})\b"),
)
_WORD = re.compile(r"[a-z][a-z0-9']*")
_ID_FIELD = re.compile(r"(^|_)(id|number|no)$|[a-z]Id$")
_REASON = re.compile(r"\b(?:because|since)\b\s+(.+)", re.I)
_CLAUSE = re.compile(r"[.!?;,\n]+|\band\b")
_NEGATION = re.compile(r"\b(?:not|never|no|don't|do not|without)\b", re.I)


# The answer text and the tool calls (name, arguments) to make.
Decision = tuple[str, list[tuple[str, dict[str, Any]]]]


@dataclass
class _Call:
    name: str
    arguments: dict[str, Any]
    result: str | None


@dataclass
class _View:
    """What the rules read from one request."""

    user_text: str
    system_text: str
    earlier_user_texts: list[str]
    tools: dict[str, dict[str, Any]]
    turn_calls: list[_Call]
    latest_results: list[str]
    calls_so_far: int


class SimulatedProvider(ModelProvider):
    kind = "simulated"
    # Rule-based and offline: no key, no cost.
    free = True
    # A pause before each answer, for the provider or one model: lets tests and demos see a run in progress.
    option_keys = frozenset({"delay_ms"})
    model_option_keys = frozenset({"delay_ms"})

    @classmethod
    def validate_options(cls, spec: dict[str, Any]) -> list[str]:
        problems = []
        if "delay_ms" in spec and (not is_number(spec["delay_ms"]) or spec["delay_ms"] < 0):
            problems.append(f"field 'delay_ms' must be a number ≥ 0, got {spec['delay_ms']!r}")
        for index, model in enumerate(spec.get("models", [])):
            if isinstance(model, dict) and "delay_ms" in model and (
                not is_number(model["delay_ms"]) or model["delay_ms"] < 0
            ):
                problems.append(f"models[{index}]: field 'delay_ms' must be a number ≥ 0, got {model['delay_ms']!r}")
        return problems

    def complete(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        if request.model not in MODELS:
            raise ProviderError(
                f"provider {self.name!r}: simulated model {request.model!r} does not exist; choose {', '.join(MODELS)}",
                code="unknown_model",
                provider=self.name,
                model=request.model,
            )
        view = _read(request)
        if not view.tools and view.system_text.startswith(_PLAY_A_USER):
            text, calls = _play_user(request.messages, view.system_text), list[Any]()
        elif not view.tools and _asks_for_a_goal_verdict(view.system_text):
            text, calls = _goal_verdict(view.user_text), []
        elif not view.tools and _asks_for_a_score(view.system_text):
            text, calls = _grade(view.user_text, careful=request.model == CAREFUL), []
        elif not view.tools and '"segments"' in view.system_text:
            text, calls = _segment(view.user_text), []
        else:
            text, calls = _Rules(view, careful=request.model == CAREFUL).decide()
        tool_calls = [
            ToolCall(id=f"call_sim_{view.calls_so_far + index + 1}", name=name, arguments=json.dumps(arguments))
            for index, (name, arguments) in enumerate(calls)
        ]
        delay_ms = self._delay_ms(request.model)
        if delay_ms:
            time.sleep(delay_ms / 1000)
        return ModelResponse(
            text=text,
            tool_calls=tool_calls,
            finish_reason="tool_calls" if tool_calls else "stop",
            usage=estimate_usage(request, text, tool_calls),
            latency_ms=(time.perf_counter() - started) * 1000,
            model=request.model,
        )

    def _delay_ms(self, model: str) -> float:
        for entry in self.options.get("models", []):
            if entry.get("name") == model and "delay_ms" in entry:
                return float(entry["delay_ms"])
        return float(self.options.get("delay_ms", 0))


# Grading, when asked to act as a judge (an llmJudge assertion)


def _asks_for_a_score(system_text: str) -> bool:
    lowered = system_text.lower()
    return "json" in lowered and '"score"' in lowered


def _grade(prompt: str, *, careful: bool) -> str:
    """A deterministic grade of the reply in the prompt: longer, specific, courteous replies score higher. The
    careful model grades strictly (never above 4 for a one-liner), the hasty one generously."""
    reply = prompt.split("Reply:", 1)[-1].strip()
    score = 2
    if re.search(r"\d", reply):
        score += 1
    if len(reply) >= 40:
        score += 1
    if re.search(r"\b(please|thank|sorry|hello|kind regards)\b", reply, re.IGNORECASE) or len(reply) >= 80:
        score += 1
    if not careful:
        score += 1
    score = max(1, min(5, score))
    reason = "specific and complete" if score >= 4 else "too terse to be helpful"
    return json.dumps({"score": score, "reason": f"simulated grade: {reason}"})


# Playing a simulated user, and judging whether its goal was reached (issue 24)

_PLAY_A_USER = "You play a user talking to an AI assistant"
_QUOTED = re.compile(r'"([^"]{2,})"')
_FACT = re.compile(r"^- (.+?): (.*)$", re.M)
_NUMBER = re.compile(r"\b\d{3,}\b")


def _asks_for_a_goal_verdict(system_text: str) -> bool:
    return '"reached"' in system_text


def _section(text: str, start: str, end: str) -> str:
    found = text.split(start, 1)[-1] if start in text else ""
    return found.split(end, 1)[0].strip()


def _outcome(goal: str) -> tuple[list[str], str]:
    """The numbers a goal names and the word of its outcome ("Get order 1043 cancelled." → ["1043"], "cancel")."""
    words = _words(goal)
    return _NUMBER.findall(goal), words[-1] if words else ""


def _move(status: str, message: str = "", reason: str = "") -> str:
    return json.dumps({"status": status, "message": message, "reason": reason})


def _play_user(messages: list[dict[str, Any]], system_text: str) -> str:
    """The user's next move: reveal a fact the assistant asks for, say the persona's line once, be done when the
    assistant confirms the goal, else give up. The assistant's replies are the user-role messages after the opening."""
    persona = _section(system_text, "Persona: ", "\n\nYour goal: ")
    goal = _section(system_text, "Your goal: ", "\n\n")
    facts = dict(_FACT.findall(system_text))
    said = [_content(message) for message in messages if message.get("role") == "assistant"]
    replies = [_content(message) for message in messages[2:] if message.get("role") == "user"]
    reply = replies[-1] if replies and messages[-1].get("role") == "user" and len(messages) > 2 else ""
    numbers, outcome = _outcome(goal)
    reply_words = set(_words(reply))
    if reply and all(number in reply for number in numbers) and outcome in reply_words:
        return _move("done", "Thank you!", f"the assistant confirmed it: {reply[:120]}")
    if "?" in reply:
        for key, value in facts.items():
            if set(_words(key)) <= reply_words and not any(value in line for line in said):
                return _move("still_going", f"It's {value}.")
    quoted = _QUOTED.search(persona)
    line = quoted.group(1) if quoted else goal
    if line not in said:
        return _move("still_going", line)
    return _move("gave_up", "", f"the assistant did not get it done: {reply[:120] or 'it said nothing'}")


def _goal_verdict(prompt: str) -> str:
    """Reached when a tool named for the goal's outcome was called with every number the goal names: what was
    done, not what was said."""
    goal = _section(prompt, "The user's goal: ", "\n\n")
    numbers, outcome = _outcome(goal)
    calls = re.findall(r"^Assistant called ([\w.-]+)\((.*)\)$", prompt, re.M)
    for name, arguments in calls:
        if outcome in _words(name) and all(number in arguments for number in numbers):
            return json.dumps({"reached": True, "reason": f"simulated verdict: {name} was called with "
                                                          f"{', '.join(numbers) or 'its arguments'}"})
    wanted = f"{outcome} with {', '.join(numbers)}" if numbers else outcome
    return json.dumps({"reached": False, "reason": f"simulated verdict: no call did {wanted!r}"})


def _segment(prompt: str) -> str:
    """Cut points for case extraction: a turn that names a different order number than the running segment starts
    a new one; a turn that names none ("cancel it") continues it. Names come from the segment's first message."""
    try:
        turns = json.loads(prompt)["turns"]
    except (ValueError, KeyError, TypeError):
        return "I could not read the conversation."
    segments: list[dict[str, Any]] = []
    current_key: str | None = None
    for turn in turns:
        numbers = re.findall(r"\d{3,}", str(turn.get("user", "")))
        key = numbers[0] if numbers else current_key
        if not segments or key != current_key:
            name = str(turn.get("user", "")).strip().rstrip("?.!")[:60]
            segments.append({"name": name, "firstTurn": turn["turn"], "lastTurn": turn["turn"]})
        segments[-1]["lastTurn"] = turn["turn"]
        current_key = key
    return json.dumps({"segments": segments})


# Reading the request


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _arguments(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _read(request: ModelRequest) -> _View:
    messages = request.messages
    user_indexes = [index for index, message in enumerate(messages) if message.get("role") == "user"]
    last_user = user_indexes[-1] if user_indexes else -1
    results = {
        message.get("tool_call_id"): _content(message) for message in messages if message.get("role") == "tool"
    }
    turn_calls = [
        _Call(function.get("name", ""), _arguments(function.get("arguments")), results.get(call.get("id")))
        for message in messages[last_user + 1 :]
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
        if isinstance(call, dict) and isinstance(function := call.get("function"), dict)
    ]
    latest_results: list[str] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        latest_results.insert(0, _content(message))
    tools = {}
    for tool in request.tools:
        function = tool.get("function", tool)
        if isinstance(function, dict) and function.get("name"):
            tools[function["name"]] = function
    return _View(
        user_text=_content(messages[last_user]) if last_user >= 0 else "",
        system_text=" ".join(_content(message) for message in messages if message.get("role") == "system"),
        earlier_user_texts=[_content(messages[index]) for index in reversed(user_indexes[:-1])],
        tools=tools,
        turn_calls=turn_calls,
        latest_results=latest_results,
        calls_so_far=sum(len(message.get("tool_calls") or []) for message in messages),
    )


# Words and matching


def _stem(word: str) -> str:
    word = _ALIASES.get(word, word)
    for suffix in ("ation", "ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]
    return _ALIASES.get(word, word)


def _words(text: str) -> list[str]:
    text = _EMAIL.sub(" ", text.lower()).replace("_", " ").replace("-", " ")
    return [_stem(word) for word in _WORD.findall(text) if word not in _STOP_WORDS and len(word) > 1]


def _stems(text: str) -> frozenset[str]:
    return frozenset(_stem(word) for word in text.split())


_THANKS = _stems("thanks thank ok okay great cheers cool bye goodbye")
_GREETINGS = _stems("hello hey hi morning evening afternoon good")
_LOOKUP_VERBS = _stems("look get find check fetch read show search retrieve status")
_FIRST = _stems("first before")
_EMAIL_WORDS = _stems("email mail")
_ACTION_VERBS = _stems("cancel delete remove refund update change close modify return")
# User words that mean what tools are described with.
_SYNONYMS = {
    _stem(word): sorted(_stems(synonyms))
    for word, synonyms in {
        "where": "status look track",
        "track": "status look",
        "check": "status look",
        "status": "look",
        "stop": "cancel",
        "abort": "cancel",
        "human": "person operator",
    }.items()
}


def _query(text: str) -> list[str]:
    words = _words(text)
    expanded = [*words, *(synonym for word in words for synonym in _SYNONYMS.get(word, ()))]
    return sorted(set(expanded))


def _best(query: list[str], candidates: list[tuple[str, str]]) -> str | None:
    """The candidate (name, description) whose words best match the query; None when nothing matches.

    Ties go to the earlier candidate, so the answer depends only on the request."""
    described = [(name, set(_words(name)), set(_words(description))) for name, description in candidates]
    spread = Counter(word for _, name_words, words in described for word in name_words | words)
    best_name, best_score = None, 0.0
    for name, name_words, words in described:
        score = sum((2.0 if word in name_words else 1.0) / spread[word] for word in query if word in name_words | words)
        if score > best_score:
            best_name, best_score = name, score
    return best_name


def _small_talk(text: str) -> str | None:
    """"thanks" or "greeting" when that is all the user said."""
    words = _words(text)
    if words and all(word in _THANKS for word in words):
        return "thanks"
    if words and all(word in _THANKS | _GREETINGS for word in words):
        return "greeting"
    return None


# Facts from the conversation


def _find_id(texts: list[str]) -> str | None:
    for text in texts:
        for pattern in _ID_PATTERNS:
            match = pattern.search(text)
            if match:
                return match.group(1)
    return None


def _find_email(texts: list[str]) -> str | None:
    for text in texts:
        match = _EMAIL.search(text)
        if match:
            return match.group(0)
    return None


def _json(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _failure(text: str | None) -> str | None:
    """Why a tool result is a failure, or None when it looks like a success."""
    data = _json(text)
    if data:
        if data.get("error"):
            return str(data["error"])
        if data.get("ok") is False or data.get("success") is False:
            return str(data.get("message") or "the tool reported a failure")
        return None
    lowered = (text or "").lower()
    if any(marker in lowered for marker in _FAILURE_MARKERS):
        return (text or "").strip()[:160]
    return None


def _status(call: _Call) -> str | None:
    data = _json(call.result)
    if isinstance(data.get("status"), str):
        return data["status"]
    flags = [key for key, value in data.items() if value is True and key.endswith("ed")]
    if flags:
        return flags[0]
    verbs = [word for word in _words(call.name) if word in _ACTION_VERBS]
    if verbs and call.result is not None:
        return _PAST.get(verbs[0], f"{verbs[0].rstrip('e')}ed")
    return None


def _instruction_asks(system_text: str, *word_sets: frozenset[str]) -> bool:
    """Whether a clause of the instruction asks for something with words of every set ("look the order up first"),
    not counting a clause that forbids it ("never email")."""
    return any(
        not _NEGATION.search(clause) and all(set(_words(clause)) & words for words in word_sets)
        for clause in _CLAUSE.split(system_text)
    )


def _is_lookup(name: str) -> bool:
    return bool(set(_words(name)) & _LOOKUP_VERBS)


def _is_action(name: str) -> bool:
    return bool(set(_words(name)) & _ACTION_VERBS)


def _is_email(name: str) -> bool:
    return "email" in _words(name)


def _id_field(properties: dict[str, Any]) -> str | None:
    return next((name for name in properties if _ID_FIELD.search(name)), None)


def _noun(tool: dict[str, Any]) -> str:
    """What the tool works on ("order" for lookup_order(order_id)), for sentences about it."""
    field = _id_field((tool.get("parameters") or {}).get("properties") or {}) or ""
    noun = re.sub(r"_?(id|number|no)$", "", field, flags=re.I).replace("_", " ").strip()
    if noun:
        return noun
    objects = [word for word in _words(tool.get("name", "")) if word not in _LOOKUP_VERBS | _ACTION_VERBS]
    return objects[-1] if objects else "request"


# Deciding


class _Rules:
    def __init__(self, view: _View, careful: bool) -> None:
        self.view = view
        self.careful = careful
        # The careful model checks and confirms on its own initiative; the hasty one only when told to.
        self.looks_first = careful or _instruction_asks(view.system_text, _LOOKUP_VERBS, _FIRST)
        self.emails = careful or _instruction_asks(view.system_text, _EMAIL_WORDS)
        self.query = _query(view.user_text)
        scored = self._scored_tools()
        if (
            careful and view.earlier_user_texts and _find_id([view.user_text]) and ROUTE_TOOL not in view.tools
            and scored and _best(self.query, scored) is None
        ):
            # An answer to its own question ("It's 1043."): the request it asked about goes on. A router routes on
            # what it is told now.
            self.query = sorted({*self.query, *_query(view.earlier_user_texts[0])})
        self.mine = [
            call
            for call in view.turn_calls
            if call.name in view.tools and call.name not in (ROUTE_TOOL, FALLBACK_TOOL)
        ]

    def decide(self) -> Decision:
        failures = [reason for reason in map(_failure, self.view.latest_results) if reason]
        if failures:
            if self.careful:
                return f"I'm sorry, I could not complete that: {failures[0]}", []
            return f"Could not complete that: {failures[0]}", []
        if ROUTE_TOOL in self.view.tools:
            routed = self._route()
            if routed is not None:
                return routed
        if not self.mine:
            return self._first_step()
        return self._next_step()

    def _route(self) -> Decision | None:
        tool = self.view.tools[ROUTE_TOOL]
        tried = [call.arguments.get("agent_name") for call in self.view.turn_calls if call.name == ROUTE_TOOL]
        fell_back = any(call.name == FALLBACK_TOOL for call in self.view.turn_calls)
        if tried and not fell_back:
            return f"I have handed your request to {tried[-1]}.", []
        candidates = [(name, description) for name, description in _sub_agents(tool) if name not in tried]
        choice = _best(self.query, candidates)
        if choice is None:
            return None
        return "", [(ROUTE_TOOL, {"agent_name": choice, "reason": _phrase(self.view.user_text)})]

    def _scored_tools(self) -> list[tuple[str, str]]:
        return [
            (name, tool.get("description", ""))
            for name, tool in self.view.tools.items()
            if name not in _UNSCORED_TOOLS and (self.emails or not _is_email(name))
        ]

    def _intended(self) -> str | None:
        return _best(self.query, self._scored_tools())

    def _first_step(self) -> Decision:
        if self._outside_my_job():
            return "", [(FALLBACK_TOOL, {"reason": f"outside my scope: {_phrase(self.view.user_text)}"})]
        intended = self._intended()
        if intended is None:
            return self._no_match()
        if self.looks_first and _is_action(intended):
            lookup = self._lookup_for(intended)
            if lookup is not None:
                return self._call(lookup)
        return self._call(intended)

    def _outside_my_job(self) -> bool:
        """A sub-agent asked to change something none of its tools changes ("cancel" to an agent that only looks
        orders up) hands the request back to the router, however many other words match its tools."""
        if FALLBACK_TOOL not in self.view.tools or any(call.name == FALLBACK_TOOL for call in self.view.turn_calls):
            return False
        wanted = set(self.query) & _ACTION_VERBS
        offered = {word for name in self.view.tools if name not in _UNSCORED_TOOLS for word in _words(name)}
        return bool(wanted) and not wanted & offered

    def _next_step(self) -> Decision:
        done = [call.name for call in self.mine]
        intended = self._intended()
        if intended is not None and intended not in done:
            looked_up = next((call for call in self.mine if _is_lookup(call.name)), None)
            status = _status(looked_up) if looked_up else None
            if _is_action(intended) and status in _FINAL_STATUSES:
                noun, ident = _noun(self.view.tools[intended]), self._id()
                subject = f"{noun} {ident}" if ident else f"the {noun}"
                if not self.careful:
                    return f"{subject[:1].upper()}{subject[1:]} is already {status}.", []
                return f"I checked: {subject} is already {status}, so I did not change it.", []
            return self._call(intended)
        email_tool = next((name for name in self.view.tools if _is_email(name)), None)
        changed = any(_is_action(name) for name in done)
        if self.emails and email_tool and changed and email_tool not in done and self._email():
            return "", [(email_tool, self._email_arguments(email_tool))]
        return self._summary(), []

    def _lookup_for(self, action: str) -> str | None:
        objects = set(_words(action)) - _ACTION_VERBS
        done = {call.name for call in self.mine}
        for name in self.view.tools:
            if name not in done and _is_lookup(name) and set(_words(name)) & objects:
                return name
        return None

    def _no_match(self) -> Decision:
        small_talk = _small_talk(self.view.user_text)
        if small_talk == "thanks":
            return ("You're welcome! Is there anything else I can help with?" if self.careful else "OK."), []
        if small_talk == "greeting":
            return ("Hello! How can I help you today?" if self.careful else "Hi."), []
        handed_back = any(call.name == FALLBACK_TOOL for call in self.view.turn_calls)
        if FALLBACK_TOOL in self.view.tools and not handed_back:
            return "", [(FALLBACK_TOOL, {"reason": f"outside my scope: {_phrase(self.view.user_text)}"})]
        offered = [name for name in self.view.tools if name not in _UNSCORED_TOOLS]
        if not self.careful:
            return "I can't help with that.", []
        if offered:
            return f"I'm not sure what you need. I can help with: {', '.join(offered)}.", []
        return "I'm sorry, I can't help with that here.", []

    # Arguments

    def _id(self) -> str | None:
        """The id the user means: in their message, else one this turn's calls used or returned, else earlier. The
        hasty model reads only the message and the arguments it sent: "cancel it" leaves it without an id."""
        used = [
            str(value)
            for call in self.mine
            for source in ((call.arguments, _json(call.result)) if self.careful else (call.arguments,))
            for key, value in source.items()
            if _ID_FIELD.search(key) and value not in (None, "")
        ]
        found = _find_id([self.view.user_text]) or next(iter(used), None)
        if found or not self.careful:
            return found
        return _find_id([*self.view.earlier_user_texts, self.view.system_text])

    def _email(self) -> str | None:
        texts = [self.view.user_text, *(call.result or "" for call in self.mine)]
        if self.careful:
            texts += [self.view.system_text, *self.view.earlier_user_texts]
        return _find_email(texts)

    def _call(self, name: str) -> Decision:
        schema = self.view.tools[name].get("parameters") or {}
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        arguments: dict[str, Any] = {}
        id_field = _id_field(properties)
        for field, spec in properties.items():
            spec = spec if isinstance(spec, dict) else {}
            if field == id_field:
                value = self._id()
                if value is None and field in required and self.careful:
                    return f"Could you tell me the {_noun(self.view.tools[name])} number?", []
                arguments[field] = _typed(value or "", spec)
            elif "email" in field.lower() or field.lower() in ("to", "recipient"):
                if self._email() or field in required:
                    arguments[field] = self._email() or ""
            elif "enum" in spec and spec["enum"]:
                options = [str(option) for option in spec["enum"]]
                arguments[field] = _best(self.query, [(option, "") for option in options]) or options[0]
            elif field.lower() == "reason" or field in required:
                arguments[field] = _typed(_phrase(self.view.user_text, reason=field.lower() == "reason"), spec)
        return "", [(name, arguments)]

    def _email_arguments(self, name: str) -> dict[str, Any]:
        properties = (self.view.tools[name].get("parameters") or {}).get("properties") or {}
        required = (self.view.tools[name].get("parameters") or {}).get("required") or []
        subject, body = self._headline(), self._summary()
        arguments: dict[str, Any] = {}
        for field in properties:
            lowered = field.lower()
            if lowered in ("to", "recipient", "recipients") or "email" in lowered:
                arguments[field] = self._email()
            elif lowered in ("subject", "title"):
                arguments[field] = subject
            elif lowered in ("body", "text", "content", "message"):
                arguments[field] = f"Hello,\n\n{body}\n\nKind regards,\nCustomer support" if self.careful else body
            elif field in required:
                arguments[field] = subject
        return arguments

    # Answers

    def _headline(self) -> str:
        action = next((call for call in reversed(self.mine) if _is_action(call.name)), None)
        last = action or next((call for call in reversed(self.mine) if not _is_email(call.name)), None)
        if last is None:
            return "Your request"
        noun = _noun(self.view.tools[last.name]).capitalize()
        ident = self._id()
        status = _status(last)
        subject = f"{noun} {ident}" if ident else noun
        return f"{subject} is {'now ' if action else ''}{status}" if status else f"{subject}: done"

    def _summary(self) -> str:
        if not self.careful:
            return f"{self._headline()}."
        parts = [f"{self._headline()}."]
        looked_up = next((call for call in self.mine if _is_lookup(call.name)), None)
        if looked_up is not None:
            details = _json(looked_up.result)
            items = [f"{key.replace('_', ' ')}: {', '.join(map(str, value))}" for key, value in details.items()
                     if isinstance(value, list) and value]
            if any(_is_action(call.name) for call in self.mine):
                parts.append(f"I checked it first (it was {_status(looked_up) or 'found'}).")
            elif items:
                listed = "; ".join(items)
                parts.append(f"{listed[:1].upper()}{listed[1:]}.")
        emailed = next((call for call in self.mine if _is_email(call.name)), None)
        if emailed is not None:
            recipient = next((value for key, value in emailed.arguments.items() if key.lower() == "to"), None)
            parts.append(f"I sent a confirmation email to {recipient}." if recipient else "I sent an email.")
        return " ".join(parts)


def _sub_agents(tool: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, description) of each sub-agent a route_to_agent tool offers: names from the enum, descriptions from
    the text ("Sub-agents: orders: Looks up orders; billing: …")."""
    parameters = tool.get("parameters") or {}
    agent_field = ((parameters.get("properties") or {}).get("agent_name")) or {}
    text = " ".join([tool.get("description", ""), agent_field.get("description", "")])
    names = [str(name) for name in agent_field.get("enum") or []]
    if not names:
        names = re.findall(r"(?:^|[;\n]|Sub-agents:)\s*-?\s*([\w.-]+):", text)
    result = []
    for name in names:
        match = re.search(rf"(?<![\w-]){re.escape(name)}\s*[:—-]\s*([^;\n]*)", text)
        result.append((name, match.group(1) if match else ""))
    return result


def _phrase(text: str, *, reason: bool = False) -> str:
    """A short phrase from the user's text; for a reason, what follows "because" when they gave one."""
    text = " ".join(text.split())
    if reason:
        match = _REASON.search(text)
        if match:
            text = match.group(1)
    return text[:100].rstrip(" .!?") or "requested by the user"


def _typed(value: str, spec: dict[str, Any]) -> Any:
    kind = spec.get("type")
    if kind in ("integer", "number"):
        digits = re.sub(r"\D", "", value)
        return int(digits) if digits else 0
    if kind == "boolean":
        return True
    if kind == "array":
        return [value] if value else []
    if kind == "object":
        return {}
    return value
