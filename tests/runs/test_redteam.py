"""Red-team findings on the runs app: a judge's unusable score (2), test conversations told apart by their seal and
not by tags anyone can set (8), recordings that would crash a replay (12), and the run pages' forms refusing fields
they do not know (the runs part of 10)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agenthost.llm.scripted import Answer
from agenthost.models import Agent, Conversation
from agenthost.seams import Usage, get_model
from runs.engine.assertions import _parse_verdict
from runs.engine.case_runner import execute_case
from runs.engine.plans import AssertionPlan, CasePlan, SuitePlan, TurnPlan
from runs.models import CaseResult, Recording, Run
from runs.services import run_create, run_execute
from runs.tapes.files import MANIFEST, RecordingFilesRejected, recordings_import
from tests.bad_input import database_fingerprint, fingerprint_changes, session_client, token_client
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.runs.conftest import CAREFUL

pytestmark = pytest.mark.django_db(transaction=True)


# --- 2: the judge's score -----------------------------------------------------------------------------------------


def _judged_case(agent: Agent) -> CasePlan:
    return CasePlan(
        id=1, name="case", type="agent", entry_agent=agent, history=[], initial_state={},
        turns=[TurnPlan("when?", [AssertionPlan("llmJudge", {"criterion": "polite"})])], assertions=[], mocks=[],
    )


def _judge_suite(judge_model: str) -> SuitePlan:
    return SuitePlan(extra_allowed=frozenset(), force_blocked=frozenset(), judge_model=judge_model,
                     timeout_seconds=20.0)


UNUSABLE_VERDICTS = [
    ('{"score": NaN, "reason": "ok"}', "'score' must be a finite whole number, got nan"),
    ('{"score": Infinity, "reason": "ok"}', "'score' must be a finite whole number, got inf"),
    ('{"score": -Infinity, "reason": "ok"}', "'score' must be a finite whole number, got -inf"),
    ('{"score": 1e999, "reason": "ok"}', "'score' must be a finite whole number, got inf"),
    ('{"score": 4.5, "reason": "ok"}', "'score' must be a finite whole number, got 4.5"),
    ('{"score": ' + "1" * 5001 + ', "reason": "ok"}', "'score' must be a whole number, got <integer of 5001 digits>"),
    ('{"score": 10000000000000000000000000, "reason": "ok"}', "score 10000000000000000000000000 is outside 1–5"),
    ('{"score": 9, "reason": "ok"}', "score 9 is outside 1–5"),
    ('{"score": ' + "[" * 5000 + "]" * 5000 + "}", "malformed JSON (nested more than 64 levels deep)"),
    ('{"score": "5", "reason": "ok"}', "'score' must be a whole number, got '5'"),
]


@pytest.mark.parametrize(("answer", "problem"), UNUSABLE_VERDICTS)
def test_it_makes_an_unusable_judge_score_an_error_of_the_judge_not_a_crash(scripted_model, answer, problem):
    agent = Agent.objects.create(name="desk", instruction="Help.", provider="scripted", model="scripted")
    scripted_model.play(Answer("Your order ships today."), Answer(answer, usage=Usage(10, 2)))
    config = get_model(scripted_model.key)

    execution = execute_case(plan=_judged_case(agent), model=config, suite=_judge_suite(config.key))

    assert execution.status == "error"
    assert "crashed" not in execution.reason
    [outcome] = execution.assertions
    assert outcome["status"] == "error"
    assert outcome["message"] == f"the judge's answer is unusable: {problem}"
    assert execution.judge_usage == Usage(10, 2), "what the judge spent still counts"


def test_it_keeps_a_judges_reason_with_a_lone_surrogate_storable(scripted_model):
    agent = Agent.objects.create(name="desk", instruction="Help.", provider="scripted", model="scripted")
    scripted_model.play(Answer("Your order ships today."), Answer('{"score": 5, "reason": "fine \\ud800 here"}'))
    config = get_model(scripted_model.key)

    execution = execute_case(plan=_judged_case(agent), model=config, suite=_judge_suite(config.key))

    assert execution.status == "passed", execution.reason
    assert execution.assertions[0]["actual"] == {"score": 5, "reason": "fine \ufffd here"}
    json.dumps(execution.assertions, ensure_ascii=False).encode()  # storable: no UnicodeEncodeError


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.text(),
        st.builds(lambda score: json.dumps({"score": score, "reason": "r"}),
                  st.one_of(st.floats(), st.integers(), st.text(), st.booleans(), st.none())),
        st.recursive(st.none() | st.floats() | st.integers() | st.text(),
                     lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)).map(
            lambda value: json.dumps({"score": value})
        ),
    )
)
def test_it_reads_any_judge_answer_as_a_score_or_a_reason_never_raising(text):
    verdict = _parse_verdict(text)
    if isinstance(verdict, str):
        assert verdict
    else:
        score, reason = verdict
        assert isinstance(score, int) and 1 <= score <= 5 and isinstance(reason, str)
        reason.encode()


# --- 8: test conversations are the sealed ones --------------------------------------------------------------------


@pytest.fixture
def member_chat(live_server, member, order_suite, order_desk) -> Iterator[tuple[Run, int]]:
    """A finished run, and a member's own chat tagged as if it were one of the run's test conversations."""
    run = run_execute(run_id=run_create(suite=order_suite, model_keys=[CAREFUL]).pk)
    with token_client(live_server.url, member) as client:
        started = client.post(
            "/api/conversations/", json={"agent": "order-desk", "tags": ["agenttest", f"run:{run.pk}"]}
        )
        assert started.status_code == 201, started.text
        chat = started.json()["id"]
        sent = client.post(f"/api/conversations/{chat}/messages/", json={"text": "Where is order 1043?"})
        assert sent.status_code == 200, sent.text
    yield run, chat


def test_it_keeps_a_users_chat_tagged_like_a_test_conversation_when_the_run_is_deleted(
    live_server, admin_user, member_chat
):
    run, chat = member_chat
    test_conversations = set(CaseResult.objects.filter(run=run).values_list("conversation_id", flat=True))
    assert test_conversations and not Conversation.objects.filter(pk__in=test_conversations, seal_hash="").exists()

    with token_client(live_server.url, admin_user) as client:
        assert client.delete(f"/api/runs/{run.pk}/").status_code == 204

    remaining = set(Conversation.objects.values_list("pk", flat=True))
    assert chat in remaining, "a member's own conversation is not a test conversation, whatever its tags"
    assert not test_conversations & remaining, "the run's sealed test conversations go with it"


def test_it_prunes_only_sealed_test_conversations_never_a_chat_tagged_agenttest(member_chat):
    run, chat = member_chat
    test_conversations = set(CaseResult.objects.filter(run=run).values_list("conversation_id", flat=True))
    Conversation.objects.update(created_at=timezone.now() - timedelta(days=40))
    out = StringIO()

    call_command("prune_test_conversations", "--older-than", "30", stdout=out)

    assert out.getvalue() == f"deleted {len(test_conversations)} test conversation(s) older than 30 day(s)\n"
    assert list(Conversation.objects.values_list("pk", flat=True)) == [chat]


# --- 12: recordings that would crash a replay ---------------------------------------------------------------------


@pytest.fixture
def exported(order_suite, order_desk, tmp_path):
    """The order suite recorded on the careful model and exported; the database then holds no recording."""
    run_execute(run_id=run_create(suite=order_suite, model_keys=[CAREFUL], mode=Run.Mode.RECORD).pk)
    directory = tmp_path / "recordings"
    call_command("recordings", "export", order_suite.name, "--dir", str(directory), stdout=StringIO())
    Recording.objects.all().delete()
    return directory


def _first_file(directory) -> tuple[str, list[dict]]:
    name = json.loads((directory / MANIFEST).read_text())["recordings"][0]["file"]
    return name, [json.loads(line) for line in (directory / name).read_text().splitlines()]


def _edit_first_answer(directory, edit) -> str:
    """Apply edit(entry) to the first entry of the first file, written back as JSON text; the file's name."""
    name, (header, entry, *rest) = _first_file(directory)
    text = edit(entry)
    lines = [json.dumps(header), text if isinstance(text, str) else json.dumps(entry), *map(json.dumps, rest)]
    (directory / name).write_text("\n".join(lines) + "\n")
    return name


