"""The segmenter verifies the extraction model's whole answer: every way it can be wrong is refused, with the reason."""

from __future__ import annotations

import json
import re

import pytest

from agenthost.transcripts import transcript_load
from recording.segmenter import Segment, SegmentationError, segments_parse, segments_request
from tests.recording.conftest import THREE_TOPICS, segments_answer

FOUR_TURNS = 4


def parse(answer: str, turn_count: int = FOUR_TURNS) -> list[Segment]:
    return segments_parse(answer, turn_count=turn_count)


MALFORMED = "the JSON is malformed: "


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("I would split it after the second turn.", "the answer contains no JSON"),
        ("", "the answer contains no JSON"),
        ('{"segments": [{"name": "A", "firstTurn": 0, "lastTurn": 3}', MALFORMED + "Expecting"),
        ('{"segments": [{"name": "A", firstTurn: 0}]}', MALFORMED + "Expecting property name"),
        ('{"cases": []}', MALFORMED + 'expected {"segments": [...]}'),
        ('{"segments": {"name": "A"}}', MALFORMED + 'expected {"segments": [...]}'),
        ('{"segments": ["turns 0-3"]}', MALFORMED + "segment 0 is not an object"),
        ('{"segments": [{"name": "A", "firstTurn": 0}]}', MALFORMED + "segment 0 has no whole-number lastTurn"),
        ('{"segments": [{"firstTurn": "0", "lastTurn": 3}]}', MALFORMED + "segment 0 has no whole-number firstTurn"),
        ('{"segments": [{"firstTurn": 0, "lastTurn": 3.0}]}', MALFORMED + "segment 0 has no whole-number lastTurn"),
        ('{"segments": [{"firstTurn": false, "lastTurn": 3}]}', MALFORMED + "segment 0 has no whole-number firstTurn"),
        ('{"segments": [{"name": 7, "firstTurn": 0, "lastTurn": 3}]}', MALFORMED + "the name of segment 0 is not text"),
        ('{"segments": []}', "the answer has no segments"),
    ],
)
def test_it_rejects_an_answer_it_cannot_read(answer, why):
    with pytest.raises(SegmentationError) as raised:
        parse(answer)

    assert str(raised.value).startswith(why)


@pytest.mark.parametrize(
    ("segments", "why"),
    [
        ((("A", 1, 3),), "the first segment starts at turn 1, not at turn 0"),
        ((("A", 0, 0), ("B", 2, 3)), "segments 0 and 1 leave a gap: turns 1–1 are in no segment"),
        ((("A", 0, 1), ("B", 3, 3)), "segments 0 and 1 leave a gap: turns 2–2 are in no segment"),
        ((("A", 0, 2), ("B", 2, 3)), "segments 0 and 1 overlap: they both cover turns 2–2"),
        ((("A", 0, 3), ("B", 0, 3)), "segments 0 and 1 overlap: they both cover turns 0–3"),
        ((("A", 0, 4),), "segment 0 (turns 0–4) is out of range: the conversation has turns 0–3"),
        ((("A", -1, 3),), "segment 0 (turns -1–3) is out of range"),
        ((("A", 0, 1), ("B", 3, 2)), "segment 1 (turns 3–2) is out of range"),
        ((("A", 0, 1), ("B", 2, 2)), "the last turn (3) is not covered: the last segment ends at turn 2"),
        ((("A", 0, 0),), "the last turn (3) is not covered"),
    ],
)
def test_it_rejects_segments_that_do_not_cover_every_turn_exactly_once(segments, why):
    with pytest.raises(SegmentationError) as raised:
        parse(segments_answer(*segments))

    assert why in str(raised.value)


def test_it_names_every_fault_it_finds_at_once():
    with pytest.raises(SegmentationError) as raised:
        parse(segments_answer(("A", 1, 1), ("B", 3, 5)))

    reasons = str(raised.value).split("; ")
    assert reasons == [
        "segment 1 (turns 3–5) is out of range: the conversation has turns 0–3",
        "the first segment starts at turn 1, not at turn 0",
        "segments 0 and 1 leave a gap: turns 2–2 are in no segment",
    ]


def test_it_accepts_segments_that_tile_the_conversation():
    segments = parse(segments_answer(("Order status", 0, 1), ("Cancel an order", 2, 2), ("Delivered order", 3, 3)))

    assert segments == [
        Segment("Order status", 0, 1), Segment("Cancel an order", 2, 2), Segment("Delivered order", 3, 3)
    ]


def test_it_reads_the_json_out_of_prose_and_code_fences():
    answer = "Here you go:\n```json\n" + segments_answer(("Everything", 0, 3)) + "\n```\nHope that helps!"

    assert parse(answer) == [Segment("Everything", 0, 3)]


def test_it_names_a_blank_segment_after_its_turns_and_keeps_a_long_name_whole():
    # A 70-character name was cut to 60 without a word; it is kept whole, as a case name of up to 200 is.
    long_name = "Cancel an order that was placed by mistake and ask for the refund to go to a gift card"
    answer = json.dumps(
        {
            "segments": [
                {"name": "   ", "firstTurn": 0, "lastTurn": 1},
                {"firstTurn": 2, "lastTurn": 2},
                {"name": long_name, "firstTurn": 3, "lastTurn": 3},
            ]
        }
    )

    blank, missing, long = parse(answer)

    assert blank.name == "Turns 0–1" and missing.name == "Turns 2–2"
    assert long.name == long_name and len(long_name) > 60


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("x" * 201, "the name of segment 0 is 201 characters long; a case name has at most 200"),
        ("Order\x00status", "the name of segment 0 contains NUL"),
        ("Order \ud800", "the name of segment 0 contains NUL (\\u0000) or a lone surrogate"),
    ],
)
def test_it_refuses_a_segment_name_no_case_may_have(name, words):
    answer = json.dumps({"segments": [{"name": name, "firstTurn": 0, "lastTurn": 3}]})

    with pytest.raises(SegmentationError, match=re.escape(words)):
        parse(answer)


@pytest.mark.django_db
def test_it_sends_only_user_messages_and_tool_names(three_topics):
    request = segments_request(transcript=transcript_load(conversation=three_topics), model="extractor")

    system, user = request.messages
    assert system["role"] == "system" and "JSON" in system["content"]
    assert json.loads(user["content"]) == {
        "turns": [
            {"turn": 0, "user": THREE_TOPICS[0], "tools": ["track_order"]},
            {"turn": 1, "user": THREE_TOPICS[1], "tools": ["track_order"]},
            {"turn": 2, "user": THREE_TOPICS[2], "tools": ["track_order", "void_order",
                                                           "util-email-handle_email_sender"]},
            {"turn": 3, "user": THREE_TOPICS[3], "tools": ["track_order"]},
        ]
    }
    assert request.tools == []