def _usage(value: str):
    def edit(entry: dict) -> str:
        entry["response"]["usage"]["input_tokens"] = "__X__"
        return json.dumps(entry).replace('"__X__"', value)

    return edit


def _set(*path: str, value):
    def edit(entry: dict) -> None:
        target = entry
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


BAD_ENTRIES = [
    (_usage("10000000000000000000000000"), "integers must be between"),
    (_usage("-1000000"), "response.usage.input_tokens must be a whole number from 0 to 2147483647, got -1000000"),
    (_usage('"³"'), "response.usage.input_tokens must be a whole number from 0 to 2147483647, got '³'"),
    (_usage("1e999"), "numbers must be finite"),
    (_usage("NaN"), "numbers must be finite"),
    (_usage("1" * 5001), "integers must be between"),
    (_usage("2147483648"), "from 0 to 2147483647, got 2147483648"),
    (_usage("true"), "must be a whole number from 0 to 2147483647, got True"),
    (_set("response", "text", value="\ud800"), "lone surrogate"),
    (_set("response", "tool_calls", value=[{"id": "c", "name": "x", "arguments": "{}", "extra": 1}]),
     "response.tool_calls[0]: unknown field 'extra'; known fields: arguments, id, name"),
    (_set("zzz", value=1), "unknown field 'zzz'; known fields: agent, kind, latency_ms, model, purpose, request,"),
    (_set("response", "usage", "cached_tokens", value=3), "response.usage: unknown field 'cached_tokens'"),
    (_set("response", "text", value="x" * 1_000_001), "response.text is longer than 1000000 characters"),
    (_set("latency_ms", value=-5), "latency_ms must be a number of milliseconds from 0 to 86400000, got -5"),
    (_set("turn", value="0"), "turn must be a whole number from 0 to 2147483647, got '0'"),
    (_set("purpose", value="spy"), "purpose must be one of agent, judge, user, got 'spy'"),
    (lambda entry: json.dumps({"deep": "[" * 5000 + "]" * 5000}).replace('"[', "[").replace(']"', "]"),
     "is nested more than 128 levels deep"),
]


@pytest.mark.parametrize(("edit", "problem"), BAD_ENTRIES)
def test_it_refuses_a_tape_entry_that_would_crash_a_replay_and_imports_nothing(exported, edit, problem):
    name = _edit_first_answer(exported, edit)
    before = database_fingerprint()
    err = StringIO()

    with pytest.raises(CommandError, match=f"nothing imported from {exported}: 1 file problem"):
        call_command("recordings", "import", str(exported), stderr=err, stdout=StringIO())

    assert err.getvalue().startswith(f"rejected: {name}: ")
    assert problem in err.getvalue()
    assert not fingerprint_changes(before, database_fingerprint())


def test_it_refuses_a_tape_whose_entries_use_more_tokens_than_a_result_can_hold(exported):
    name, (header, *entries) = _first_file(exported)
    for entry in entries:
        entry["response"]["usage"].update(input_tokens=2**31 - 1, output_tokens=0)
    (exported / name).write_text("".join(json.dumps(line) + "\n" for line in [header, *entries]))

    with pytest.raises(RecordingFilesRejected) as rejected:
        recordings_import(directory=exported)

    assert rejected.value.problems == [
        f"{name}: its entries use {(2**31 - 1) * len(entries)} tokens in all; a recording of one case holds at most "
        f"{2**31 - 1}"
    ]


def test_it_refuses_unknown_keys_in_the_manifest_and_a_header(exported):
    manifest = json.loads((exported / MANIFEST).read_text())
    manifest["recordings"][0]["note"] = "hand-edited"
    (exported / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(RecordingFilesRejected) as rejected:
        recordings_import(directory=exported)
    assert rejected.value.problems == [
        f"{MANIFEST}: recordings[0]: unknown field 'note'; known fields: case, file, model"
    ]

    del manifest["recordings"][0]["note"]
    (exported / MANIFEST).write_text(json.dumps(manifest))
    name, (header, *entries) = _first_file(exported)
    (exported / name).write_text("".join(json.dumps(line) + "\n" for line in [{**header, "extra": 2}, *entries]))
    with pytest.raises(RecordingFilesRejected) as rejected:
        recordings_import(directory=exported)
    assert rejected.value.problems == [
        f"{name}: line 1 (the header): unknown field 'extra'; known fields: case, entries, format, model, "
        "recorded_at, suite"
    ]


def test_it_still_imports_what_it_exported(exported):
    call_command("recordings", "import", str(exported), stdout=StringIO())
    assert Recording.objects.count() == 2


@pytest.mark.parametrize("bad", [10**25, -1000000, "³", 1.5, True])
def test_it_says_a_stored_tape_with_unusable_usage_is_unreadable_in_the_cases_error(order_suite, order_desk, bad):
    # Stored before import checked tapes (or written to the database some other way): the replay reads it.
    run_execute(run_id=run_create(suite=order_suite, model_keys=[CAREFUL], mode=Run.Mode.RECORD).pk)
    for recording in Recording.objects.all():
        recording.entries[0]["response"]["usage"]["input_tokens"] = bad
        recording.save()

    run = run_execute(run_id=run_create(suite=order_suite, model_keys=[CAREFUL], mode=Run.Mode.REPLAY).pk)

    results = list(CaseResult.objects.filter(run=run))
    assert len(results) == 2, run.reason
    for result in results:
        assert result.status == "error"
        assert result.reason.startswith(
            "the recording is unreadable: usage.input_tokens must be a whole number from 0 to 2147483647, got "
        ), result.reason
        assert "in the request at turn 0 step 0 — re-record it" in result.reason


# --- 10: the run pages' forms refuse fields they do not know ------------------------------------------------------


@pytest.fixture
def staff_pages(live_server, admin_user) -> Iterator[httpx.Client]:
    with session_client(live_server.url, admin_user) as client:
        yield client


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"budget_token": "5", "trial": "3"}, ["budget_token", "trial"]),
        ({"zzz": "1"}, ["zzz"]),
        ({"x" * 500: "1"}, ["x" * 60 + "…"]),
    ],
)
def test_it_refuses_a_trigger_form_with_an_unknown_field_naming_it_and_starts_nothing(
    staff_pages, order_suite, careful_and_hasty, extra, named
):
    before = database_fingerprint()

    response = staff_pages.post("/runs/new/", data={"suite": order_suite.pk, "models": CAREFUL, **extra})

    assert response.status_code == 400
    page = response.text.replace("&#x27;", "'")
    for name in named:
        assert f"'{name}'" in page
    assert "known fields: budget_cost, budget_tokens, case_filter, mode, models, suite, trials" in page
    assert not Run.objects.exists()
    assert not fingerprint_changes(before, database_fingerprint())


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(name=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=30))
def test_it_refuses_any_field_the_trigger_form_does_not_declare(admin_client, order_suite, careful_and_hasty, name):
    known = {"suite", "models", "case_filter", "mode", "trials", "budget_tokens", "budget_cost", "csrfmiddlewaretoken"}
    if name in known:
        return
    response = admin_client.post("/runs/new/", {"suite": order_suite.pk, "models": CAREFUL, name: "1"})
    assert response.status_code == 400
    assert not Run.objects.exists()


@pytest.mark.parametrize(("action", "done"), [("cancel", "Nothing was cancelled."), ("resume", "Nothing was resumed.")])
def test_it_refuses_a_cancel_or_resume_button_post_with_an_unknown_field(staff_pages, order_suite, make_run, action,
                                                                         done):
    status = Run.Status.PENDING if action == "cancel" else Run.Status.CANCELLED
    run = make_run(order_suite, status=status)
    before = database_fingerprint()

    response = staff_pages.post(f"/runs/{run.pk}/{action}/", data={"zzz": "1"})

    assert response.status_code == 400
    assert f"Unknown field 'zzz'; this request takes no fields. {done}" in response.text.replace("&#x27;", "'")
    assert not fingerprint_changes(before, database_fingerprint())
    run.refresh_from_db()
    assert run.status == status and not run.cancel_requested


def test_it_still_cancels_with_the_buttons_own_post(staff_pages, order_suite, make_run):
    run = make_run(order_suite, status=Run.Status.PENDING)
    response = staff_pages.post(f"/runs/{run.pk}/cancel/", data={"csrfmiddlewaretoken": "t" * 32})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
